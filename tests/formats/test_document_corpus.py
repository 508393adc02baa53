"""Documents made by real tools, kept whole (issues 43 and 53): a markdown text turned by pandoc
into .docx, .odt, .html, .epub and .pptx at test time, LibreOffice's .docx, .odt and .odp of
those where it is installed, and the documents the installed python-docx and odfdo ship,
translated by a stand-in that upper-cases its text. For each: every non-empty text element in
is a non-empty element out, translated (but an HTML page's CSS, a field, a book's identifiers);
the same text is the same unit (so translates the same) in every format; the structure is
the same (slides, notes, tables, chapters); and the output opens in the tool that made the
input."""

from __future__ import annotations

import io
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from helpers.documents import need, plain, shout, soffice, text_nodes, translated, units
from mt.formats import DocumentError, read_document, translate_documents

MARKDOWN = """\
---
title: Aesop's fables
---

# The North Wind and the Sun

The North Wind and the Sun disputed which was the stronger, when a traveller came
along wrapped in a warm cloak.[^wind]

::: notes
Tell the story slowly, and show the **cloak**.
:::

They agreed that the one who first made the traveller take off his cloak should be
considered stronger than the other.

## The Fox and the Grapes

A fox saw some *ripe black grapes* hanging from a trellised vine. See
[the fable](https://example.org/fox) and the picture ![A fox under a vine](fox.png).

| Animal | What it wanted |
|--------|----------------|
| The fox | The grapes on the vine |
| The crow | A piece of cheese |

[^wind]: An old story, told in many languages.
"""
PANDOC = ("docx", "odt", "html", "epub")  # pandoc writes and reads them
LIBREOFFICE = {"docx": "docx:MS Word 2007 XML", "odt": "odt"}  # what each is converted to
# the elements whose text is kept: an HTML page's CSS and scripts, a field (a slide's number),
# a book's identifiers, dates, language and authors' names
KEPT = {"style", "script", "page-number", "fld", "identifier", "date", "language", "creator"}
KEPT.add("meta")


def pandoc(source: Path, out: Path, *options: str) -> Path:
    subprocess.run([need("pandoc"), str(source), "-o", str(out), *options], check=True)
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The markdown as pandoc writes it in each format (HTML standalone: its title)."""
    folder = tmp_path_factory.mktemp("corpus")
    source = folder / "fables.md"
    source.write_text(MARKDOWN, encoding="utf-8")
    return {
        kind: pandoc(source, folder / f"fables.{kind}", *(["-s"] if kind == "html" else []))
        for kind in (*PANDOC, "pptx")
    }


@pytest.fixture(scope="module")
def remade(made, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """pandoc's .odt as LibreOffice writes it as a .docx, and pandoc's .docx as an .odt."""
    need("soffice")
    folder = tmp_path_factory.mktemp("libreoffice")
    other = {"docx": made["odt"], "odt": made["docx"]}
    return {kind: soffice(other[kind], LIBREOFFICE[kind], folder) for kind in LIBREOFFICE}


def whole(source: Path, out: Path) -> None:
    """Every non-blank text of `source` is one of `out`, in order, in the same element, and
    translated (code, fields and identifiers kept)."""
    kind = source.suffix[1:]
    before = text_nodes(kind, source.read_bytes())
    assert before, f"{source.name}: no text found"
    assert text_nodes(kind, out.read_bytes()) == shouted(before)


def shouted(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(element, text) each as the stand-in translates it."""
    return [(tag, text if tag in KEPT else text.upper()) for tag, text in texts]


def translated_file(source: Path, folder: Path) -> Path:
    out = folder / "translated" / source.name
    out.parent.mkdir(exist_ok=True)
    out.write_bytes(translated(source.name, source.read_bytes()))
    return out


@pytest.mark.parametrize("kind", PANDOC)
def test_pandoc_documents_come_back_whole_translated_and_open_in_pandoc(made, kind, tmp_path):
    out = translated_file(made[kind], tmp_path)
    whole(made[kind], out)
    before, after = plain(made[kind]), plain(out)  # pandoc reads the output back
    assert after == [line.upper() for line in before]
    assert any("FOX SAW SOME" in line for line in after)


def soffice_text(path: Path, folder: Path) -> list[str]:
    """The document's non-blank lines as LibreOffice reads them (its plain text export)."""
    text = soffice(path, "txt", folder).read_text(encoding="utf-8-sig")
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("kind", LIBREOFFICE)
def test_libreoffice_documents_come_back_whole_translated_and_open_in_libreoffice(
    remade, kind, tmp_path
):
    out = translated_file(remade[kind], tmp_path)
    whole(remade[kind], out)
    before = soffice_text(remade[kind], tmp_path / "before")
    assert soffice_text(out, tmp_path / "after") == [line.upper() for line in before]
    assert "The Fox and the Grapes" in before and len(before) > 10


@pytest.fixture(scope="module")
def slides(made, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """pandoc's .pptx, and LibreOffice's .odp of it (where installed, else skipped then)."""
    folder = tmp_path_factory.mktemp("impress")
    return {"pptx": made["pptx"], "odp": lambda: soffice(made["pptx"], "odp", folder)}


def deck(path: Path) -> list:
    """A presentation's structure, slide by slide, as its library reads it: each shape's kind,
    name and table size, and whether it has notes (.pptx); each frame, table row and notes
    of a page (.odp)."""
    if path.suffix == ".pptx":
        import pptx

        return [
            (
                [(s.shape_type, s.name, s.has_table and len(s.table.rows)) for s in slide.shapes],
                slide.has_notes_slide,
            )
            for slide in pptx.Presentation(str(path)).slides
        ]
    import odfdo

    parts = "descendant::draw:frame | descendant::table:table-row | descendant::presentation:notes"
    pages = odfdo.Document(str(path)).body.get_draw_pages()
    return [[(e.tag, e.get_attribute("draw:name")) for e in p.get_elements(parts)] for p in pages]


@pytest.mark.parametrize("kind", ["pptx", "odp"])
def test_slides_come_back_whole_with_their_slides_notes_and_tables(slides, kind, tmp_path):
    source = slides[kind] if kind == "pptx" else slides[kind]()
    out = translated_file(source, tmp_path)
    whole(source, out)
    shape = deck(source)
    assert deck(out) == shape and len(shape) == 3  # the title, the fables, the footnotes
    texts = units(source)
    assert "Tell the story slowly, and show the cloak." in texts  # the speaker notes
    assert {"The fox", "The grapes on the vine", "A piece of cheese"} <= set(texts)  # a table


@pytest.mark.parametrize("kind", ["pptx", "odp"])
def test_slides_translated_open_in_libreoffice(slides, kind, tmp_path):
    source = slides[kind] if kind == "pptx" else slides[kind]()
    out = translated_file(source, tmp_path)
    other = "odp" if kind == "pptx" else "pptx"  # LibreOffice reads it and writes the other
    before = text_nodes(other, soffice(source, other, tmp_path / "before").read_bytes())
    assert text_nodes(other, soffice(out, other, tmp_path / "after").read_bytes()) == shouted(
        before
    )
    assert ("t" if other == "pptx" else "span", "The Fox and the Grapes") in before


def test_a_book_keeps_its_members_chapters_and_table_of_contents(made, tmp_path):
    source = made["epub"]
    out = translated_file(source, tmp_path)
    before, after = zipfile.ZipFile(source), zipfile.ZipFile(out)
    listing = [(i.filename, i.compress_type) for i in before.infolist()]
    assert [(i.filename, i.compress_type) for i in after.infolist()] == listing
    assert listing[0] == ("mimetype", zipfile.ZIP_STORED)
    for name in before.namelist():  # every element and attribute where it was
        if name.endswith((".xhtml", ".ncx", ".opf")):
            assert elements(after.read(name)) == elements(before.read(name)), name
        else:
            assert after.read(name) == before.read(name), name
    ncx = [text for tag, text in text_nodes("epub", out.read_bytes()) if tag == "text"]
    # the book's title, each entry's label
    title, fables = "AESOP’S FABLES", ["THE NORTH WIND AND THE SUN", "THE FOX AND THE GRAPES"]
    assert ncx == [title, title, *fables]
    dc_title = "{http://purl.org/dc/elements/1.1/}title"
    assert etree.fromstring(after.read("EPUB/content.opf")).findtext(f".//{dc_title}") == title


def elements(xml: bytes) -> list[tuple[str, dict]]:
    """An XML document's elements in order, with their attributes (those a reader sees as
    text translated)."""
    root = etree.fromstring(xml)
    return [
        (e.tag, {k: v.upper() if k in ("alt", "title") else v for k, v in e.attrib.items()})
        for e in root.iter()
    ]


BODY = [
    "The North Wind and the Sun",
    "The Fox and the Grapes",
    "They agreed that the one who first made the traveller take off his cloak should be "
    "considered stronger than the other.",
    "The grapes on the vine",
    "An old story, told in many languages.",
]


@pytest.mark.parametrize("tool", ["pandoc", "libreoffice"])
def test_the_same_text_is_the_same_unit_in_every_format(request, tool):
    documents = request.getfixturevalue("made" if tool == "pandoc" else "remade")
    # (a .pptx's footnote is text of its own: "1. An old story ...")
    found = {kind: units(path) for kind, path in documents.items() if kind != "pptx"}
    for kind in set(found) & {"html", "epub"}:
        found[kind] = [text.removesuffix("↩︎") for text in found[kind]]  # a note's way back
        assert "A fox under a vine" in found[kind]  # alt text: HTML's own
        assert "Aesop’s fables" in found[kind]  # the title (pandoc's quote)
    for kind, texts in found.items():
        assert set(BODY) <= set(texts), kind


def package_file(package: str, path: str) -> Path:
    """A document a package ships (its templates: neither ships test files)."""
    found = Path(pytest.importorskip(package).__file__).parent / path
    if not found.exists():
        pytest.skip(f"this {package} ships no {path}")
    return found


def test_odfdos_own_document_comes_back_whole_and_opens_in_odfdo_and_pandoc(tmp_path):
    import odfdo

    source = package_file("odfdo", "templates/lpod_styles.odt")
    out = translated_file(source, tmp_path)
    whole(source, out)
    assert "TITLE ONE" in odfdo.Document(str(out)).body.text_recursive
    assert plain(out) == [line.upper() for line in plain(source)]


def test_odfdos_own_document_translated_opens_in_libreoffice_that_made_it(tmp_path):
    source = package_file("odfdo", "templates/lpod_styles.odt")
    out = translated_file(source, tmp_path)
    before = soffice_text(source, tmp_path / "before")
    assert soffice_text(out, tmp_path / "after") == [line.upper() for line in before]
    assert "How to highlight a word." in before


def test_python_docxs_own_document_holds_no_text_and_is_refused_in_one_line():
    source = package_file("docx", "templates/default.docx")  # an empty page
    with pytest.raises(DocumentError, match=r"^default.docx: no text to translate$"):
        read_document(source.name, source.read_bytes())


def test_docx_headers_footers_endnotes_and_text_boxes_are_translated(made, tmp_path):
    import docx

    document = docx.Document(made["docx"])
    section = document.sections[0]
    section.different_first_page_header_footer = True
    section.header.paragraphs[0].text = "A header of the fables"
    section.footer.paragraphs[0].text = "A footer of the fables"
    section.first_page_header.paragraphs[0].text = "The first page's header"
    source = tmp_path / "extras.docx"
    document.save(source)
    texts = units(source)
    for text in ("A header of the fables", "A footer of the fables", "The first page's header"):
        assert text in texts
    out = docx.Document(io.BytesIO(translated(source.name, source.read_bytes())))
    assert out.sections[0].first_page_header.paragraphs[0].text == "THE FIRST PAGE'S HEADER"


def test_odt_headers_and_footers_are_translated(made, tmp_path):
    import odfdo

    document = odfdo.Document(str(made["odt"]))
    page = document.get_style("master-page", "Standard") or document.get_styles("master-page")[0]
    page.set_page_header("A header of the fables")
    page.set_page_footer("A footer of the fables")
    source = tmp_path / "extras.odt"
    document.save(str(source))
    texts = units(source)
    assert {"A header of the fables", "A footer of the fables"} <= set(texts)
    styles = zipfile.ZipFile(translated_file(source, tmp_path)).read("styles.xml").decode()
    assert "A HEADER OF THE FABLES" in styles and "A FOOTER OF THE FABLES" in styles


def test_html_attributes_a_reader_sees_are_translated():
    page = (
        '<html><head><title>The fables</title></head><body><p>A <img src="f.png" alt="A fox">'
        ' in a field.</p><input placeholder="Your name"><button aria-label="Close the page">'
        'x</button><input type="submit" value="Send it"><input type="reset" value="Start over">'
        '<input type="hidden" value="keep me"><button value="sent as is">Send</button>'
        "</body></html>"
    )
    document = read_document("page.html", page.encode())
    out = translate_documents([document], shout)[0].decode()
    for text in ("THE FABLES", 'alt="A FOX"', 'placeholder="YOUR NAME"', 'value="SEND IT"'):
        assert text in out
    assert 'aria-label="CLOSE THE PAGE"' in out and 'value="START OVER"' in out
    # what a form sends, not what a reader sees: a hidden field's value, a <button>'s (its
    # label is its content)
    assert 'value="keep me"' in out and 'value="sent as is">SEND</button>' in out


def test_html_undefined_and_broken_entities_are_text_as_a_browser_reads_them():
    page = "<p title='a &x; b'>Fish &x; chips &#xZZ; and &#0; or &#xD800; &amp end</p>"
    document = read_document("page.html", page.encode())
    assert document.units == ["Fish &x; chips &#xZZ; and \ufffd or \ufffd & end", "a &x; b"]
    out = translate_documents([document], shout)[0]
    # well formed: it reads back as the same text, translated, the entities escaped
    before = text_nodes("html", page.encode())
    assert text_nodes("html", out) == [(tag, text.upper()) for tag, text in before]
    assert out.decode().startswith('<p title="A &amp;X; B">FISH &amp;X; CHIPS &amp;#XZZ; AND')


@pytest.mark.parametrize(
    ("declared", "culprit"),
    [(False, "(Entity 'x' not defined, line "), (True, "(word/document.xml: an entity, &x;, ")],
)
def test_an_entity_in_a_docx_is_refused_in_one_line_naming_it(made, tmp_path, declared, culprit):
    source = zipfile.ZipFile(made["docx"])
    broken = tmp_path / "entity.docx"
    with zipfile.ZipFile(broken, "w") as out:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "word/document.xml":
                data = re.sub(rb"(<w:t[^>]*>)(The Fox)", rb"\1&x;\2", data, count=1)
                if declared:  # defined in the part's DTD, which python-docx drops on saving
                    data = data.replace(b"?>", b'?><!DOCTYPE w:document [<!ENTITY x "X">]>', 1)
            out.writestr(item, data)
    with pytest.raises(DocumentError) as raised:
        read_document(broken.name, broken.read_bytes())
    message = str(raised.value)
    assert message.startswith(f"entity.docx: not a valid .docx file {culprit}")
    assert "\n" not in message
