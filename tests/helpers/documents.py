"""Documents for the format tests: the tools that make and open them (pandoc, LibreOffice),
skipped with a reason where not installed, and the stand-in translation that upper-cases its
text (the same text always the same translation, so that what is translated shows)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from mt.formats import read_document, translate_documents


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed (pandoc: make install; LibreOffice: by hand)")
    return found


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
    profile = (folder / "profile").absolute().as_uri()
    command = [need("soffice"), f"-env:UserInstallation={profile}", "--headless"]
    command += ["--convert-to", kind, "--outdir", str(folder), str(path)]
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    made = folder / f"{path.stem}.{kind.partition(':')[0]}"
    assert made.exists(), f"LibreOffice did not convert {path.name} to {kind}"
    return made


def text_nodes(kind: str, data: bytes) -> list[tuple[str, str]]:
    """Every non-blank text of a document of `kind` (docx, odt, html), in document order, its
    whitespace runs made one space (as a reader sees it), with the name of the element it
    sits in (an XML element's text, and the text after it, in its parent): for the .docx, in
    every part under word/; for the .odt, in its content and its styles (the pages' headers
    and footers)."""
    if kind == "html":
        from selectolax.lexbor import LexborHTMLParser

        nodes = LexborHTMLParser(data.decode()).root.traverse(include_text=True)
        found = [(n.parent.tag, n.text_content) for n in nodes if n.is_text_node]
    else:
        found = []
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in sorted(archive.namelist()):  # in whatever order the zip has them
                if member.startswith(TEXT_MEMBERS[kind]):
                    found += _texts(etree.fromstring(archive.read(member)))
    return [(tag, re.sub(r"\s+", " ", text)) for tag, text in found if text.strip()]


# the parts that hold a document's text
DOCX_PARTS = ("document", "header", "footer", "footnotes", "endnotes", "comments")
TEXT_MEMBERS = {
    "docx": tuple(f"word/{part}" for part in DOCX_PARTS),
    "odt": ("content.xml", "styles.xml"),
}


def _texts(root: etree._Element) -> list[tuple[str, str]]:
    """The texts under `root` in order: an element's text (named by its tag), and, after its
    children's, the text after it (named by its parent's)."""
    found = []
    for event, element in etree.iterwalk(root, events=("start", "end")):
        if event == "start" and isinstance(element.tag, str):
            found.append((etree.QName(element).localname, element.text or ""))
        elif event == "end" and element is not root:
            found.append((etree.QName(element.getparent()).localname, element.tail or ""))
    return found
