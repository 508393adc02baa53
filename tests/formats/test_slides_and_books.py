"""Presentations and books (issue 53) made here by their libraries, where what they hold is
known: a .pptx's shapes, groups, tables, runs, line breaks, fields and notes, an .odp's frames
and notes, an EPUB 2 book's chapter (named characters, comments, code, attributes), table of
contents and metadata, each translated by a stand-in that upper-cases its text and read back.
The same documents made by pandoc and LibreOffice: test_document_corpus.py; hostile ones:
test_hostile_archives.py."""

from __future__ import annotations

import io
import zipfile

import pytest
from lxml import etree

from helpers.documents import epub_file, replaced, shout, translated
from mt.formats import DocumentError, read_document, translate_documents

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def pptx_file() -> bytes:
    """Two slides: a title; a text box of a sentence in three runs (its middle one bold) and
    a line break, a group holding a text box, a table, a slide number, and notes."""
    pptx = pytest.importorskip("pptx")
    from pptx.util import Inches

    made = pptx.Presentation()
    title = made.slides.add_slide(made.slide_layouts[0])
    title.shapes.title.text = "A short title"
    slide = made.slides.add_slide(made.slide_layouts[6])  # blank
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame
    runs = [box.paragraphs[0].add_run() for _ in range(3)]
    for run, text in zip(runs, ["I went to ", "Paris", " last summer."]):
        run.text = text
    runs[1].font.bold = True
    box.paragraphs[0].add_line_break()
    box.paragraphs[0].add_run().text = "It rained."
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(3), Inches(2), Inches(1)).text = "In a group."
    table = slide.shapes.add_table(2, 2, Inches(5), Inches(1), Inches(3), Inches(1)).table
    table.cell(0, 0).text, table.cell(1, 1).text = "Good morning.", "The cat sleeps."
    field = etree.SubElement(box.add_paragraph()._p, f"{A}fld", id="{1}", type="slidenum")
    etree.SubElement(field, f"{A}t").text = "2"
    slide.notes_slide.notes_text_frame.text = "Speak slowly."
    data = io.BytesIO()
    made.save(data)
    return data.getvalue()


def test_a_pptx_keeps_its_slides_shapes_runs_and_notes():
    pptx = pytest.importorskip("pptx")
    data = pptx_file()
    document = read_document("a.pptx", data)
    assert document.units == [
        "A short title",
        "I went to Paris last summer. It rained.",
        "2",  # a field: in its own paragraph here, kept
        "In a group.",
        "Good morning.",
        "The cat sleeps.",
        "Speak slowly.",
    ]
    back = pptx.Presentation(io.BytesIO(translate_documents([document], shout)[0]))
    title, slide = back.slides
    assert title.shapes.title.text == "A SHORT TITLE"
    box, group, table = slide.shapes
    runs = box.text_frame.paragraphs[0].runs
    assert [(r.text, r.font.bold) for r in runs] == [
        ("I WENT TO ", None),
        ("PARIS", True),
        (" LAST SUMMER.", None),
        ("IT RAINED.", None),
    ]
    assert box.text_frame.text == "I WENT TO PARIS LAST SUMMER.\vIT RAINED.\n2"  # the break
    assert group.shapes[0].text == "IN A GROUP."
    cells = [c.text for row in table.table.rows for c in row.cells]
    assert cells == ["GOOD MORNING.", "", "", "THE CAT SLEEPS."]
    assert slide.notes_slide.notes_text_frame.text == "SPEAK SLOWLY."
    assert [len(s.shapes) for s in back.slides] == [2, 3] and not title.has_notes_slide


def test_a_pptx_slide_holding_an_entity_is_refused_in_one_line():
    data = pptx_file()
    slide = zipfile.ZipFile(io.BytesIO(data)).read("ppt/slides/slide2.xml")
    slide = slide.replace(b"?>", b'?><!DOCTYPE p:sld [<!ENTITY x "X">]>', 1)
    broken = replaced(data, "ppt/slides/slide2.xml", slide.replace(b">Paris<", b">&x;<"))
    with pytest.raises(DocumentError) as raised:
        read_document("a.pptx", broken)
    assert str(raised.value) == (
        "a.pptx: not a valid .pptx file (ppt/slides/slide2.xml: an entity, &x;, which "
        "PowerPoint cannot read)"
    )


def odp_file() -> bytes:
    """A slide of a title and a text box, with notes."""
    odfdo = pytest.importorskip("odfdo")
    made = odfdo.Document("presentation")
    page = odfdo.DrawPage("page1", name="The fables")
    title = odfdo.Frame.text_frame("A title", size=("10cm", "2cm"), position=("1cm", "1cm"))
    body = odfdo.Frame.text_frame("The fox ran.", size=("10cm", "5cm"), position=("1cm", "4cm"))
    page.append(title)
    page.append(body)
    notes = odfdo.Element.from_tag("presentation:notes")
    notes.append(odfdo.Frame.text_frame("Speak slowly.", size=("10cm", "5cm")))
    page.append(notes)
    made.body.append(page)
    data = io.BytesIO()
    made.save(data)
    return data.getvalue()


def test_an_odp_keeps_its_slides_frames_and_notes():
    odfdo = pytest.importorskip("odfdo")
    document = read_document("a.odp", odp_file())
    assert document.units == ["A title", "The fox ran.", "Speak slowly."]
    back = odfdo.Document(io.BytesIO(translate_documents([document], shout)[0]))
    pages = back.body.get_draw_pages()  # odfdo's template's empty one, then ours
    assert len(pages) == 2
    page = pages[-1]
    texts = [p.text_recursive for p in page.get_elements("descendant::text:p")]
    assert texts == ["A TITLE", "THE FOX RAN.", "SPEAK SLOWLY."]
    assert page.get_attribute("draw:name") == "The fables"  # a name, not text a reader sees


def test_a_text_document_named_odp_is_refused_in_one_line():
    odfdo = pytest.importorskip("odfdo")
    made, data = odfdo.Document("text"), io.BytesIO()
    made.body.append(odfdo.Paragraph("Hello."))
    made.save(data)
    with pytest.raises(DocumentError) as raised:
        read_document("a.odp", data.getvalue())
    assert str(raised.value) == (
        "a.odp: not a valid .odp file (an OpenDocument text, not a presentation document)"
    )


CHAPTER = (
    "<h1>The fox</h1><!-- a note: leave me -->"
    "<p>A&nbsp;fox saw some <em>ripe grapes</em> on the caf&eacute; wall.<br/>"
    "Type <code>make  grapes</code> to<!-- x --> eat them.</p>"
    '<p><img src="fox.png" alt="A fox under a vine"/> &amp; more &#169;</p>'
    "<style>/*<![CDATA[*/ p > em { color: red } /*]]>*/</style>"
)


def test_a_book_chapter_is_read_as_xml_its_markup_kept():
    data = epub_file(CHAPTER)
    document = read_document("a.epub", data)
    assert document.units == [
        "The fables",  # the table of contents (first in the manifest): the book's title,
        "The fables",  # its entry's label
        "The fables",  # the chapter: its title ...
        "The fox",
        "A fox saw some ripe grapes on the café wall.",  # (&nbsp;: a space to the model)
        "Type make grapes to eat them.",
        "& more ©",
        "A fox under a vine",
        "The fables",  # the metadata: the title and the description
        "Old stories about animals.",
    ]
    out = zipfile.ZipFile(io.BytesIO(translated("a.epub", data)))
    chapter = out.read("OEBPS/text/one.xhtml").decode()
    assert chapter.startswith("<?xml version='1.0' encoding='UTF-8'?>\n<!DOCTYPE html>\n<html")
    assert (
        "<h1>THE FOX</h1><!-- a note: leave me --><p>A FOX SAW SOME <em>RIPE GRAPES</em> "
        "ON THE CAFÉ WALL.<br/>TYPE <code>make  grapes</code> TO<!-- x --> EAT THEM.</p>"
    ) in chapter
    assert '<img src="fox.png" alt="A FOX UNDER A VINE"/> &amp; MORE ©</p>' in chapter
    assert "/*<![CDATA[*/ p > em { color: red } /*]]>*/</style>" in chapter
    ncx = out.read("OEBPS/toc.ncx").decode()
    assert "<docTitle><text>THE FABLES</text>" in ncx and "<text>Aesop</text>" in ncx
    opf = out.read("OEBPS/content.opf").decode()
    assert "<dc:title>THE FABLES</dc:title><dc:creator>Aesop</dc:creator>" in opf
    assert '<dc:identifier id="id">urn:x</dc:identifier>' in opf
    assert out.read("OEBPS/style.css") == b"p { margin: 0 }"


def test_an_epub_3_nav_is_translated_as_a_chapter():
    nav = (
        '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml" '
        'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title></head><body>'
        '<nav epub:type="toc"><ol><li><a href="one.xhtml">The fox</a></li></ol></nav>'
        "</body></html>"
    )
    opf = zipfile.ZipFile(io.BytesIO(epub_file())).read("OEBPS/content.opf")
    opf = opf.replace(
        b"<item id=",
        b'<item id="nav" href="text/nav.xhtml" media-type="application/xhtml+xml" '
        b'properties="nav"/><item id=',
        1,
    )
    data = epub_file(**{"OEBPS/content.opf": opf, "OEBPS/text/nav.xhtml": nav.encode()})
    assert read_document("a.epub", data).units[:2] == ["Contents", "The fox"]
    out = zipfile.ZipFile(io.BytesIO(translated("a.epub", data)))
    assert '<a href="one.xhtml">THE FOX</a>' in out.read("OEBPS/text/nav.xhtml").decode()


def test_a_word_document_named_pptx_is_refused_in_one_line():
    docx = pytest.importorskip("docx")
    data = io.BytesIO()
    docx.Document().save(data)
    with pytest.raises(DocumentError) as raised:
        read_document("a.pptx", data.getvalue())
    assert str(raised.value) == (
        "a.pptx: not a valid .pptx file (it is not a PowerPoint file, content type is "
        "'application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml')"
    )
