"""Documents translated with their layout kept (mt.formats): HTML pages and fragments, .docx,
.odt and .srt files read back with the library that wrote them, a sentence that runs through
inline tags translated whole, and every bad input a one-line error. The translator here is a
function (upper case, or a small dictionary): these tests are about structure, not quality."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("selectolax")

from mt.formats import DocumentError, html, read_document, read_markup, translate_documents
from mt.formats.pieces import Block, cut


def upper(texts: list[str]) -> list[str]:
    return [text.upper() for text in texts]


def counted(calls: list[list[str]]):
    def translate(texts: list[str]) -> list[str]:
        calls.append(list(texts))
        return upper(texts)

    return translate


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>My trip</title>
<style>p { color: red; } /* I went */</style>
<script>var s = "<b>Paris</b> & more";</script></head>
<body class="page" data-x='1 &amp; 2'>
<h1 id="top">My summer</h1>
<!-- a comment: leave me -->
<p>I went to <b>Paris <i>and</i> Rome</b> last summer &amp; loved it&nbsp;&copy;.</p>
<p>Type <code>make install</code> to <a href="/x?a=1&amp;b=2" title="Go &quot;now&quot;">start
  <em>here</em></a>.</p>
<pre>  keep   this  </pre>
<ul><li>One</li><li>Two <span lang="fr">words</span><br>Three</li></ul>
<table><tr><td>Cell</td></tr></table>
</body></html>
"""
UNTOUCHED = html.UNTOUCHED | html.KEPT_INLINE  # script, style, pre, code ...
SEEN = html.TEXT_ATTRIBUTES  # translated: title, alt ...


def shape(html: str, translate=lambda text: text) -> list[tuple]:
    """Every node of a page in order: an element's tag and attributes (those a reader sees
    `translate`d), a comment's text, and a text node's text, as is under UNTOUCHED, else its
    whitespace made one space and then `translate`d (a text inside UNTOUCHED, as is)."""
    from selectolax.lexbor import LexborHTMLParser

    found = []
    for node in LexborHTMLParser(html).root.traverse(include_text=True):
        if node.is_text_node:
            text = node.text_content
            if not _inside(node, UNTOUCHED):
                text = translate(" ".join(text.split()))
            found.append(("text", text))
        elif node.is_comment_node:
            found.append(("comment", node.comment_content))
        else:
            attributes = node.attributes
            found.append(
                (node.tag, {k: translate(v) if k in SEEN else v for k, v in attributes.items()})
            )
    return found


def _inside(node, tags: set[str]) -> bool:
    while node is not None:
        if node.tag in tags:
            return True
        node = node.parent
    return False


def test_a_page_keeps_its_tree_attributes_scripts_and_code_and_its_text_is_translated():
    calls: list[list[str]] = []
    (out,) = translate_documents([read_document("trip.html", PAGE.encode())], counted(calls))
    assert shape(out.decode()) == shape(PAGE, str.upper)
    assert out.decode().startswith('<!DOCTYPE html><html lang="en"><head>')
    assert 'data-x="1 &amp; 2"' in out.decode() and "&lt;b&gt;" not in out.decode()
    # one call; each sentence whole through its inline tags, inline code part of it
    assert len(calls) == 1
    assert "I went to Paris and Rome last summer & loved it ©." in calls[0]
    assert "Type make install to start here." in calls[0]
    assert "Two words" in calls[0] and "Three" in calls[0]  # <br> ends a block
    assert not any("var s" in text or "keep" in text or "color" in text for text in calls[0])


def test_inline_tags_go_where_their_words_went():
    words = {
        "I went to Paris last summer.": "El verano pasado fui a París.",
        "I went to": "Fui a",
        "Paris": "París",
        "last summer.": "el verano pasado.",
    }
    document = read_markup("I went to <b>Paris</b> last summer.", "q")
    (out,) = translate_documents([document], lambda texts: [words[t] for t in texts])
    assert out.decode() == "El verano pasado fui a <b>París</b>."
    # a piece whose translation is not found shares the text in proportion, at word starts
    block = Block(["The ", "big", " house is red."])
    found = cut(block, "La casa grande es roja.", {1: "enorme"})
    assert found == ["La ", "casa", " grande es roja."]
    # a short piece not found still gets a word, not an empty <b></b>
    block = Block(["This ", "is", " a real breakthrough."])
    hints = {0: "Esta es.", 1: "¿Hay?", 2: "Un avance."}  # none found: proportions
    assert cut(block, "Esto es un gran avance.", hints) == ["Esto ", "es", " un gran avance."]
    # a tag inside a word (<b>o</b>utput) cuts the translation inside a word
    block = Block(["the ", "o", "utput, so"])
    assert cut(block, "EL OUTPUT, SO", {0: "EL", 1: "O", 2: "UTPUT, SO"}) == [
        "EL ",
        "O",
        "UTPUT, SO",
    ]
    # kept code (its spaces made one) is found as itself; no punctuation is taken with it
    block = Block(["Type ", "Vec   ::", ", then"], kept={1})
    assert cut(block, "Escribe Vec ::, luego", {0: "Escribe", 2: ", luego"})[2] == ", luego"
    block = Block(["Run ", "make", " now."], kept={1})
    assert cut(block, "Ejecuta make ahora.", {0: "Corre", 2: "ahora."}) == [
        "Ejecuta ",
        "make",
        " ahora.",
    ]


@pytest.mark.parametrize(
    "markup",
    [
        "<p>unclosed <b>bold <i>both</p> after <div",
        "<table><td>cell<p>in a cell</table>text</b></i>",
        "<<<>>> & &bogus; <a href='x>y",
        "<b>x</b>tail and <script>never closed",
        "<div>" * 3000 + "deep",  # nested deeper than Python's recursion limit
    ],
)
def test_malformed_html_is_read_as_a_browser_reads_it(markup):
    from selectolax.lexbor import LexborHTMLParser

    (out,) = translate_documents([read_markup(markup, "q")], upper)
    as_browser = LexborHTMLParser(markup, is_fragment=True).html
    assert [kind for kind, _ in shape(out.decode())] == [kind for kind, _ in shape(as_browser)]


def test_docx_keeps_styles_runs_tables_and_headers():
    docx = pytest.importorskip("docx")
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    made = docx.Document()
    made.add_heading("A short title", 1)
    paragraph = made.add_paragraph("I went to ", style="List Bullet")
    paragraph.add_run("Paris").bold = True
    paragraph.add_run(" last summer.").italic = True
    table = made.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(1, 1).text = "Hello.", "The cat sleeps."
    table.cell(0, 1).merge(table.cell(0, 0))
    made.sections[0].header.paragraphs[0].text = "My header"
    control = parse_xml(  # a content control, as Word's templates hold titles
        f"<w:sdt {nsdecls('w')}><w:sdtContent><w:p><w:r><w:t>In a control.</w:t></w:r></w:p>"
        "</w:sdtContent></w:sdt>"
    )
    made.element.body.insert(0, control)
    data = io.BytesIO()
    made.save(data)
    (out,) = translate_documents([read_document("a.docx", data.getvalue())], upper)
    back = docx.Document(io.BytesIO(out))

    def runs(document):
        return [(p.style.name, [(r.bold, r.italic) for r in p.runs]) for p in document.paragraphs]

    assert runs(back) == runs(made)
    assert [r.text for r in back.paragraphs[1].runs] == ["I WENT TO ", "PARIS", " LAST SUMMER."]
    assert back.paragraphs[0].text == "A SHORT TITLE"
    assert [c.text for c in back.tables[0]._cells] == [c.text.upper() for c in table._cells]
    assert back.sections[0].header.paragraphs[0].text == "MY HEADER"
    assert "IN A CONTROL." in back.element.body.xml


def test_odt_keeps_headings_spans_and_tables():
    odfdo = pytest.importorskip("odfdo")
    made = odfdo.Document("text")
    made.body.append(odfdo.Header(1, "A title"))
    paragraph = odfdo.Paragraph("I went to ")
    span = odfdo.Span("Paris", style="Strong")
    paragraph.append(span)
    span.tail = " last summer."
    made.body.append(paragraph)
    table = odfdo.Table("T", width=2, height=1)
    table.set_value("A1", "Good morning.")
    made.body.append(table)
    data = io.BytesIO()
    made.save(data)
    (out,) = translate_documents([read_document("a.odt", data.getvalue())], upper)
    back = odfdo.Document(io.BytesIO(out))

    def layout(document):
        elements = document.body.get_elements("descendant::text:p | descendant::text:h")
        return [(e.tag, [(c.tag, c.attributes) for c in e.children]) for e in elements]

    assert layout(back) == layout(made)
    assert back.body.get_header().text == "A TITLE"
    assert back.body.get_span().text == "PARIS" and back.body.get_span().style == "Strong"
    assert "I WENT TO PARIS LAST SUMMER." in back.body.text_recursive
    assert back.body.get_table().get_value("A1") == "GOOD MORNING."


SUBTITLES = """1
00:00:01,000 --> 00:00:02,500
Hello there,
my friend.

7
00:00:03,000 --> 00:01:04,250
Goodbye.

"""


def test_srt_keeps_numbers_timings_and_lines():
    srt = pytest.importorskip("srt")
    (out,) = translate_documents([read_document("a.srt", SUBTITLES.encode())], upper)
    before, after = list(srt.parse(SUBTITLES)), list(srt.parse(out.decode()))
    assert [(c.index, c.start, c.end) for c in after] == [(c.index, c.start, c.end) for c in before]
    assert [c.content for c in after] == ["HELLO THERE,\nMY FRIEND.", "GOODBYE."]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.docx", b"not a zip", "a.docx: not a valid .docx file (File is not a zip file)"),
        ("a.odt", b"PK\x03\x04 broken", "a.odt: not a valid .odt file"),
        ("a.srt", b"1\n00:00:0x --> 00:00:02,000\nHi\n\n", "a.srt: not a valid .srt file"),
        ("a.srt", b"1\n00:00:05,000 --> 00:00:02,000\nHi\n", "a.srt: not a valid .srt file (cue 1"),
        ("a.pdf", b"%PDF", "a.pdf: file format not supported (only .txt, .html, .htm, .docx"),
        ("notes", b"x", "notes: file format not supported"),
        ("a.html", b"<b></b><br><!-- x -->", "a.html: no text to translate"),
        ("a.txt", b"\n  \n", "a.txt: no text to translate"),
        ("a.html", b"<p>caf\xe9</p>", "a.html: not UTF-8 text (byte 6)"),
    ],
)
def test_bad_documents_are_one_line_errors(name, data, message):
    with pytest.raises(DocumentError) as found:
        read_document(name, data)
    assert str(found.value).startswith(message) and "\n" not in str(found.value)


def test_markup_only_text_is_refused():
    with pytest.raises(DocumentError, match=r"^q\[1\]: no text to translate \(markup only\)$"):
        read_markup("<b> </b><img src=x>", "q[1]")
