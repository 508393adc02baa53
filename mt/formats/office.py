"""Office files: .docx (python-docx), .odt and .odp (odfdo), a paragraph or heading a block
and its text elements (a .docx's `w:t`, an .odt paragraph's text and that of its spans and
links) its pieces, so that styles, bold and italic runs, fields, notes, pictures, tables,
headers and footers stay as they were; only those texts change. Deleted text (tracked
changes) and a field's code are never text to translate. The zip is checked before either
library opens it, and the paragraphs are counted as they are walked (limits.py); each walk is
a loop over the XML in document order, one visit an element."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lxml import etree

from .limits import TextLimit, unzipped
from .pieces import Block, Document

Piece = tuple[str, Callable[[str], None] | None]  # its text, how to replace it (None: kept)
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"  # w:, as lxml writes it
# the parts of a .docx that hold text a reader sees: the body (its tables, content controls
# and text boxes), every header and footer (first-page and even-page ones too), the notes and
# the comments (as an .odt's are, in its body)
DOCX_TEXT = re.compile(r"/word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml")
# what a paragraph holds that is not its text: properties (a content control's too), deleted
# and moved-away text, math, a text box's paragraphs (blocks of their own), and the copy of
# its content for readers that lack a feature (mc:Fallback: the text would be read twice)
DOCX_SKIPPED = {
    *(f"{W}{tag}" for tag in ("pPr", "rPr", "sdtPr", "sdtEndPr", "del", "moveFrom", "p")),
    "{http://schemas.openxmlformats.org/officeDocument/2006/math}oMath",
    "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback",
}
DOCX_SPACES = {f"{W}{tag}" for tag in ("tab", "ptab", "br", "cr")}

ODF_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"  # text:, as lxml writes it
ODF_STYLE = "{urn:oasis:names:tc:opendocument:xmlns:style:1.0}"
# paragraphs, headings, and the title an index (a table of contents) is remade with
ODT_PARAGRAPHS = {f"{ODF_TEXT}{tag}" for tag in ("p", "h", "index-title-template")}
ODT_INLINE = {f"{ODF_TEXT}{tag}" for tag in ("span", "a", "meta")}  # a sentence runs through
ODT_SPACES = {f"{ODF_TEXT}{tag}" for tag in ("s", "tab", "line-break")}
ODT_NOTE = f"{ODF_TEXT}note"  # its citation a mark, its paragraphs blocks of their own


def read_docx(data: bytes, limit: TextLimit) -> Document:
    """A .docx file's paragraphs as blocks of their text elements, those of every part that
    holds text (a part python-docx does not model, the notes, parsed and written back here);
    a part holding an entity is refused (`refuse_entities`)."""
    import docx

    document = docx.Document(unzipped(data, limit.where))
    parts = [p for p in document.part.package.iter_parts() if DOCX_TEXT.fullmatch(p.partname)]
    roots = [_docx_root(part) for part in parts]
    for part, root in zip(parts, roots):
        refuse_entities(root, part.partname[1:], "Word")
    # every paragraph however deep: in table cells, content controls and text boxes
    paragraphs = (p for root in roots for p in root.iter(f"{W}p"))
    pieces = (list(_docx_pieces(p)) for p in paragraphs)

    def save(out: io.BytesIO) -> None:
        for part, root in zip(parts, roots):
            if not hasattr(part, "element"):  # a part of bytes: its XML written back
                part._blob = etree.tostring(root, encoding="UTF-8", standalone=True)
        document.save(out)

    return document_of(pieces, save, limit)


def refuse_entities(root: Any, where: str, reader: str) -> None:
    """Refuse an XML part of a zip that holds an entity (`&x;`, declared in its DTD: one that
    is not is an XML error): the library writes it without its DTD, and `reader` would not
    open the file."""
    for entity in root.iter(etree.Entity):
        raise ValueError(f"{where}: an entity, {entity}, which {reader} cannot read")


def _docx_root(part: Any) -> Any:
    """The XML of a part: python-docx's own, or parsed from the bytes of one it keeps as
    bytes (the notes)."""
    from docx.oxml.parser import parse_xml

    return part.element if hasattr(part, "element") else parse_xml(part.blob)


def _docx_pieces(p: Any) -> Iterator[Piece]:
    """The text elements (`w:t`) of paragraph `p` in order, however deep its runs sit (links,
    insertions, content controls, fields' results, smart tags, custom XML), each replaced
    alone so that whatever else its run holds stays (a picture, a field's code, a note's
    mark); a tab or a line break a space kept. A complex field's code (between its `begin`
    and `separate`) is never text, even a field's result nested in it."""
    fields = _Fields()
    walk = etree.iterwalk(p, events=("start",))
    next(walk)  # `p` itself
    for _, element in walk:
        if element.tag in DOCX_SKIPPED:
            walk.skip_subtree()
        elif element.tag == f"{W}fldChar":
            fields.mark(element.get(f"{W}fldCharType"))
        elif fields.in_code:
            continue
        elif element.tag == f"{W}t":
            yield element.text or "", partial(_set_docx_text, element)
        elif element.tag in DOCX_SPACES:
            yield " ", None
        elif element.tag == f"{W}noBreakHyphen":
            yield "-", None


@dataclass
class _Fields:
    """The complex fields open at a point of a paragraph, as their marks say: `begin` opens
    one (its code follows), `separate` starts its result, `end` closes it; a stray mark (of a
    field begun in another paragraph) changes nothing. Counted, not searched: a paragraph
    may hold thousands."""

    past_code: list[bool] = field(default_factory=list)  # each open field's
    in_code: int = 0  # how many open fields are in their code

    def mark(self, kind: str | None) -> None:
        if kind == "begin":
            self.past_code.append(False)
            self.in_code += 1
        elif kind == "separate" and self.past_code and not self.past_code[-1]:
            self.past_code[-1] = True
            self.in_code -= 1
        elif kind == "end" and self.past_code:
            self.in_code -= not self.past_code.pop()


def _set_docx_text(t: Any, text: str) -> None:
    t.text = text
    if text != text.strip():  # else Word drops its edge spaces
        t.set(XML_SPACE, "preserve")


def read_odt(data: bytes, limit: TextLimit) -> Document:
    """An .odt file's paragraphs and headings (body, tables, frames, notes, comments, and the
    pages' headers and footers; not the deleted text of its tracked changes) as blocks of
    their texts: their own, their spans' and links', and that after each inline element."""
    return _read_odf(data, limit, "text")


def read_odp(data: bytes, limit: TextLimit) -> Document:
    """An .odp file's paragraphs, as an .odt's are read: those of every slide's frames, text
    boxes, shapes and tables, and of its speaker notes. The master slides' are kept as they
    are: their placeholders' prompts ("Click to edit ...") are not shown in a slide show."""
    return _read_odf(data, limit, "presentation")


def _read_odf(data: bytes, limit: TextLimit, kind: str) -> Document:
    """An OpenDocument file of `kind` (text, presentation): its body's paragraphs, then a
    text document's page styles' (headers and footers, in styles.xml)."""
    import odfdo

    document = odfdo.Document(unzipped(data, limit.where))
    if document.get_type() != kind:
        raise ValueError(f"an OpenDocument {document.get_type()}, not a {kind} document")
    roots = [document.body._xml_element]
    if kind == "text":
        roots += document.styles.root._xml_element.iter(f"{ODF_STYLE}master-page")
    paragraphs = (p for root in roots for p in _odt_paragraphs(root))
    pieces = (list(_odt_pieces(p)) for p in paragraphs)
    return document_of(pieces, lambda out: _save_odt(document, out), limit)


def _odt_paragraphs(root: Any) -> Iterator[Any]:
    """Every paragraph and heading under `root` in document order, one at a time (odfdo's
    get_elements would wrap them all before the first is counted), a note's or a frame's as
    well as those around it; not those of the tracked changes, deleted text kept as it was."""
    walk = etree.iterwalk(root, events=("start",))
    for _, element in walk:
        if element.tag == f"{ODF_TEXT}tracked-changes":
            walk.skip_subtree()
        elif element.tag in ODT_PARAGRAPHS:
            yield element


def _save_odt(document: Any, out: io.BytesIO) -> None:
    """Save; a cell's text is its paragraphs, so a copy of the old text in its
    office:string-value (odfdo writes one) is dropped rather than left stale."""
    for cell in document.body.get_elements("descendant::table:table-cell[@office:string-value]"):
        cell.del_attribute("office:string-value")
    document.save(out)


def _odt_pieces(p: Any) -> Iterator[Piece]:
    """The text of paragraph `p`, of the spans, links and annotated text inside it, and after
    each child, in order. A field (a date, a page number, a reference) is part of its
    sentence but kept as it reads; a space, tab or line break is a space kept; a note, a
    frame or a comment is a mark kept (its paragraphs are blocks of their own)."""
    walk = etree.iterwalk(p, events=("start", "end"))
    for event, element in walk:
        if event == "end":
            if element is not p:
                yield element.tail or "", partial(setattr, element, "tail")
        elif element is p or element.tag in ODT_INLINE:
            yield element.text or "", partial(setattr, element, "text")
        else:
            walk.skip_subtree()
            yield _odt_kept(element), None


def _odt_kept(element: Any) -> str:
    """What an element that is not a sentence's own text reads as in it."""
    tag = element.tag  # a function for a comment
    if tag in ODT_SPACES:
        return " "
    if isinstance(tag, str) and tag.startswith(ODF_TEXT) and tag != ODT_NOTE:
        return "".join(element.itertext())  # a field's text: bookmarks and such have none
    return ""


def document_of(
    walk: Iterable[list[Piece]],
    save: Callable[[io.BytesIO], None],
    limit: TextLimit,
    unit: str = "paragraph",
) -> Document:
    """The blocks of the paragraphs `walk` reads (each as its pieces), each counted by `limit`
    as it is read (a `unit`), written back by setting each piece and saving."""
    paragraphs, blocks = [], []
    for pieces in walk:
        kept = {i for i, (_, replace) in enumerate(pieces) if replace is None}
        blocks.append(limit.count(Block([text for text, _ in pieces], kept), unit))
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

    return Document(blocks, write, unit=unit)
