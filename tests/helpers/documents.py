"""Documents for the format tests: the tools that make and open them (pandoc, LibreOffice),
skipped with a reason where not installed, and the stand-in translation that upper-cases its
text (the same text always the same translation, so that what is translated shows)."""

from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest
from lxml import etree

from mt.formats import read_document, translate_documents


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed (make install installs pandoc and LibreOffice)")
    return found


# the LibreOffice module that opens each kind of document (Debian packages each alone)
LIBREOFFICE_MODULES = {"docx": "writer", "odt": "writer", "pptx": "impress", "odp": "impress"}


def shout(texts: list[str]) -> list[str]:
    """The stand-in translation: the same text always the same translation."""
    return [text.upper() for text in texts]


def translated(name: str, data: bytes) -> bytes:
    """The document `name` read from `data`, translated by `shout` and written back."""
    return translate_documents([read_document(name, data)], shout)[0]


def units(path: Path) -> list[str]:
    """The texts the model reads of the document at `path`, in order."""
    return read_document(path.name, path.read_bytes()).units


def plain(path: Path) -> list[str]:
    """The document's text elements as pandoc reads them: its non-empty lines of plain text
    (a table's rules left out)."""
    kind = path.suffix[1:]
    out = subprocess.run(
        [need("pandoc"), "-f", kind, "-t", "plain", "--wrap=none", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip(" -|")]


def soffice(path: Path, kind: str, folder: Path) -> Path:
    """The document at `path` converted by LibreOffice (headless, with a profile of its own
    in `folder`, so that it neither waits for nor leaves a desktop's) to `kind` (docx:
    "docx:MS Word 2007 XML", txt ...), written into `folder`; its check fails if
    LibreOffice cannot open it."""
    program = need("soffice")
    module = LIBREOFFICE_MODULES[path.suffix[1:]]
    if not (Path(program).resolve().parents[1] / "share" / "registry" / f"{module}.xcd").exists():
        pytest.skip(f"LibreOffice's {module} is not installed (libreoffice-{module}-nogui)")
    profile = (folder / "profile").absolute().as_uri()
    command = [program, f"-env:UserInstallation={profile}", "--headless"]
    command += ["--convert-to", kind, "--outdir", str(folder), str(path)]
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    made = folder / f"{path.stem}.{kind.partition(':')[0]}"
    assert made.exists(), f"LibreOffice did not convert {path.name} to {kind}"
    return made


def text_nodes(kind: str, data: bytes) -> list[tuple[str, str]]:
    """Every non-blank text of a document of `kind` (docx, odt, pptx, odp, epub, html), in
    document order, its whitespace runs made one space (as a reader sees it), with the name
    of the element it sits in (an XML element's text, and the text after it, in its parent):
    for the .docx, in every part under word/ that holds text; for the .odt, in its content
    and its styles (the pages' headers and footers); for the .pptx, in its slides and notes;
    for the .odp, in its content; for the .epub, in every XHTML, NCX and OPF member."""
    if kind == "html":
        from selectolax.lexbor import LexborHTMLParser

        nodes = LexborHTMLParser(data.decode()).root.traverse(include_text=True)
        found = [(n.parent.tag, n.text_content) for n in nodes if n.is_text_node]
    else:
        found = []
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in sorted(archive.namelist()):  # in whatever order the zip has them
                if member.startswith(TEXT_MEMBERS[kind]) or member.endswith(
                    TEXT_ENDS.get(kind, ())
                ):
                    found += _texts(etree.fromstring(archive.read(member)))
    return [(tag, re.sub(r"\s+", " ", text)) for tag, text in found if text.strip()]


# the parts that hold a document's text
DOCX_PARTS = ("document", "header", "footer", "footnotes", "endnotes", "comments")
TEXT_MEMBERS = {
    "docx": tuple(f"word/{part}" for part in DOCX_PARTS),
    "odt": ("content.xml", "styles.xml"),
    "pptx": ("ppt/slides/slide", "ppt/notesSlides/notesSlide"),
    "odp": ("content.xml",),
    "epub": (),
}
TEXT_ENDS = {"epub": (".xhtml", ".ncx", ".opf")}


def _texts(root: etree._Element) -> list[tuple[str, str]]:
    """The texts under `root` in order: an element's text (named by its tag; a DrawingML
    field's `a:t` by its field's, `fld`), and, after its children's, the text after it
    (named by its parent's)."""
    found = []
    for event, element in etree.iterwalk(root, events=("start", "end")):
        if event == "start" and isinstance(element.tag, str):
            name = etree.QName(element).localname
            if name == "t" and etree.QName(element.getparent()).localname == "fld":
                name = "fld"
            found.append((name, element.text or ""))
        elif event == "end" and element is not root:
            found.append((etree.QName(element.getparent()).localname, element.tail or ""))
    return found


def replaced(data: bytes, name: str, content: bytes, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """The zip `data` with its member `name` holding `content`, compressed by `method`."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as made:
        for info in source.infolist():
            body = content if info.filename == name else source.read(info)
            made.writestr(
                info.filename, body, method if info.filename == name else info.compress_type
            )
    return out.getvalue()


def lying(data: bytes, name: str, content: bytes, said: int = 1000) -> bytes:
    """The zip `data` with its member `name` holding `content`, but its central directory
    record saying `said` bytes (and a CRC to match them): zipfile cuts it there, but a
    library reading it whole would inflate all of it first."""
    made = bytearray(replaced(data, name, content))
    at = next(  # its central directory record: CRC at 16, size at 24
        m.start()
        for m in re.finditer(b"PK\x01\x02", made)
        if made[m.start() + 46 :].startswith(name.encode())
    )
    struct.pack_into("<I", made, at + 16, zlib.crc32(content[:said]))
    struct.pack_into("<I", made, at + 24, said)
    return bytes(made)


CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head>
<body>{body}</body></html>
"""
NCX = """<?xml version="1.0" encoding="UTF-8"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><head/>
<docTitle><text>{title}</text></docTitle><docAuthor><text>Aesop</text></docAuthor>
<navMap><navPoint id="p1"><navLabel><text>{title}</text></navLabel>
<content src="text/one.xhtml"/></navPoint></navMap></ncx>
"""
OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">urn:x</dc:identifier>
<dc:title>{title}</dc:title><dc:creator>Aesop</dc:creator><dc:language>en</dc:language>
<dc:description>Old stories about animals.</dc:description></metadata>
<manifest><item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
<item id="one" href="text/one.xhtml" media-type="application/xhtml+xml"/>
<item id="css" href="style.css" media-type="text/css"/></manifest>
<spine toc="ncx"><itemref idref="one"/></spine></package>
"""
CONTAINER = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>
"""


def epub_file(body: str = "<p>Hello.</p>", title: str = "The fables", **members: bytes) -> bytes:
    """An EPUB 2 book of one chapter holding `body`, as EPUB lays it out (`mimetype` first and
    stored); `members` (name: content) replace or add files."""
    files = {
        "mimetype": b"application/epub+zip",
        "META-INF/container.xml": CONTAINER.encode(),
        "OEBPS/content.opf": OPF.format(title=title).encode(),
        "OEBPS/toc.ncx": NCX.format(title=title).encode(),
        "OEBPS/text/one.xhtml": CHAPTER.format(title=title, body=body).encode(),
        "OEBPS/style.css": b"p { margin: 0 }",
    } | members
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as made:
        for name, content in files.items():
            method = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            made.writestr(name, content, method)
    return out.getvalue()


def slides_file(kind: str, texts: list[str]) -> bytes:
    """A presentation (pptx, odp) of one slide, a text box for each of `texts`, made by its
    library."""
    data = io.BytesIO()
    if kind == "pptx":
        pptx = pytest.importorskip("pptx")
        made = pptx.Presentation()
        shapes = made.slides.add_slide(made.slide_layouts[6]).shapes
        for i, text in enumerate(texts):
            shapes.add_textbox(0, i * 100_000, 100_000, 100_000).text = text
    else:
        odfdo = pytest.importorskip("odfdo")
        made = odfdo.Document("presentation")
        page = odfdo.DrawPage("page1")
        for text in texts:
            page.append(odfdo.Frame.text_frame(text, size=("10cm", "2cm")))
        made.body.append(page)
    made.save(data)
    return data.getvalue()
