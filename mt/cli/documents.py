"""`mt translate`'s documents: a --file of a markup format or --format html read before the
model loads, translated with their layout kept (mt.formats), written to --out or printed."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import ConfigError


def input_documents(texts: list[str] | None, file: str | None, fmt: str, out: str | None):
    """The documents to translate, (name, Document) each, read before the model loads: a
    --file of a markup format or --format html; none for plain text."""
    from ..data.text_input import read_lines
    from ..formats import FILE_FORMATS, ZIP_FORMATS, read_document, read_markup

    documents = set(FILE_FORMATS) - {".txt"}  # any other --file is plain text, a line a
    # text (test.en, mono.es ...), but for the document formats it does not read
    documents |= {".pdf", ".doc", ".rtf", ".ods", ".ppt", ".xls", ".xlsx"}

    if fmt not in ("text", "html"):
        raise ConfigError(f"--format {fmt}: expected text or html")
    suffix = Path(file).suffix.lower() if file and file != "-" else ""
    if fmt == "text" and suffix not in documents:
        if out:
            kinds = ", ".join(kind for kind in FILE_FORMATS if kind != ".txt")
            raise ConfigError(f"--out is for documents: a --file {kinds}")
        return []
    if texts and file:
        raise ConfigError("give sentences as arguments or --file, not both")
    if file and suffix in documents:
        if not Path(file).is_file():
            raise ConfigError(f"--file {file}: no such file")
        document = read_document(file, Path(file).read_bytes())  # a format it reads
        if suffix in ZIP_FORMATS and not out:
            raise ConfigError(f"--file {file}: a {suffix} file needs --out")
        if out and Path(out).resolve() == Path(file).resolve():
            raise ConfigError(f"--out {out}: is the --file itself (it would be lost)")
        return [(file, document)]
    if file or not texts:  # the whole file or stdin is one HTML document
        where = f"--file {file}" if file and file != "-" else "stdin"
        return [(where, read_markup("\n".join(read_lines(file or "-", "--file")), where))]
    if out and len(texts) > 1:
        raise ConfigError("--out: one document at a time (give one argument, or --file)")
    return [
        (f"argument {i}", read_markup(text, f"argument {i}")) for i, text in enumerate(texts, 1)
    ]


def plain_translate(translator, split: bool = True):
    """The translate function documents are given: each text's best translation, its
    sentences (`split`: cut into sentences) and layout kept (mt.text), all of them decoded in
    the usual batches."""
    from ..text import translate_texts

    return lambda texts: translate_texts(translator, texts, split=split)


def write_documents(translator, documents: list, out: str | None, split: bool = True) -> None:
    """Each document translated, written to --out or printed."""
    from ..files import atomic_path
    from ..formats import translate_documents

    written = translate_documents([doc for _, doc in documents], plain_translate(translator, split))
    if out:
        with atomic_path(Path(out)) as tmp:
            tmp.write_bytes(written[0])
        typer.echo(f"wrote {out}", err=True)
        return
    for data in written:
        text = data.decode("utf-8")
        typer.echo(text, nl=not text.endswith("\n"))
