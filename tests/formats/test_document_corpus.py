"""Documents made by real tools, kept whole (issue 43): a markdown text turned by pandoc into
.docx, .odt and .html at test time (and by LibreOffice from those where it is installed),
translated by a stand-in that upper-cases its text. For each: every non-empty text element in
is a non-empty element out, the same text is the same unit (so translates the same) in every
format, and the output opens in the tool that made it."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from mt.formats import DocumentError, read_document, translate_documents

MARKDOWN = """\
---
title: Aesop's fables
---

# The North Wind and the Sun

The North Wind and the Sun disputed which was the stronger, when a traveller came
along wrapped in a warm cloak.[^wind]

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
DOCUMENTS = ("docx", "odt", "html")


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed (pandoc: make install; LibreOffice: by hand)")
    return found


def shout(texts: list[str]) -> list[str]:
    """The stand-in translation: the same text always the same translation."""
    return [text.upper() for text in texts]


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
        for kind in DOCUMENTS
    }


def translated(path: Path) -> bytes:
    (document,) = [read_document(path.name, path.read_bytes())]
    return translate_documents([document], shout)[0]


def plain(path: Path) -> list[str]:
    """The document's text elements as pandoc reads them: its non-empty lines of plain text."""
    kind = path.suffix[1:]
    out = subprocess.run(
        [need("pandoc"), "-f", kind, "-t", "plain", "--wrap=none", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip(" -|")]


@pytest.mark.parametrize("kind", DOCUMENTS)
def test_every_text_element_comes_back_translated_and_the_output_opens_in_pandoc(
    made, kind, tmp_path
):
    out = tmp_path / f"out.{kind}"
    out.write_bytes(translated(made[kind]))
    before, after = plain(made[kind]), plain(out)  # pandoc reads the output back
    assert after == [line.upper() for line in before]
    assert any("FOX SAW SOME" in line for line in after)


def units(path: Path) -> list[str]:
    return read_document(path.name, path.read_bytes()).units


def test_the_same_text_is_the_same_unit_in_every_format(made):
    found = {kind: units(made[kind]) for kind in DOCUMENTS}
    body = [
        "The North Wind and the Sun",
        "The Fox and the Grapes",
        "They agreed that the one who first made the traveller take off his cloak should be "
        "considered stronger than the other.",
        "The grapes on the vine",
        "An old story, told in many languages.",
    ]
    found["html"] = [text.removesuffix("↩︎") for text in found["html"]]  # a note's way back
    for kind, texts in found.items():
        assert set(body) <= set(texts), kind
    assert "A fox under a vine" in found["html"]  # alt text: HTML's own
    assert "Aesop’s fables" in found["html"]  # the title (pandoc's quote)


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
    out = docx.Document(io.BytesIO(translated(source)))
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
    styles = zipfile.ZipFile(io.BytesIO(translated(source))).read("styles.xml").decode()
    assert "A HEADER OF THE FABLES" in styles and "A FOOTER OF THE FABLES" in styles


def test_html_attributes_a_reader_sees_are_translated():
    page = (
        '<html><head><title>The fables</title></head><body><p>A <img src="f.png" alt="A fox">'
        ' in a field.</p><input placeholder="Your name"><button aria-label="Close the page">'
        'x</button><input type="submit" value="Send it"><input type="hidden" value="keep me">'
        "</body></html>"
    )
    document = read_document("page.html", page.encode())
    out = translate_documents([document], shout)[0].decode()
    for text in ("THE FABLES", 'alt="A FOX"', 'placeholder="YOUR NAME"', 'value="SEND IT"'):
        assert text in out
    assert 'aria-label="CLOSE THE PAGE"' in out and 'value="keep me"' in out


@pytest.mark.parametrize("declared", [False, True])
def test_an_entity_in_a_docx_is_refused_in_one_line(made, tmp_path, declared):
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
    assert "\n" not in message and message.startswith("entity.docx: ") and "x" in message


@pytest.mark.parametrize("kind", ("docx", "odt"))
def test_libreoffice_made_documents_translate_and_open_in_it(made, kind, tmp_path):
    soffice = need("soffice")
    convert = [soffice, "--headless", "--convert-to"]
    subprocess.run([*convert, kind, "--outdir", str(tmp_path), str(made["html"])], check=True)
    source = tmp_path / f"fables.{kind}"
    out = tmp_path / "translated" / f"out.{kind}"
    out.parent.mkdir()
    out.write_bytes(translated(source))
    subprocess.run([*convert, "txt", "--outdir", str(tmp_path), str(out)], check=True)
    assert "THE FOX AND THE GRAPES" in (tmp_path / "out.txt").read_text(encoding="utf-8-sig")
