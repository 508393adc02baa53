"""EPUB books (.epub, EPUB 2 and 3): every XHTML document its package lists (the chapters,
and EPUB 3's table of contents, nav.xhtml) read as xhtml.py reads XHTML, EPUB 2's table of
contents (toc.ncx: the book's title and each entry's label) and the package's metadata that
a reader sees as text (title, description, subjects) translated; every other member of the
zip (styles, pictures, fonts, the manifest and spine, identifiers, dates, authors' names) is
written back byte for byte, in its order and compressed as it was (`mimetype` first and
stored, as EPUB requires).

Read with zipfile and lxml rather than a library: EbookLib (the one maintained for EPUB)
rewrites the package document and the tables of contents from its own model when it saves,
and fails to save pandoc's books at all. The zip is checked before any member is read and
the blocks are counted as they are walked (limits.py), as a .docx's are."""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import unquote

from .limits import TextLimit, unzipped
from .office import Piece, document_of
from .pieces import Document
from .xhtml import parse_xml, xhtml_blocks, xml_bytes

MIMETYPE = b"application/epub+zip"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
OPF = "{http://www.idpf.org/2007/opf}"
DC = "{http://purl.org/dc/elements/1.1/}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
METADATA = {f"{DC}{name}" for name in ("title", "description", "subject")}  # text a reader sees
XHTML_TYPE, NCX_TYPE = "application/xhtml+xml", "application/x-dtbncx+xml"


def read_epub(data: bytes, limit: TextLimit) -> Document:
    """An .epub's blocks: its XHTML documents' in the package's order, its NCX's labels,
    then its metadata's texts."""
    archive = zipfile.ZipFile(unzipped(data, limit.where))
    if archive.read("mimetype").strip() != MIMETYPE:
        raise ValueError(f"its mimetype is not {MIMETYPE.decode()}")
    container = parse_xml(archive.read("META-INF/container.xml"))
    rootfile = container.find(f"{CONTAINER}rootfiles/{CONTAINER}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise ValueError("META-INF/container.xml names no package document")
    opf_name = rootfile.get("full-path")
    trees = {opf_name: parse_xml(archive.read(opf_name))}  # member -> its parsed XML

    def walk() -> Iterator[list[Piece]]:
        for name, kind in _items(trees[opf_name], opf_name):
            if name in trees:  # listed twice
                continue
            trees[name] = root = parse_xml(archive.read(name))
            yield from xhtml_blocks(root) if kind == XHTML_TYPE else _labels(root)
        metadata = trees[opf_name].find(f"{OPF}metadata")
        for element in [] if metadata is None else metadata:
            if element.tag in METADATA:
                yield [(element.text or "", partial(setattr, element, "text"))]

    def save(out: io.BytesIO) -> None:
        with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as made:
            for info in source.infolist():  # (their dates: the checked copy has none)
                name = info.filename
                body = xml_bytes(trees[name]) if name in trees else archive.read(name)
                made.writestr(_like(info), body, info.compress_type)

    return document_of(walk(), save, limit, unit="block")


def _items(package: Any, opf_name: str) -> Iterator[tuple[str, str]]:
    """The zip members the package's manifest lists as XHTML or NCX, (name, media type) each,
    in its order."""
    base = posixpath.dirname(opf_name)
    for item in package.iterfind(f"{OPF}manifest/{OPF}item"):
        kind, href = item.get("media-type"), item.get("href")
        if kind in (XHTML_TYPE, NCX_TYPE) and href:
            path = unquote(href.partition("#")[0])
            yield posixpath.normpath(posixpath.join(base, path)), kind


def _labels(ncx: Any) -> Iterator[list[Piece]]:
    """An NCX's texts a reader sees: the book's title and each entry's label (not its
    authors' names)."""
    for text in ncx.iter(f"{NCX}text"):
        if text.getparent().tag != f"{NCX}docAuthor":
            yield [(text.text or "", partial(setattr, text, "text"))]


def _like(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """A new member with `info`'s name, date and attributes (not its sizes and flags)."""
    made = zipfile.ZipInfo(info.filename, info.date_time)
    made.external_attr, made.create_system = info.external_attr, info.create_system
    return made
