"""Hostile input (issue 42): each parser a request reaches, fed what made it super-linear or
made it eat memory, must answer at once, refusing with one line naming the limit where it
refuses. Every test runs under a deadline (SIGALRM), so that a regression fails here rather
than hanging; the inputs are small, built here, and the deadline far above what they take.
Good documents still read as before."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import pytest

pytest.importorskip("selectolax")

from helpers.documents import lying, replaced
from mt.decoding.constraints import glossary_terms
from mt.formats import DocumentError, DocumentTooLarge, limits, read_document, read_markup
from mt.formats.pieces import Block, cut
from mt.serve.batcher import BadRequest
from mt.serve.requests import parse_glossary, parse_multipart
from mt.text.sentences import Layout

pytestmark = pytest.mark.usefixtures("deadline")  # (tests/conftest.py)


# HTML


def test_a_run_of_comments_is_scanned_once():
    document = read_markup("<!---->" * 40 + "x", "q")  # a fragment: 13 s at 26 by a regex
    assert document.units == ["x"]
    with pytest.raises(DocumentError, match="markup only"):  # one comment, never closed
        read_markup("<!--" * 50_000, "q")
    page = "<!-- a -->\n" * 5_000 + "<html><body><p>Hi.</p></body></html>"
    assert read_document("a.html", page.encode()).units == ["Hi."]  # still a page


def test_markup_text_is_counted_not_its_markup():
    with pytest.raises(DocumentTooLarge, match=r"^q: 1001 characters of text, at most 1000$"):
        read_markup("<b>" + "x" * 1001 + "</b>", "q", max_chars=1000)
    assert read_markup(f'<a href="{"y" * 5000}">Hi.</a>', "q", max_chars=3).units == ["Hi."]


# .srt

GOOD_SUBTITLES = [
    "1\n00:00:01,000 --> 00:00:02,500\nHello there,\nmy friend.\n\n"
    "2\n00:00:03,000 --> 00:01:04,250\nBye.\n",
    "\r\n1\r\n00:00:01.000 --> 00:00:02.000 X1:40\r\nCRLF, dots\r\n\r\n\r\n"
    "2\r\n0:0:3 --> 0:0:4\r\nA\r\n\r\nB\r\n",
    "00:00:01,000 --> 00:00:02,000\nno number\n2\n00:00:03,000 --> 00:00:04,000\nno blank line",
    "12.5\n00:00:01,000 --> 00:00:02,000\n\n\n7\n\n00:00:03,000 --> 00:00:04,000\n42\nlast\n\n\n",
]


@pytest.mark.parametrize("text", GOOD_SUBTITLES)
def test_srt_cues_are_srts_own(text):
    srt = pytest.importorskip("srt")
    from mt.formats.subtitles import _cues

    fields = ("index", "start", "end", "proprietary", "content")
    want = [tuple(getattr(c, f) for f in fields) for c in srt.parse(text)]
    assert [tuple(getattr(c, f) for f in fields) for c in _cues(text)] == want


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"1" * 20_000, "a.srt: not a valid .srt file (line 1: expected a cue's timing"),
        (b"1\n" * 20_000, "a.srt: not a valid .srt file (line 1: expected a cue's timing"),
        (b"00:00:01,000" + b" " * 20_000 + b"x", "a.srt: not a valid .srt file (line 1"),
        (b"1:1:" + b"1" * 20_000 + b"\n", "a.srt: not a valid .srt file (line 1"),
        (b" " * 100_000, "a.srt: no text to translate"),
        (b"\n" * 100_000, "a.srt: no text to translate"),
    ],
)
def test_srt_refuses_runs_of_digits_and_spaces_at_once(data, message):
    with pytest.raises(DocumentError) as found:  # 1,200 digits: 17 s in srt's regex
        read_document("a.srt", data)
    assert str(found.value).startswith(message)


def test_srt_cues_of_digits_and_blank_lines_read_at_once():
    text = "1\n00:00:01,000 --> 00:00:02,000\n" + ("1" * 2_000 + "\n\n") * 50 + "end\n"
    assert len(read_document("a.srt", text.encode()).units) == 1


# .docx and .odt


def docx_file(paragraphs: int = 1) -> bytes:
    docx = pytest.importorskip("docx")
    made = docx.Document()
    for i in range(paragraphs):
        made.add_paragraph(f"Paragraph {i}.")
    data = io.BytesIO()
    made.save(data)
    return data.getvalue()


def odt_file() -> bytes:
    odfdo = pytest.importorskip("odfdo")
    made = odfdo.Document("text")
    made.body.append(odfdo.Paragraph("Hello."))
    data = io.BytesIO()
    made.save(data)
    return data.getvalue()


DOCUMENT_XML = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="http://'
    b'schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>%s</w:body></w:document>'
)
HELLO = b"<w:p><w:r><w:t>Hello.</w:t></w:r></w:p>"


def test_a_good_document_reads_through_its_checked_copy_unchanged():
    for data in (docx_file(3), odt_file()):
        copy = zipfile.ZipFile(limits.unzipped(data, "a"))
        original = zipfile.ZipFile(io.BytesIO(data))
        assert [(i.filename, copy.read(i)) for i in copy.infolist()] == [
            (i.filename, original.read(i)) for i in original.infolist()
        ]
    document = read_document("a.docx", docx_file(3), max_chars=1000)
    assert document.units == ["Paragraph 0.", "Paragraph 1.", "Paragraph 2."]
    assert read_document("a.odt", odt_file(), max_chars=1000).units == ["Hello."]


def test_compression_methods_other_than_deflate_are_refused_before_reading():
    big = DOCUMENT_XML % (b" " * (8 << 20))  # a bzip2 bomb's document.xml, in small
    for method, name in ((zipfile.ZIP_BZIP2, "bzip2"), (zipfile.ZIP_LZMA, "lzma")):
        data = replaced(docx_file(), "word/document.xml", big, method)
        with pytest.raises(
            DocumentError, match=rf"^a.docx: word/document.xml is compressed by {name} "
        ):
            read_document("a.docx", data)


def test_a_deflate_bomb_is_refused_by_its_declared_size_or_ratio(monkeypatch):
    bomb = replaced(docx_file(), "word/document.xml", DOCUMENT_XML % (b" " * (8 << 20)))
    with pytest.raises(
        DocumentTooLarge, match=r"^a.docx: unzips to [\d,]+ bytes, [\d,]+ times its"
    ):
        read_document("a.docx", bomb)  # 8 MiB of spaces: more than 100 times the file
    monkeypatch.setattr(limits, "MAX_MEMBER", 1 << 20)
    message = r"^a.docx: word/document.xml unzips to 8,388,[\d,]+ bytes, at most 1,048,576$"
    with pytest.raises(DocumentTooLarge, match=message):
        read_document("a.docx", bomb)
    monkeypatch.setattr(limits, "MAX_MEMBERS", 5)
    with pytest.raises(DocumentTooLarge, match=r"^a.docx: \d+ files in its zip, at most 5$"):
        read_document("a.docx", docx_file())


def test_a_member_lying_about_its_size_is_inflated_a_chunk_at_a_time():
    """64 MiB said to be 1,000 bytes (helpers.documents.lying): zipfile cuts it there, but a
    library reading it whole would inflate all 64 MiB first."""
    data = lying(docx_file(), "word/document.xml", DOCUMENT_XML % (b" " * (64 << 20)))
    tracemalloc.start()
    with pytest.raises(DocumentError, match=r"^a.docx: not a valid .docx file"):
        read_document("a.docx", data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32 << 20


def test_xml_tags_are_counted_while_inflating(monkeypatch):
    monkeypatch.setattr(limits, "MAX_TAGS", 1000)
    with pytest.raises(
        DocumentTooLarge, match=r"^a.docx: more than 1,000 XML tags \(at most 1,000\)$"
    ):
        read_document("a.docx", docx_file(500))


@pytest.mark.parametrize("kind", ["docx", "odt"])
def test_empty_paragraphs_are_counted_while_walking_and_the_walk_stops_there(kind, monkeypatch):
    if kind == "docx":  # 20,000 empty paragraphs, 40 of them allowed
        data = replaced(
            docx_file(), "word/document.xml", DOCUMENT_XML % (b"<w:p/>" * 20_000 + HELLO)
        )
    else:
        content = zipfile.ZipFile(io.BytesIO(odt_file())).read("content.xml")
        at = content.index(b"<office:text>") + len(b"<office:text>")
        data = replaced(
            odt_file(), "content.xml", content[:at] + b"<text:p/>" * 20_000 + content[at:]
        )
    counted = []
    count = limits.TextLimit.count
    monkeypatch.setattr(
        limits.TextLimit, "count", lambda self, *a: counted.append(1) or count(self, *a)
    )
    message = rf"^a.{kind}: more than 40 paragraphs \(at most 40, one for every 4 characters"
    with pytest.raises(DocumentTooLarge, match=message):
        read_document(f"a.{kind}", data, max_chars=160)
    assert len(counted) == 41  # not 20,000: refused as it went
    assert len(read_document(f"a.{kind}", data).blocks) > 20_000  # no limit: all read


def test_a_docx_paragraph_of_many_fields_is_walked_once():
    # 30,000 fields opened, their results begun, never closed: each text is a result (a
    # search of the open fields at each text was quadratic)
    field = b'<w:r><w:fldChar w:fldCharType="begin"/><w:instrText>REF a</w:instrText></w:r>'
    field += b'<w:r><w:fldChar w:fldCharType="separate"/><w:t>x</w:t></w:r>'
    content = DOCUMENT_XML % (b"<w:p>" + field * 30_000 + b"</w:p>")
    (text,) = read_document("a.docx", replaced(docx_file(), "word/document.xml", content)).units
    assert text == "x" * 30_000


def test_text_is_counted_while_walking():
    with pytest.raises(
        DocumentTooLarge, match=r"^a.docx: more than 100 characters of text \(at most 100\)$"
    ):
        read_document("a.docx", docx_file(20), max_chars=100)
    with pytest.raises(DocumentTooLarge, match=r"^a.txt: more than 10 characters of text"):
        read_document("a.txt", b"Hello.\nHello again.\n", max_chars=10)


# multipart/form-data

KIND = "multipart/form-data; boundary=B"


def part(header: bytes, value: bytes = b"x") -> bytes:
    return b"--B\r\n" + header + b"\r\n\r\n" + value + b"\r\n"


def test_a_part_header_of_many_parameters_is_refused_at_once():
    header = b'Content-Disposition: form-data; name="file"; filename="a.txt"' + b"; a=b" * 74_000
    with pytest.raises(
        BadRequest, match=r"^body: a part's header over 2,048 bytes \(at most 2,048\)$"
    ):
        parse_multipart(KIND, part(header) + b"--B--\r\n")  # 15 s by the email package
    with pytest.raises(BadRequest, match=r"^Content-Type: [\d,]+ characters, at most 2,048$"):
        parse_multipart(KIND + "; a=b" * 1000, part(b'Content-Disposition: form-data; name="q"'))
    many = part(b'Content-Disposition: form-data; name="q"') * 17 + b"--B--\r\n"
    with pytest.raises(BadRequest, match=r"^body: more than 16 parts \(at most 16\)$"):
        parse_multipart(KIND, many)


def test_multipart_fields_are_read_as_before():
    body = (
        part(b'Content-Disposition: form-data; name="source"', b"en")
        + part(b'Content-Disposition: form-data; name="file"; filename="a.txt"', b"Hi.\r\n--Bx")
        + b"--B--\r\n"
    )
    assert parse_multipart(KIND, body) == {
        "source": (None, b"en"),
        "file": ("a.txt", b"Hi.\r\n--Bx"),
    }
    lines = b"\r\n--Bx" * 100_000  # lines that almost are boundaries
    found = parse_multipart(
        KIND, part(b'Content-Disposition: form-data; name="q"', lines) + b"--B--"
    )
    assert found == {"q": (None, lines)}


# glossary


def test_a_glossary_is_bounded_and_matched_in_one_pass_a_text():
    huge = {f"term{i}": f"t{i}" for i in range(20_000)}
    with pytest.raises(BadRequest, match=r"^glossary: 20,000 entries, at most 1,000$"):
        parse_glossary({"glossary": huge}, ["I like music."])
    with pytest.raises(
        BadRequest, match=r"^glossary: 'aaaaaaaaaaaaaaaaaaaa'...: 101 characters, at most 100$"
    ):
        parse_glossary({"glossary": {"a" * 101: "b"}}, ["a"])
    glossary = {f"term{i}": f"t{i}" for i in range(998)} | {"new york": "Nueva York", "c++": "C++"}
    texts = ["Term997 and NEW YORK, not term9970 nor c++x; c++."] * 64
    assert parse_glossary({"glossary": glossary}, texts) == [["t997", "Nueva York", "C++"]] * 64
    worst = {"a " * 49 + f"b{i}": f"t{i}" for i in range(10)}  # terms the text almost has
    assert glossary_terms(worst, ["a " * 500]) == [[]]


# what the audit found: cutting a translation into many pieces, sentences of hostile lines


def test_a_block_of_many_pieces_is_cut_in_near_linear_time():
    block = Block(["a"] + [" "] * 50_000 + ["b"])  # whitespace between tags: kept pieces
    assert len(cut(block, "zz yy", {0: "qq", 50_001: "rr"})) == 50_002
    block = Block(["w "] * 1_000)  # pieces whose anchors are not found: shared in proportion
    assert "".join(cut(block, "w " * 1_000, {})) == "w " * 1_000


@pytest.mark.parametrize("line", ["a. " * 5_000, "... x" * 3_000, '". ' * 5_000, "." * 15_000])
def test_sentences_of_hostile_lines_split_at_once(line):
    layout = Layout.of(line)
    assert "".join(g + s for g, s in zip(layout.gaps, [*layout.sentences, ""])) == line
