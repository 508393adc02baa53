"""Documents through `mt serve` and `mt translate`: `format: html` and /translate_file with
.html and .docx driven by LibreTranslate's published client, the same documents as
mt.formats translates them with the model alone, every bad document a 400/413 (the server
going on) or one line and exit 2, and the page translating a pasted paragraph in headless
Chromium. A tiny model (tests/serve/conftest.py's fixtures): the asserts are about structure."""

from __future__ import annotations

import io
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.documents import epub_file, slides_file
from helpers.serving import call, expected, headless_chromium, multipart

pytest.importorskip("selectolax")

from mt.formats import read_document, read_markup, translate_documents

HTML = '<p class="x">I love <b>the <i>cat</i></b> &amp; <a href="/d?a=1&amp;b=2">the dog</a>.</p>'


def local(service, documents: list) -> list[bytes]:
    """What mt.formats gives with the served model's own decoding of each text."""

    def translate(texts: list[str]) -> list[str]:
        return [hyps[0][0] for hyps in expected(service, texts, service.first.beam, 1)]

    return translate_documents(documents, translate)


def docx_file() -> bytes:
    docx = pytest.importorskip("docx")
    made = docx.Document()
    made.add_heading("The cat", 1)
    paragraph = made.add_paragraph("I love ")
    paragraph.add_run("the cat").bold = True
    paragraph.add_run(" and the dog.")
    made.add_table(rows=1, cols=2).cell(0, 1).text = "Good morning."
    data = io.BytesIO()
    made.save(data)
    return data.getvalue()


def test_the_libretranslate_client_drives_html_and_files(server, tmp_path):
    lt = pytest.importorskip("libretranslate_aio")
    docx = pytest.importorskip("docx")
    address, service = server
    with lt.LibreTranslate(f"http://{address}") as client:
        got = client.translate(HTML, "en", "es", format="html").translated_text
        assert got == local(service, [read_markup(HTML, "q")])[0].decode()
        assert got.startswith('<p class="x">') and got.count("<b>") == got.count("<i>") == 1
        assert '<a href="/d?a=1&amp;b=2">' in got
        many = client.translate([HTML, "<b>Hello.</b>"], "en", "es", format="html")
        assert many.translated_text[0] == got and many.translated_text[1].startswith("<b>")

        for name, data in (("page.html", f"<html><body>{HTML}</body></html>".encode()),):
            (tmp_path / name).write_bytes(data)
        (tmp_path / "letter.docx").write_bytes(docx_file())
        for name in ("page.html", "letter.docx"):
            url = client.translate_file(tmp_path / name, "en", "es").translated_file_url
            assert url.endswith(name)
            with urllib.request.urlopen(f"http://{address}{url}") as answer:
                data = answer.read()
            want = local(service, [read_document(name, (tmp_path / name).read_bytes())])[0]
            assert data == want or name.endswith(".docx")  # a zip's timestamps differ
        back = docx.Document(io.BytesIO(data))
        original = docx.Document(io.BytesIO(docx_file()))
        assert [(p.style.name, [r.bold for r in p.runs]) for p in back.paragraphs] == [
            (p.style.name, [r.bold for r in p.runs]) for p in original.paragraphs
        ]
        want = docx.Document(io.BytesIO(want))
        assert [p.text for p in back.paragraphs] == [p.text for p in want.paragraphs]
        assert back.tables[0].cell(0, 1).text == want.tables[0].cell(0, 1).text
        assert back.tables[0].cell(0, 0).text == ""


@pytest.mark.parametrize("kind", ["pptx", "odp", "epub"])
def test_slides_and_books_are_translated_through_translate_file(server, kind):
    address, service = server
    texts = ["I love the cat.", "Good morning."]
    data = epub_file("".join(f"<p>{t}</p>" for t in texts)) if kind == "epub" else None
    data = data or slides_file(kind, texts)
    status, answer, _ = call(address, "/translate_file", *multipart(f"deck.{kind}", data))
    assert status == 200 and answer["translatedFileUrl"].endswith(f"deck.{kind}")
    with urllib.request.urlopen(f"http://{address}{answer['translatedFileUrl']}") as got:
        back = read_document(f"deck.{kind}", got.read())
    want = read_document(f"deck.{kind}", local(service, [read_document(f"deck.{kind}", data)])[0])
    assert back.units == want.units and len(back.blocks) == len(want.blocks)


SUBTITLES = b"1\n00:00:01,000 --> 00:00:02,000\nHello.\n\n"
NESTED = "<div>" * 77_000 + "Hi."  # 385 KB whose parse takes 18 s unchecked
REOPENED = "<p>" + "".join(f"<b id={i}>" for i in range(300)) + "<p>x" * 4_000  # +476 MB


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/translate", {"q": "<b> </b><br>", "format": "html"}, 400, "q: no text to translate"),
        ("/translate", {"q": ["Hi.", "<i></i>"], "format": "html"}, 400, "q[1]: no text"),
        ("/translate", {"q": "x" * 1001, "format": "html"}, 413, "q: 1001 characters"),
        ("/translate", {"q": "<b>a</b>", "format": "html", "alternatives": 1}, 400, "altern"),
        ("/translate_file", multipart("a.docx", b"not a zip"), 400, "a.docx: not a valid .docx"),
        ("/translate_file", multipart("a.srt", SUBTITLES.replace(b"2,", b"x,")), 400, "a.srt: not"),
        ("/translate_file", multipart("a.pdf", b"%PDF-1.4"), 400, "a.pdf: file format not sup"),
        ("/translate_file", multipart("a.html", b"<img src=x>"), 400, "a.html: no text to trans"),
        ("/translate_file", multipart("n.html", NESTED.encode()), 413, "n.html: markup nested"),
        ("/translate_file", multipart("r.html", REOPENED.encode()), 413, "r.html: markup that"),
        ("/translate", {"q": NESTED[-300_000:], "format": "html"}, 413, "q: markup nested too"),
        (
            "/translate_file",
            multipart(
                "a.srt", SUBTITLES + b"2\n00:00:03,000 --> 00:00:04,000\n" + b"a" * 1001 + b"\n"
            ),
            413,
            "a.srt: cue 2: 1001 char",
        ),
    ],
)
def test_bad_documents_get_a_json_error_and_the_server_goes_on(server, path, body, status, message):
    address, service = server
    got, answer, _ = (
        call(address, path, *body) if isinstance(body, tuple) else call(address, path, body)
    )
    assert (got, list(answer), answer["error"][: len(message)]) == (status, ["error"], message)
    assert call(address, "/translate", {"q": "Hello."})[0] == 200
    assert service.pending == 0  # nothing left waiting


def test_max_chars_counts_the_text_not_the_markup(server):
    address, _ = server
    markup = f'<a href="/{"x" * 2000}" title="{"y" * 500}">Hello.</a>'
    status, answer, _ = call(address, "/translate", {"q": markup, "format": "html"})
    assert status == 200 and answer["translatedText"].startswith(f'<a href="/{"x" * 2000}"')


def test_mt_translate_translates_documents_and_refuses_bad_ones(cli_main, model, tmp_path):
    docx = pytest.importorskip("docx")
    page = tmp_path / "page.html"
    page.write_text(HTML, encoding="utf-8")
    code, out, _ = cli_main("translate", "--checkpoint", str(model), "--file", str(page))
    assert code == 0 and out.startswith('<p class="x">') and out.count("<b>") == 1
    code, again, _ = cli_main("translate", "--checkpoint", str(model), "--format", "html", HTML)
    assert (code, again) == (0, out)  # an argument as a fragment, as the file
    (tmp_path / "letter.docx").write_bytes(docx_file())
    code, _, err = cli_main(
        "translate",
        "--checkpoint",
        str(model),
        "--file",
        str(tmp_path / "letter.docx"),
        "--out",
        str(tmp_path / "carta.docx"),
    )
    assert code == 0 and err.endswith("carta.docx\n")
    back = docx.Document(str(tmp_path / "carta.docx"))
    assert [r.bold for r in back.paragraphs[1].runs] == [None, True, None]
    (tmp_path / "book.epub").write_bytes(epub_file("<p>I love the cat.</p>"))
    book = ["--file", str(tmp_path / "book.epub")]
    libro = tmp_path / "libro.epub"
    code, _, err = cli_main("translate", "--checkpoint", str(model), *book, "--out", str(libro))
    assert code == 0 and read_document(libro.name, libro.read_bytes()).units
    (tmp_path / "broken.srt").write_bytes(b"1\n00:00:0x --> 00:00:02,000\nHi\n")
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    (tmp_path / "r.html").write_text(REOPENED, encoding="utf-8")
    bad = [
        (["--file", str(tmp_path / "r.html")], "r.html: markup that makes the parser build"),
        (["--format", "html", NESTED[-100_000:]], "argument 1: markup nested too deeply"),
        (["--file", str(tmp_path / "letter.docx")], "letter.docx: a .docx file needs --out"),
        (book, "book.epub: a .epub file needs --out"),
        (["--file", str(tmp_path / "broken.srt")], "broken.srt: not a valid .srt file"),
        (["--file", str(tmp_path / "a.pdf")], "a.pdf: file format not supported"),
        (["--file", str(page), "--out", str(page)], "page.html: is the --file itself"),
        (["--file", str(tmp_path / "none.odt"), "--out", "x.odt"], "none.odt: no such file"),
        (["--format", "xml", "Hi."], "--format xml: expected text or html"),
        (["--format", "html", "<b></b>"], "argument 1: no text to translate (markup only)"),
        (["--format", "html", "--nbest", "2", "<b>Hi</b>"], "--nbest: a document gets one"),
        (["--out", "x.txt", "Hi."], "--out is for documents"),
    ]
    for args, message in bad:
        code, out, err = cli_main("translate", "--checkpoint", str(model), *args)
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert err.startswith("mt: error: ") and message in err
    assert not Path("x.odt").exists()


def test_the_page_translates_a_pasted_paragraph_in_headless_chromium(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    paragraph = "Hello. I love you. Where is the station?"
    with headless_chromium(tmp_path) as driver:
        address, _ = server
        driver.get(f"http://{address}/")
        WebDriverWait(driver, 30).until(lambda d: "step 60" in d.find_element(By.ID, "model").text)
        source = driver.find_element(By.ID, "source")
        # a paste: the whole paragraph at once, then the input event a paste fires
        driver.execute_script(
            "arguments[0].value = arguments[1];"
            "arguments[0].dispatchEvent(new InputEvent('input', {inputType: 'insertFromPaste'}))",
            source,
            paragraph,
        )
        status = WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.ID, "status").text.partition(" · beam ")[2]
        )
        _, answer, _ = call(address, "/translate", {"q": [paragraph], "beam": int(status)})
        want = " ".join(answer["translatedText"][0].split())  # as HTML shows it
        assert driver.find_element(By.ID, "target").text == want != ""
        assert driver.find_element(By.ID, "error").text == ""
