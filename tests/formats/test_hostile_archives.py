"""Hostile presentations and books (issue 53), as tests/serve/test_hostile_input.py feeds
.docx and .odt files: each zip checked before it is inflated (its members' count, declared
sizes and ratio), a member that lies about its size inflated a chunk at a time, XML nested
deeper than its parser allows or whose entities expand without bound refused at once, the
blocks counted while walked, and a malformed book one line naming what is wrong. Under a
deadline (tests/conftest.py's `deadline`)."""

from __future__ import annotations

import io
import re
import tracemalloc
import zipfile

import pytest

from helpers.documents import epub_file, lying, replaced, slides_file
from mt.formats import DocumentError, DocumentTooLarge, limits, read_document

pytestmark = pytest.mark.usefixtures("deadline")

KINDS = ("pptx", "odp", "epub")
MAIN = {"pptx": "ppt/slides/slide1.xml", "odp": "content.xml", "epub": "OEBPS/text/one.xhtml"}


def good(kind: str) -> bytes:
    return epub_file() if kind == "epub" else slides_file(kind, ["Hello."])


def main_with(kind: str, inside: bytes) -> bytes:
    """The document of `kind` with `inside` put at the start of its main member's root."""
    data = good(kind)
    xml = zipfile.ZipFile(io.BytesIO(data)).read(MAIN[kind])
    start = re.search(rb"<[a-zA-Z][^>]*>", xml[xml.index(b"?>") + 2 :])
    at = xml.index(b"?>") + 2 + start.end()
    return replaced(data, MAIN[kind], xml[:at] + inside + xml[at:])


@pytest.mark.parametrize("kind", KINDS)
def test_good_documents_read_within_every_limit(kind):
    document = read_document(f"a.{kind}", good(kind), max_chars=1000)
    assert "Hello." in document.units


@pytest.mark.parametrize("kind", KINDS)
def test_a_deflate_bomb_is_refused_by_its_ratio_or_its_declared_size(kind, monkeypatch):
    bomb = main_with(kind, b" " * (8 << 20))  # 8 MiB of spaces in a few KB
    with pytest.raises(DocumentTooLarge, match=rf"^a.{kind}: unzips to [\d,]+ bytes, [\d,]+ times"):
        read_document(f"a.{kind}", bomb)
    monkeypatch.setattr(limits, "MAX_MEMBER", 1 << 20)
    message = rf"^a.{kind}: {MAIN[kind]} unzips to 8,[\d,]+ bytes, at most 1,048,576$"
    with pytest.raises(DocumentTooLarge, match=message):
        read_document(f"a.{kind}", bomb)


@pytest.mark.parametrize("kind", KINDS)
def test_a_zip_of_too_many_members_is_refused_before_any_is_read(kind):
    out = io.BytesIO(good(kind))
    with zipfile.ZipFile(out, "a") as made:
        for i in range(limits.MAX_MEMBERS):
            made.writestr(f"many/{i}", b"")
    with pytest.raises(DocumentTooLarge, match=rf"^a.{kind}: 10,0\d\d files in its zip, at most"):
        read_document(f"a.{kind}", out.getvalue())


@pytest.mark.parametrize("kind", KINDS)
def test_a_member_lying_about_its_size_is_inflated_a_chunk_at_a_time(kind):
    """64 MiB said to be 1,000 bytes: cut there, after one chunk."""
    data = lying(good(kind), MAIN[kind], b" " * (64 << 20))
    tracemalloc.start()
    with pytest.raises(DocumentError, match=rf"^a.{kind}: not a valid .{kind} file"):
        read_document(f"a.{kind}", data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32 << 20


@pytest.mark.parametrize("kind", KINDS)
def test_xml_nested_deeper_than_its_parser_allows_is_refused_at_once(kind):
    deep = main_with(kind, b"<x>" * 5_000 + b"</x>" * 5_000)
    with pytest.raises(DocumentError) as raised:
        read_document(f"a.{kind}", deep)
    message = str(raised.value)
    assert message.startswith(f"a.{kind}: not a valid .{kind} file (Excessive depth in document")
    assert "\n" not in message


LAUGHS = b'<!ENTITY a "aaaaaaaaaa">' + b"".join(
    b'<!ENTITY %c "%s">' % (98 + i, b"&%c;" % (97 + i) * 10) for i in range(9)
)  # &j; is 10^10 a's


@pytest.mark.parametrize("kind", KINDS)
def test_entities_that_expand_without_bound_are_refused_at_once(kind):
    data = good(kind)
    xml = zipfile.ZipFile(io.BytesIO(data)).read(MAIN[kind])
    xml = re.sub(rb"<!DOCTYPE[^>]*>", b"", xml)  # a book's chapter has one: its own instead
    root = re.search(rb"<([a-zA-Z][\w:.-]*)", xml[xml.index(b"?>") :])[1]
    at = xml.index(b"?>") + 2
    xml = xml[:at] + b"<!DOCTYPE " + root + b" [" + LAUGHS + b"]>" + xml[at:]
    with pytest.raises(
        DocumentError, match=rf"^a.{kind}: not a valid .{kind} file \(Maximum entity"
    ):
        read_document(f"a.{kind}", replaced(data, MAIN[kind], xml.replace(b"Hello.", b"&j;")))


@pytest.mark.parametrize("kind", KINDS)
def test_empty_blocks_are_counted_while_walking_and_the_walk_stops_there(kind, monkeypatch):
    empty = {"pptx": b"<a:p/>", "odp": b"<text:p/>", "epub": b"<p/>"}[kind]
    if kind == "pptx":  # in a text box's body
        data = good(kind)
        xml = zipfile.ZipFile(io.BytesIO(data)).read(MAIN[kind])
        xml = xml.replace(b"<a:p>", empty * 20_000 + b"<a:p>", 1)
        data = replaced(data, MAIN[kind], xml)
    elif kind == "odp":
        data = good(kind)
        xml = zipfile.ZipFile(io.BytesIO(data)).read(MAIN[kind])
        data = replaced(data, MAIN[kind], xml.replace(b"<text:p>", empty * 20_000 + b"<text:p>"))
    else:
        data = epub_file("<div>" + "<p/>" * 20_000 + "</div><p>Hello.</p>")
    counted = []
    count = limits.TextLimit.count
    monkeypatch.setattr(
        limits.TextLimit, "count", lambda self, *a: counted.append(1) or count(self, *a)
    )
    with pytest.raises(DocumentTooLarge, match=rf"^a.{kind}: more than 40 \w+s \(at most 40, one"):
        read_document(f"a.{kind}", data, max_chars=160)
    assert len(counted) == 41  # not 20,000: refused as it went
    assert len(read_document(f"a.{kind}", data).blocks) > 20_000  # no limit: all read


CONTAINER = "META-INF/container.xml"
CHAPTER = "OEBPS/text/one.xhtml"
NO_ROOT = b'<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"/>'


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"mimetype": b"application/zip"}, "its mimetype is not application/epub+zip"),
        ({CONTAINER: NO_ROOT}, "META-INF/container.xml names no package document"),
        ({CONTAINER: b"<container"}, "Couldn't find end of Start Tag container line 1"),
        ({CHAPTER: b"<html><p>An HTML page<br></p></html>"}, "Opening and ending tag mismatch"),
        ({CHAPTER: b"\xff\xfe<html/>"}, "Start tag expected"),
        ({CHAPTER: b""}, "Document is empty"),
    ],
)
def test_a_malformed_book_is_refused_in_one_line_naming_what_is_wrong(members, message):
    with pytest.raises(DocumentError) as raised:
        read_document("a.epub", epub_file(**members))
    found = str(raised.value)
    assert found.startswith(f"a.epub: not a valid .epub file ({message}") and "\n" not in found


def test_a_book_naming_members_it_lacks_or_files_outside_it_is_refused():
    """The manifest's names are looked up in the zip only: never on the disk."""
    for name in ("text/none.xhtml", "../../../etc/passwd", "/etc/passwd"):
        opf = zipfile.ZipFile(io.BytesIO(epub_file())).read("OEBPS/content.opf")
        opf = opf.replace(b'href="text/one.xhtml"', f'href="{name}"'.encode())
        with pytest.raises(DocumentError, match=r"^a.epub: not a valid .epub file \(\"There is no"):
            read_document("a.epub", epub_file(**{"OEBPS/content.opf": opf}))
    without = zipfile.ZipFile(io.BytesIO(epub_file()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as made:
        for info in without.infolist():
            if info.filename != "mimetype":
                made.writestr(info, without.read(info))
    with pytest.raises(DocumentError, match=r"\(\"There is no item named 'mimetype' in the"):
        read_document("a.epub", out.getvalue())
