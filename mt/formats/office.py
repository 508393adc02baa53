"""Word processor files: .docx (python-docx) and .odt (odfdo), a paragraph or heading a block
and its runs (spans, links) its pieces, so that styles, bold and italic runs, tables, headers
and footers stay as they were; only the text inside runs changes. The zip is checked before
either library opens it, and the paragraphs are counted as they are walked (limits.py)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from lxml import etree

from .limits import TextLimit, unzipped
from .pieces import Block, Document

Piece = tuple[str, Callable[[str], None] | None]  # its text, how to replace it (None: kept)
ODF_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"  # the text: prefix, as lxml writes it
ODF_STYLE = "{urn:oasis:names:tc:opendocument:xmlns:style:1.0}"


# the parts of a .docx that hold text a reader sees: the body (its tables, content controls
# and text boxes), every header and footer (first-page and even-page ones too), the notes
DOCX_TEXT = re.compile(r"/word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")


def read_docx(data: bytes, limit: TextLimit) -> Document:
    """A .docx file's paragraphs as blocks of runs, those of every part that holds text (a
    part python-docx does not model, the notes, parsed and written back here). An entity
    (`&x;`, declared in the part's DTD: one that is not is an XML error) is refused: the
    part is written without its DTD, and Word would not open the file."""
    import docx

    document = docx.Document(unzipped(data, limit.where))
    parts = [p for p in document.part.package.iter_parts() if DOCX_TEXT.fullmatch(p.partname)]
    roots = [_docx_root(part) for part in parts]
    for part, root in zip(parts, roots):
        for entity in root.iter(etree.Entity):
            raise ValueError(f"{part.partname[1:]}: an entity, {entity}, which Word cannot read")
    paragraphs = (p for root in roots for p in _docx_paragraphs(root))
    pieces = ([_docx_run(r) for r in _docx_runs(*p)] for p in paragraphs)

    def save(out: io.BytesIO) -> None:
        for part, root in zip(parts, roots):
            if not hasattr(part, "element"):  # a part of bytes: its XML written back
                part._blob = etree.tostring(root, encoding="UTF-8", standalone=True)
        document.save(out)

    return _document(pieces, save, limit)


def _docx_root(part: Any) -> Any:
    """The XML of a part: python-docx's own, or parsed from the bytes of one it keeps as
    bytes (the notes)."""
    from docx.oxml.parser import parse_xml

    return part.element if hasattr(part, "element") else parse_xml(part.blob)


def _docx_paragraphs(root: Any) -> Iterator[tuple[Any, Any]]:
    """Every paragraph of a part, in order, however deep: in table cells (a merged cell
    once), content controls and text boxes, which python-docx's iter_inner_content does not
    reach; its element and its Paragraph each."""
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    for p in root.iter(qn("w:p")):
        yield p, Paragraph(p, None)


def _docx_runs(p: Any, paragraph: Any) -> Iterator[Any]:
    """The runs of paragraph `p`, those in its links too: its iter_inner_content's, found by
    lxml rather than by python-docx's XPath (20 µs a paragraph, an empty one too)."""
    from docx.oxml.ns import qn
    from docx.text.hyperlink import Hyperlink
    from docx.text.run import Run

    for item in p.iterchildren(qn("w:r"), qn("w:hyperlink")):
        if item.tag == qn("w:hyperlink"):
            yield from Hyperlink(item, paragraph).runs
        else:
            yield Run(item, paragraph)


def _docx_run(run: Any) -> Piece:
    """A run's text; kept if it holds a picture or a page break, which setting text drops."""
    if not all(isinstance(item, str) for item in run.iter_inner_content()):
        return run.text, None
    return run.text, lambda text: setattr(run, "text", text)


def read_odt(data: bytes, limit: TextLimit) -> Document:
    """An .odt file's paragraphs and headings (body, tables, frames, notes, and the pages'
    headers and footers) as blocks of spans."""
    import odfdo

    document = odfdo.Document(unzipped(data, limit.where))
    if document.get_type() != "text":
        raise ValueError(f"an OpenDocument {document.get_type()}, not a text document")
    # lxml's iter, in document order as the XPath "descendant::text:p | descendant::text:h"
    # but one at a time: get_elements would wrap every paragraph before the first is counted;
    # the body's, then the page styles' (headers and footers, in styles.xml)
    pages = document.styles.root._xml_element.iter(f"{ODF_STYLE}master-page")
    paragraphs = (
        p
        for root in (document.body._xml_element, *pages)
        for p in root.iter(f"{ODF_TEXT}p", f"{ODF_TEXT}h")
    )
    # a note's or a frame's paragraphs are blocks of their own, kept whole in the outer one
    pieces = (list(_odt_pieces(odfdo.Element.from_tag(p))) for p in paragraphs)
    return _document(pieces, lambda out: _save_odt(document, out), limit)


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


def _document(
    walk: Iterable[list[Piece]], save: Callable[[io.BytesIO], None], limit: TextLimit
) -> Document:
    """The blocks of the paragraphs `walk` reads (each as its pieces), each counted by `limit`
    as it is read, written back by setting each piece and saving."""
    paragraphs, blocks = [], []
    for pieces in walk:
        kept = {i for i, (_, replace) in enumerate(pieces) if replace is None}
        blocks.append(limit.count(Block([text for text, _ in pieces], kept), "paragraph"))
        # one without text is written back as it is: no hold on its elements (memory)
        paragraphs.append(pieces if blocks[-1].source else [])

    def write(found: list[list[str]]) -> bytes:
        for pieces, texts in zip(paragraphs, found):
            for (text, replace), new in zip(pieces, texts):
                if replace is not None and new != text:
                    replace(new)
        out = io.BytesIO()
        save(out)
        return out.getvalue()

    return Document(blocks, write, unit="paragraph")
