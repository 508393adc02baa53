"""Word processor files: .docx (python-docx) and .odt (odfdo), a paragraph or heading a block
and its runs (spans, links) its pieces, so that styles, bold and italic runs, tables, headers
and footers stay as they were; only the text inside runs changes."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

from .pieces import Block, Document

Piece = tuple[str, Callable[[str], None] | None]  # its text, how to replace it (None: kept)


def read_docx(data: bytes) -> Document:
    """A .docx file's paragraphs as blocks of runs: the body's (tables, content controls and
    text boxes included), the headers' and the footers'."""
    import docx

    document = docx.Document(io.BytesIO(data))
    paragraphs = [
        p for part in (document, *_headers_and_footers(document)) for p in _docx_paragraphs(part)
    ]
    return _document([[_docx_run(r) for r in _docx_runs(p)] for p in paragraphs], document.save)


def _headers_and_footers(document: Any) -> Iterator[Any]:
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield part


def _docx_paragraphs(container: Any) -> Iterator[Any]:
    """Every paragraph of a document, header or footer, in order, however deep: in table
    cells (a merged cell once), content controls and text boxes, which python-docx's
    iter_inner_content does not reach."""
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    for p in container.part.element.iter(qn("w:p")):
        yield Paragraph(p, container)


def _docx_runs(paragraph: Any) -> Iterator[Any]:
    from docx.text.hyperlink import Hyperlink

    for item in paragraph.iter_inner_content():
        yield from item.runs if isinstance(item, Hyperlink) else [item]


def _docx_run(run: Any) -> Piece:
    """A run's text; kept if it holds a picture or a page break, which setting text drops."""
    if not all(isinstance(item, str) for item in run.iter_inner_content()):
        return run.text, None
    return run.text, lambda text: setattr(run, "text", text)


def read_odt(data: bytes) -> Document:
    """An .odt file's paragraphs and headings (body, tables, frames) as blocks of spans."""
    import odfdo

    document = odfdo.Document(io.BytesIO(data))
    if document.get_type() != "text":
        raise ValueError(f"an OpenDocument {document.get_type()}, not a text document")
    paragraphs = document.body.get_elements("descendant::text:p | descendant::text:h")
    # a note's or a frame's paragraphs are blocks of their own, kept whole in the outer one
    return _document(
        [list(_odt_pieces(p)) for p in paragraphs], lambda out: _save_odt(document, out)
    )


def _save_odt(document: Any, out: io.BytesIO) -> None:
    """Save; a cell's text is its paragraphs, so a copy of the old text in its
    office:string-value (odfdo writes one) is dropped rather than left stale."""
    for cell in document.body.get_elements("descendant::table:table-cell[@office:string-value]"):
        cell.del_attribute("office:string-value")
    document.save(out)


ODT_INLINE = {"text:span", "text:a"}  # elements a sentence runs through


def _odt_pieces(element: Any) -> Iterator[Piece]:
    """The text of `element`, then of each child (spans and links inside it in turn) and the
    text after it; spaces, tabs, line breaks, notes and frames are kept as they are."""
    yield element.text or "", lambda text: setattr(element, "text", text)
    for child in element.children:
        if child.tag in ODT_INLINE:
            yield from _odt_pieces(child)
        else:
            yield " " if child.tag in ("text:s", "text:tab", "text:line-break") else "", None
        yield child.tail or "", lambda text, child=child: setattr(child, "tail", text)


def _document(paragraphs: list[list[Piece]], save: Callable[[io.BytesIO], None]) -> Document:
    """The blocks of `paragraphs`, written back by setting each piece and saving."""
    blocks = [Block([text for text, _ in pieces]) for pieces in paragraphs]
    for block, pieces in zip(blocks, paragraphs):
        block.kept |= {i for i, (_, replace) in enumerate(pieces) if replace is None}

    def write(found: list[list[str]]) -> bytes:
        for pieces, texts in zip(paragraphs, found):
            for (text, replace), new in zip(pieces, texts):
                if replace is not None and new != text:
                    replace(new)
        out = io.BytesIO()
        save(out)
        return out.getvalue()

    return Document(blocks, write, unit="paragraph")
