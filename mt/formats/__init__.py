"""Documents translated with their layout kept: HTML pages and fragments, .docx, .odt, .pptx,
.odp and .epub files, .srt subtitles and plain text, each read into blocks of pieces
(pieces.py) and written back.

`read_document(name, data, max_chars)` reads a file by its suffix, its cost bounded
(limits.py: its text within `max_chars`, a zip within caps); `translate_documents(documents,
translate)` translates documents with one call of `translate` (texts in, translations out, in
order), so that their texts are decoded in the usual batches."""

from __future__ import annotations

from collections.abc import Callable

from .limits import DocumentError, DocumentTooLarge, MarkupTooCostly, TextLimit
from .pieces import Document, Translate, translate_documents

__all__ = ["FILE_FORMATS", "ZIP_FORMATS", "Document", "DocumentError", "DocumentTooLarge"]
__all__ += ["MarkupTooCostly", "Translate"]
__all__ += ["read_document", "read_markup", "translate_documents"]


def _html(data: bytes, limit: TextLimit) -> Document:
    from .html import read_html

    return read_html(_utf8(data), limit)


def _text(data: bytes, limit: TextLimit) -> Document:
    from .plain import read_text

    return read_text(_utf8(data), limit)


def _srt(data: bytes, limit: TextLimit) -> Document:
    from .subtitles import read_srt

    return read_srt(_utf8(data), limit)


def _docx(data: bytes, limit: TextLimit) -> Document:
    from .office import read_docx

    return read_docx(data, limit)


def _odt(data: bytes, limit: TextLimit) -> Document:
    from .office import read_odt

    return read_odt(data, limit)


def _pptx(data: bytes, limit: TextLimit) -> Document:
    from .slides import read_pptx

    return read_pptx(data, limit)


def _odp(data: bytes, limit: TextLimit) -> Document:
    from .office import read_odp

    return read_odp(data, limit)


def _epub(data: bytes, limit: TextLimit) -> Document:
    from .epub import read_epub

    return read_epub(data, limit)


READERS: dict[str, Callable[[bytes, TextLimit], Document]] = {
    ".txt": _text,
    ".html": _html,
    ".htm": _html,
    ".docx": _docx,
    ".odt": _odt,
    ".pptx": _pptx,
    ".odp": _odp,
    ".epub": _epub,
    ".srt": _srt,
}
FILE_FORMATS = tuple(READERS)  # what /translate_file and mt translate --file take
ZIP_FORMATS = (".docx", ".odt", ".pptx", ".odp", ".epub")  # not text: written to a file


class NotText(ValueError):
    """Bytes that are not UTF-8."""


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise NotText(f"not UTF-8 text (byte {e.start})") from None


def read_document(name: str, data: bytes, max_chars: int | None = None) -> Document:
    """The file `name` (its suffix says its format) read from `data`, or a DocumentError
    naming it: a format not supported, a broken file, a file with no text; DocumentTooLarge
    for one past its limits (limits.py: more text or blocks than `max_chars`, None: no
    limit; a zip past its caps)."""
    suffix = "." + name.rpartition(".")[2].lower() if "." in name else ""
    if suffix not in READERS:
        raise DocumentError(f"{name}: file format not supported (only {', '.join(FILE_FORMATS)})")
    try:
        document = READERS[suffix](data, TextLimit(name, max_chars))
    except DocumentError:
        raise
    except NotText as e:
        raise DocumentError(f"{name}: {e}") from None
    except Exception as e:  # whatever the library raises for a broken file: a zip that is
        # not one, XML that does not parse, a timing that does not read
        why = " ".join(str(e).split())[:200] or type(e).__name__
        raise DocumentError(f"{name}: not a valid {suffix} file ({why})") from None
    if not document.units:
        raise DocumentError(f"{name}: no text to translate")
    return document


def read_markup(text: str, where: str, max_chars: int | None = None) -> Document:
    """An HTML text (a /translate `q` or an argument of mt translate --format html), or a
    DocumentError naming `where` if it holds no text, markup only; DocumentTooLarge if its
    text (not its markup) is longer than `max_chars` (None: no limit)."""
    from .html import read_html

    document = read_html(text, TextLimit(where))  # read whole: its count is exact
    if not document.units:
        raise DocumentError(f"{where}: no text to translate (markup only)")
    chars = sum(len(unit) for unit in document.units)
    if max_chars is not None and chars > max_chars:
        raise DocumentTooLarge(f"{where}: {chars} characters of text, at most {max_chars}")
    return document
