"""What a .docx or an .odt paragraph holds besides plain runs (issue 43, part 3): tracked
insertions and deletions, fields, content controls, smart tags, custom XML, links, bookmarks,
notes, spaces and breaks, text boxes and frames, tables, headers and footers. Each document is
made by its own library (python-docx, odfdo), the elements Word and LibreOffice write added as
XML, and translated by a stand-in that upper-cases its text. Then every non-empty text element
in is a non-empty element out, what a reader sees is translated and nothing else (deleted
text, a field's code, an .odt field's value), and the output opens in its library and in
pandoc, which reads the same text, translated (and in LibreOffice, where installed)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from helpers.documents import plain, soffice, text_nodes, translated, units
from mt.formats import DocumentError, read_document

docx = pytest.importorskip("docx")
odfdo = pytest.importorskip("odfdo")

OOXML = "http://schemas.openxmlformats.org"
WPS = "http://schemas.microsoft.com/office/word/2010/wordprocessingShape"
NAMESPACES = " ".join(
    [
        f'xmlns:w="{OOXML}/wordprocessingml/2006/main" xmlns:v="urn:schemas-microsoft-com:vml"',
        f'xmlns:mc="{OOXML}/markup-compatibility/2006" xmlns:a="{OOXML}/drawingml/2006/main"',
        f'xmlns:wp="{OOXML}/drawingml/2006/wordprocessingDrawing" xmlns:wps="{WPS}"',
    ]
)
# Word's own markup: a sentence through an insertion, a deletion, a link to a bookmark, a smart
# tag, custom XML, an inline content control, a simple field and a complex one; a field whose
# code holds the result of another (kept: code); a block content control; a text box as Word
# 97 wrote it (VML) and as Word writes it now (DrawingML, with a VML copy for older readers)
DOCX_BODY = f"""<w:body {NAMESPACES}>
<w:p><w:bookmarkStart w:id="0" w:name="wind"/><w:r><w:t>The North Wind</w:t></w:r>
<w:bookmarkEnd w:id="0"/></w:p>
<w:p><w:r><w:t xml:space="preserve">The fox </w:t></w:r>
<w:ins w:id="1" w:author="Ann"><w:r><w:t xml:space="preserve">quickly </w:t></w:r></w:ins>
<w:del w:id="2" w:author="Ann"><w:r><w:delText xml:space="preserve">slowly </w:delText></w:r>
</w:del>
<w:r><w:t xml:space="preserve">ran to </w:t></w:r>
<w:hyperlink w:anchor="wind"><w:r><w:t>the river</w:t></w:r></w:hyperlink>
<w:smartTag w:uri="urn:places" w:element="place"><w:r><w:t xml:space="preserve"> near </w:t></w:r>
</w:smartTag><w:customXml w:element="town"><w:r><w:t>the town</w:t></w:r></w:customXml>
<w:sdt><w:sdtPr><w:alias w:val="Day"/></w:sdtPr><w:sdtContent><w:r>
<w:t xml:space="preserve"> on Monday</w:t></w:r></w:sdtContent></w:sdt>
<w:r><w:t xml:space="preserve">, page </w:t></w:r>
<w:fldSimple w:instr=" PAGE "><w:r><w:t>one</w:t></w:r></w:fldSimple>
<w:r><w:t xml:space="preserve"> of </w:t><w:fldChar w:fldCharType="begin"/></w:r>
<w:r><w:instrText xml:space="preserve"> REF wind \\h </w:instrText></w:r>
<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>the first story</w:t></w:r>
<w:r><w:fldChar w:fldCharType="end"/><w:t>.</w:t><w:tab/><w:t>Then it rained.</w:t></w:r></w:p>
<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> IF </w:instrText></w:r>
<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> REF wind </w:instrText></w:r>
<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>Boreas</w:t></w:r>
<w:r><w:fldChar w:fldCharType="end"/></w:r>
<w:r><w:instrText xml:space="preserve"> = "Boreas" "A cold wind" "A warm wind" </w:instrText></w:r>
<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>A cold wind</w:t></w:r>
<w:r><w:fldChar w:fldCharType="end"/></w:r></w:p>
<w:sdt><w:sdtPr><w:alias w:val="Moral"/></w:sdtPr><w:sdtContent><w:p><w:r>
<w:t>Persuasion is better than force.</w:t></w:r></w:p></w:sdtContent></w:sdt>
<w:p><w:r><w:t xml:space="preserve">A box: </w:t></w:r><w:r><w:pict><v:shape style="width:200pt">
<v:textbox><w:txbxContent><w:p><w:r><w:t>The sun came out.</w:t></w:r></w:p></w:txbxContent>
</v:textbox></v:shape></w:pict></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">A new box: </w:t></w:r><w:r><mc:AlternateContent>
<mc:Choice Requires="wps"><w:drawing><wp:inline><wp:extent cx="2000000" cy="500000"/>
<wp:docPr id="1" name="Box"/><a:graphic><a:graphicData uri="{WPS}"><wps:wsp><wps:spPr/>
<wps:txbx><w:txbxContent><w:p><w:r><w:t>The wind dropped.</w:t></w:r></w:p></w:txbxContent>
</wps:txbx><wps:bodyPr/></wps:wsp></a:graphicData></a:graphic></wp:inline></w:drawing>
</mc:Choice><mc:Fallback><w:pict><v:rect style="width:150pt"><v:textbox><w:txbxContent><w:p>
<w:r><w:t>The wind dropped.</w:t></w:r></w:p></w:txbxContent></v:textbox></v:rect></w:pict>
</mc:Fallback></mc:AlternateContent></w:r></w:p>
</w:body>"""
DOCX_SENTENCE = (
    "The fox quickly ran to the river near the town on Monday, page one of the first story. "
    "Then it rained."
)
CODE_RESULT = "Boreas"  # a field's result inside another field's code: code, never translated


def made_docx(folder: Path) -> Path:
    """A document by python-docx: DOCX_BODY, a table, a comment, a header and a footer."""
    from docx.oxml.parser import parse_xml

    document = docx.Document()
    body = document.element.body
    for element in parse_xml(DOCX_BODY):
        body.insert(len(body) - 1, element)  # before the section's settings
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "A cell", "Another cell"
    document.add_comment(document.paragraphs[0].runs, text="A comment on the wind.", author="A")
    section = document.sections[0]
    section.header.paragraphs[0].text = "A header"
    section.footer.paragraphs[0].text = "A footer"
    path = folder / "word.docx"
    document.save(path)
    return path


def test_docx_inline_elements_keep_their_text_and_only_what_a_reader_sees_is_translated(
    tmp_path,
):
    source = made_docx(tmp_path)
    assert DOCX_SENTENCE in units(source)  # the insertion in, the deletion and field code out
    texts = units(source)
    assert {"A cold wind", "The sun came out.", "A comment on the wind."} <= set(texts)
    assert texts.count("The wind dropped.") == 2  # the text box and its copy
    data = source.read_bytes()
    out = tmp_path / "out.docx"
    out.write_bytes(translated(source.name, data))
    kept = {"delText", "instrText"}  # deleted text, fields' code
    expected = [
        (tag, text if tag in kept or text == CODE_RESULT else text.upper())
        for tag, text in text_nodes("docx", data)
    ]
    assert text_nodes("docx", out.read_bytes()) == expected
    assert ("delText", "slowly ") in expected and ("t", CODE_RESULT) in expected
    reopened = docx.Document(out)  # it opens, in python-docx and in pandoc
    assert reopened.sections[0].header.paragraphs[0].text == "A HEADER"
    # pandoc shows the code's nested result as text too (it does not evaluate an IF): kept
    seen = [line.upper().replace(CODE_RESULT.upper(), CODE_RESULT) for line in plain(source)]
    assert plain(out) == seen


# LibreOffice's own markup: a sentence through a span, a link, a bookmark, a note, spaces,
# a tab, a line break, a date and a page number (fields: kept), a change's marks; a frame;
# and the tracked changes (deleted text: kept)
ODT_BODY = (
    "<office:text %s><text:tracked-changes>"
    '<text:changed-region text:id="ct1"><text:deletion><office:change-info>'
    "<dc:creator>Ann</dc:creator><dc:date>2024-01-01T00:00:00</dc:date></office:change-info>"
    "<text:p>A deleted sentence.</text:p></text:deletion></text:changed-region>"
    '<text:changed-region text:id="ct2"><text:insertion><office:change-info>'
    "<dc:creator>Ann</dc:creator><dc:date>2024-01-01T00:00:00</dc:date></office:change-info>"
    "</text:insertion></text:changed-region></text:tracked-changes>"
    '<text:h text:outline-level="1"><text:bookmark-start text:name="wind"/>The North Wind'
    '<text:bookmark-end text:name="wind"/></text:h>'
    '<text:p>The fox <text:change-start text:change-id="ct2"/>quickly'
    '<text:change-end text:change-id="ct2"/> <text:change text:change-id="ct1"/>ran to '
    '<text:span text:style-name="Strong">the <text:a xlink:href="#wind" xlink:type="simple">'
    'river</text:a></text:span><text:s text:c="2"/>near the town<text:note text:id="n1" '
    'text:note-class="footnote"><text:note-citation>1</text:note-citation><text:note-body>'
    "<text:p>A note on the town.</text:p></text:note-body></text:note> on "
    '<text:date>May 4</text:date>, page <text:page-number text:select-page="current">7'
    "</text:page-number>.<text:tab/>Then<text:line-break/>it rained.</text:p>"
    '<text:p>A frame: <draw:frame draw:name="f" svg:width="5cm"><draw:text-box>'
    "<text:p>The sun came out.</text:p></draw:text-box></draw:frame></text:p>"
    "</office:text>"
)
ODT_SENTENCE = "The fox quickly ran to the river near the town on May 4, page 7. Then it rained."
# kept: fields, a note's mark, a change's author and date, the deleted text
ODT_KEPT = {"date", "page-number", "note-citation", "creator"}
DELETED = "A deleted sentence."


def made_odt(folder: Path) -> Path:
    """A document by odfdo: ODT_BODY, a table, a header and a footer."""
    document = odfdo.Document("text")
    text = document.body._xml_element
    namespaces = " ".join(f'xmlns:{k}="{v}"' for k, v in text.nsmap.items())
    for child in list(text):
        text.remove(child)
    for child in etree.fromstring(ODT_BODY % namespaces):
        text.append(child)
    table = odfdo.Table("T", width=2, height=1)
    table.set_value("A1", "A cell")
    table.set_value("B1", "Another cell")
    document.body.append(table)
    page = document.get_styles("master-page")[0]
    page.set_page_header("A header")
    page.set_page_footer("A footer")
    path = folder / "writer.odt"
    document.save(str(path))
    return path


def test_odt_inline_elements_keep_their_text_and_only_what_a_reader_sees_is_translated(
    tmp_path,
):
    source = made_odt(tmp_path)
    texts = units(source)
    assert ODT_SENTENCE in texts  # spans, links, fields in; the note's, the frame's apart
    assert {"The North Wind", "A note on the town.", "The sun came out."} <= set(texts)
    assert DELETED not in " ".join(texts)
    data = source.read_bytes()
    out = tmp_path / "out.odt"
    out.write_bytes(translated(source.name, data))

    expected = [
        (tag, text if tag in ODT_KEPT or text == DELETED else text.upper())
        for tag, text in text_nodes("odt", data)
    ]
    assert text_nodes("odt", out.read_bytes()) == expected
    assert ("date", "May 4") in expected and ("p", DELETED) in expected
    reopened = odfdo.Document(str(out))  # it opens, in odfdo and in pandoc
    assert "THE SUN CAME OUT." in reopened.body.text_recursive
    assert plain(out) == [line.upper() for line in plain(source)]


def zip_edited(path: Path, member: str, edit) -> bytes:
    """The zip at `path` with its `member` edited."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as copy:
        for item in source.infolist():
            data = source.read(item.filename)
            copy.writestr(item.filename, edit(data) if item.filename == member else data)
    return out.getvalue()


LAUGHS = b'<!ENTITY a "aaaaaaaaaa">' + b"".join(
    b'<!ENTITY %c "%s">' % (98 + i, b"&%c;" % (97 + i) * 10) for i in range(9)
)


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (b"", "Entity 'x' not defined"),  # undefined: an XML error
        (b'<!ENTITY x SYSTEM "file:///etc/hostname">', "Entity 'x' not defined"),  # never read
        (LAUGHS.replace(b"<!ENTITY j", b"<!ENTITY x"), "amplification"),  # a billion laughs
    ],
)
def test_an_odt_entity_undefined_external_or_exploding_is_refused_in_one_line(
    tmp_path, declared, message
):
    def edit(xml: bytes) -> bytes:
        xml = xml.replace(b"The fox ", b"The fox &x; ", 1)
        return xml.replace(b"?>", b"?><!DOCTYPE x [" + declared + b"]>", 1)

    data = zip_edited(made_odt(tmp_path), "content.xml", edit)
    with pytest.raises(DocumentError) as raised:
        read_document("entity.odt", data)
    found = str(raised.value)
    assert found.startswith("entity.odt: not a valid .odt file (") and message in found
    assert "\n" not in found


def test_an_odt_entity_declared_in_its_dtd_is_read_as_its_text(tmp_path):
    def edit(xml: bytes) -> bytes:
        xml = xml.replace(b"The fox ", b"The fox &x; ", 1)
        return xml.replace(b"?>", b'?><!DOCTYPE x [<!ENTITY x "and the cat">]>', 1)

    source = tmp_path / "entity.odt"
    source.write_bytes(zip_edited(made_odt(tmp_path), "content.xml", edit))
    assert any(text.startswith("The fox and the cat quickly ran") for text in units(source))
    out = tmp_path / "out.odt"
    out.write_bytes(translated(source.name, source.read_bytes()))
    assert any("THE FOX AND THE CAT QUICKLY RAN" in line for line in plain(out))


@pytest.mark.parametrize("make", [made_docx, made_odt])
def test_the_translated_markup_opens_in_libreoffice_too(make, tmp_path):
    source = make(tmp_path)
    out = tmp_path / "out" / source.name
    out.parent.mkdir()
    out.write_bytes(translated(source.name, source.read_bytes()))
    text = soffice(out, "txt", tmp_path).read_text(encoding="utf-8-sig")
    assert "THE FOX QUICKLY" in text and "THE NORTH WIND" in text and "A CELL" in text
