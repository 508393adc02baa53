"""`mt serve`: the JSON API against mt translate, bad input, batching, loading, the page in
headless Chromium, and SIGTERM under load. Servers listen on a free port of 127.0.0.1."""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
import time
import urllib.request

import pytest

from helpers.corpus import PAIRS
from helpers.runs import long_sentence

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.serving import (
    ENGLISH,
    SENTENCES,
    SPANISH,
    call,
    expected,
    held_loader,
    loader,
    multipart,
    serving,
    wait_ready,
)
from mt.data import tokenizer as tok
from mt.decoding.engine import open_translator
from mt.decoding.pieces import piece_limit, source_pieces
from mt.formats import FILE_FORMATS
from mt.model import max_sentence_tokens
from mt.serve.requests import FORM_TYPE, JSON_TYPE
from mt.text import translate_texts_nbest


def test_translate_answers_as_libretranslate_and_as_mt_translate(server, model):
    address, service = server
    status, answer, _ = call(
        address, "/translate", {"q": "Hello.", "source": "en", "target": "es", "alternatives": 2}
    )
    assert status == 200
    (want,) = expected(service, ["Hello."], beam=3, nbest=3)  # the beam grows to fit
    assert answer["translatedText"] == want[0][0]
    assert answer["alternatives"] == [text for text, _ in want[1:]]
    assert answer["scores"] == pytest.approx([s for _, s in want], abs=1e-4)
    assert answer["scores"] == sorted(answer["scores"], reverse=True)
    assert (answer["beam"], answer["model"], answer["step"]) == (3, "run", 60)
    assert "detectedLanguage" not in answer and answer["short"] is False

    # a list, in order, each as decoded alone; source auto as LibreTranslate's clients send it
    status, answer, _ = call(address, "/translate", {"q": SENTENCES, "source": "auto"})
    assert status == 200
    beam = service.first.beam
    assert answer["translatedText"] == [h[0][0] for h in expected(service, SENTENCES, beam, 1)]
    assert answer["alternatives"] == [[]] * len(SENTENCES)
    assert answer["short"] == [False] * len(SENTENCES)
    assert [found["language"] for found in answer["detectedLanguage"]] == ["en"] * 5

    # libretranslatepy posts a form; greedy search has no score
    form = b"q=Hello.&source=en&target=es&api_key=&beam=1"
    status, answer, _ = call(address, "/translate", form, FORM_TYPE)
    assert status == 200
    assert answer["translatedText"] == expected(service, ["Hello."], 1, 1)[0][0][0]
    assert answer["scores"] == [None]


def test_a_paragraph_is_translated_sentence_by_sentence_its_layout_kept(server):
    address, service = server
    text = "Hello.  I love you.\nWhere is the station? The coffee is hot.\n"
    status, answer, _ = call(address, "/translate", {"q": text, "alternatives": 1})
    assert status == 200
    decode = dataclasses.replace(service.first.translator.config.decode, beam=2, nbest=2)
    (want,) = translate_texts_nbest(service.first.translator, [text], decode).nbest
    assert [answer["translatedText"], *answer["alternatives"]] == [t for t, _ in want]
    best = [h[0][0] for h in expected(service, SENTENCES[:4], 2, 1)]
    assert answer["translatedText"] == f"{best[0]}  {best[1]}\n{best[2]} {best[3]}\n"


def test_a_sentence_longer_than_the_positions_is_served_whole(model, capfd):
    # the coverage guard off: the whole is judged as a long source, its pieces are not
    def opened():
        return open_translator(model, device="cpu", decode=["decode.coverage=0"])

    with serving(opened, max_chars=20_000) as (address, service):
        wait_ready(address)
        translator = service.first.translator
        text = long_sentence(
            translator.src_tokenizer, 2 * max_sentence_tokens(translator.model.cfg)
        )
        status, answer, _ = call(address, "/translate", {"q": text, "beam": 1})
    assert status == 200
    greedy = dataclasses.replace(translator.config.decode, beam=1, nbest=1)
    # cut as the model carries, within its positions (mt.decoding.trained)
    limit = piece_limit(translator.config.model, translator.decoding(greedy))
    pieces = source_pieces(translator.src_tokenizer, [text], limit)
    sources = tok.detokenize(translator.src_tokenizer, pieces.ids)
    found = translator.translate_nbest(sources, greedy).nbest
    assert len(found) >= 3  # each piece's translation put back in its place
    assert answer["translatedText"] == pieces.joined([[h[0]] for h in found])[0][0][0]
    assert "warning" not in capfd.readouterr().err


def test_health_info_and_languages(server):
    address, _ = server
    assert call(address, "/health")[1]["status"] == "ready"
    _, info, _ = call(address, "/info")
    assert (info["model"], info["engine"], info["device"], info["step"]) == (
        "run",
        "torch",
        "cpu",
        60,
    )
    assert info["config"]["model"]["d_model"] == 32 and info["serve"]["max_texts"] == 64
    assert call(address, "/languages")[1][0] == {"code": "en", "name": "English", "targets": ["es"]}


def test_concurrent_requests_share_batches_and_answer_as_alone(server):
    address, service = server
    before = call(address, "/health")[1]
    texts = [pair[0] for pair in PAIRS[:16]]
    answers: dict[str, str] = {}
    start = threading.Barrier(len(texts))

    def client(text: str) -> None:
        start.wait()
        answers[text] = call(address, "/translate", {"q": text})[1]["translatedText"]

    threads = [threading.Thread(target=client, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = call(address, "/health")[1]
    assert after["texts"] - before["texts"] == len(texts)
    assert after["batches"] - before["batches"] < len(texts)  # some requests shared a batch
    want = expected(service, texts, service.first.beam, 1)
    assert answers == {t: h[0][0] for t, h in zip(texts, want)}


def test_libretranslate_clients_drive_it(server, tmp_path):
    """The published clients of LibreTranslate's API, from PyPI, against `mt serve`: every
    call a client of a one-pair server makes, answered as LibreTranslate answers it."""
    lt = pytest.importorskip("libretranslate_aio")
    from libretranslate_aio import DetectedLanguage, Detection, ForbiddenError

    address, service = server
    beam = service.first.beam
    with lt.LibreTranslate(f"http://{address}") as client:
        assert [(x.code, x.name, x.targets) for x in client.languages()] == [
            ("en", "English", ["es"]),
            ("es", "Spanish", []),
        ]
        want = expected(service, SENTENCES, beam, 1)
        assert client.translate("Hello.", "en", "es").translated_text == want[0][0][0]
        many = client.translate(SENTENCES, "auto", "es")
        assert many.translated_text == [hyps[0][0] for hyps in want]
        assert all(isinstance(found, DetectedLanguage) for found in many.detected_language)
        assert [found.language for found in many.detected_language] == ["en"] * len(SENTENCES)
        (three,) = expected(service, ["Hello."], 3, 3)  # the beam grows to fit
        other = client.translate("Hello.", "en", "es", alternatives=2)
        assert (other.translated_text, other.alternatives) == (
            three[0][0],
            [text for text, _ in three[1:]],
        )
        english, spanish = client.detect("Where is the station?")
        assert (english, spanish.language) == (Detection(english.confidence, "en"), "es")
        assert english.confidence > 99
        assert client.detect(SPANISH)[0].language == "es"

        settings = client.frontend_settings()
        assert (settings.char_limit, settings.supported_files_format) == (1000, list(FILE_FORMATS))
        assert not (settings.suggestions or settings.api_keys or settings.key_required)
        assert (settings.language.source.code, settings.language.target.code) == ("en", "es")
        assert (settings.language.source.name, settings.language.target.name) == (
            "English",
            "Spanish",
        )

        file = tmp_path / "phrases.txt"
        file.write_text("Hello.\n\nI love you.\n", encoding="utf-8")
        url = client.translate_file(file, "en", "es").translated_file_url
        # relative to the server (never built from the Host header); a plain GET
        assert url.startswith("/download_file/") and url.endswith("phrases.txt")
        with urllib.request.urlopen(f"http://{address}{url}") as got:
            hello, love = want[0][0][0], want[1][0][0]
            assert got.read().decode() == f"{hello}\n\n{love}\n"
            assert "filename*=UTF-8''phrases.txt" in got.headers["content-disposition"]
        with pytest.raises(ForbiddenError, match=r"^Suggestions are disabled on this server\.$"):
            client.suggest("Hello.", "Hola.", "en", "es")

    # libretranslatepy, the client of chat bots and scripts: a form for each call
    lt_py = pytest.importorskip("libretranslatepy").LibreTranslateAPI(f"http://{address}")
    assert lt_py.translate("Hello.", "en", "es") == want[0][0][0]
    assert [found["language"] for found in lt_py.detect(SPANISH)] == ["es", "en"]
    assert [x["code"] for x in lt_py.languages()] == ["en", "es"]


def test_a_file_is_translated_a_request_of_lines_at_a_time(model):
    with serving(loader(model), max_texts=2) as (address, service):
        wait_ready(address)
        sizes, submit = [], service.first.submit

        async def recorded(texts, beam, nbest):
            sizes.append(len(texts))
            return await submit(texts, beam, nbest)

        service.first.submit = recorded
        lines = ["Hello.", "", "I love you.", "Good night.", "Thank you.", "Tom is here."]
        got, answer, _ = call(
            address, "/translate_file", *multipart("a.txt", "\n".join(lines).encode())
        )
        assert got == 200 and sizes == [2, 2, 1]  # the 5 lines that are not blank
        with urllib.request.urlopen(f"http://{address}{answer['translatedFileUrl']}") as f:
            translated = f.read().decode().splitlines()
        want = [x[0][0] for x in expected(service, [t for t in lines if t], service.first.beam, 1)]
        assert [t for t in translated if t] == [t.strip() for t in want] and translated[1] == ""


ONLY_SOURCE = b'--B\r\nContent-Disposition: form-data; name="source"\r\n\r\nen\r\n--B--\r\n'


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (*multipart("notes.csv", b"a,b\n"), 400, "notes.csv: file format not supported"),
        (*multipart("a.txt", b"caf\xe9\n"), 400, "a.txt: not UTF-8 text (byte 3)"),
        (*multipart("a.txt", b"Hi.\n" + b"a" * 1001), 413, "a.txt: line 2: 1001 characters"),
        (*multipart("a.txt", b"Hi.", source="fr"), 400, "source: 'fr' is not served"),
        (ONLY_SOURCE, "multipart/form-data; boundary=B", 400, "Invalid request: missing file"),
        (b"--B\r\nbroken", "multipart/form-data; boundary=B", 400, "body is not valid multipart"),
        (b"q=Hi.", FORM_TYPE, 415, "Content-Type: expected multipart/form-data"),
    ],
)
def test_translate_file_refuses_what_it_cannot_translate(
    server, body, content_type, status, message
):
    address, _ = server
    got, answer, _ = call(address, "/translate_file", body, content_type)
    assert (got, answer["error"][: len(message)]) == (status, message)


def test_detect_identifies_each_text_among_the_models_languages(server):
    address, _ = server
    status, answer, _ = call(address, "/detect", {"q": SPANISH})
    assert status == 200
    assert [found["language"] for found in answer] == ["es", "en"]  # candidates, best first
    assert answer[0]["confidence"] > 90
    assert sum(found["confidence"] for found in answer) == pytest.approx(100, abs=0.02)
    status, answer, _ = call(address, "/detect", b"q=" + ENGLISH.encode(), FORM_TYPE)
    assert (status, answer[0]["language"]) == (200, "en")
    _, answer, _ = call(address, "/detect", {"q": [ENGLISH, SPANISH], "api_key": ""})
    assert [found[0]["language"] for found in answer] == ["en", "es"]
    # mixed: the language most of the text is in, its confidence the share
    mixed = f"{ENGLISH}\nMe gustan mucho los gatos negros y los perros pequeños de mi vecino."
    ((best, other),) = call(address, "/detect", {"q": [mixed]})[1]
    assert (best["language"], other["language"]) == ("es", "en")
    assert 55 < best["confidence"] < 80


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"text": "Hello."}, 400, "q: missing"),  # a field it does not know is ignored
        ({}, 400, "q: missing"),
        ({"q": ""}, 400, "q: empty text"),
        ({"q": ["Hello.", " \n "]}, 400, "q[1]: empty text"),
        ({"q": []}, 400, "q: empty list"),
        ({"q": {"a": 1}}, 400, "q: expected a string or a list of strings, got an object"),
        ({"q": "a" * 1001}, 413, "q[0]: 1001 characters, at most 1000"),
    ],
)
def test_detect_refuses_what_it_cannot_identify(server, body, status, message):
    got, answer, _ = call(server[0], "/detect", body)
    assert (got, answer) == (status, {"error": answer["error"]})
    assert answer["error"].startswith(message)


def test_source_auto_returns_a_text_already_in_the_target_language_as_it_is(server):
    address, service = server
    _, answer, _ = call(address, "/translate", {"q": [SPANISH, "Hello."], "source": "auto"})
    hello = expected(service, ["Hello."], service.first.beam, 1)[0][0][0]
    assert answer["translatedText"] == [SPANISH, hello]
    assert [found["language"] for found in answer["detectedLanguage"]] == ["es", "en"]
    assert (answer["alternatives"], answer["scores"][0]) == ([[], []], [None])
    _, answer, _ = call(address, "/translate", {"q": SPANISH, "source": "auto", "beam": 2})
    assert (answer["translatedText"], answer["detectedLanguage"]["language"]) == (SPANISH, "es")
    # named, the source is not questioned
    _, answer, _ = call(address, "/translate", {"q": SPANISH, "source": "en", "beam": 1})
    assert answer["translatedText"] == expected(service, [SPANISH], 1, 1)[0][0][0]


def test_download_refusals(server):
    address, _ = server
    status, answer, _ = call(address, "/download_file/nothing.txt")
    assert (status, answer["error"]) == (404, "nothing.txt: no such file (or no longer kept)")


BAD = [  # body, content type, status, the message's start
    ({"q": ""}, JSON_TYPE, 400, "q: empty text"),
    ({"q": ["Hello.", "  "]}, JSON_TYPE, 400, "q[1]: empty text"),
    ({"q": []}, JSON_TYPE, 400, "q: empty list"),
    ({}, JSON_TYPE, 400, "q: missing"),
    ({"q": 3}, JSON_TYPE, 400, "q: expected a string or a list of strings, got a number"),
    ({"q": ["a", None]}, JSON_TYPE, 400, "q: expected a string or a list of strings"),
    ({"q": "a", "alternatives": "2"}, JSON_TYPE, 400, "alternatives: expected an integer"),
    ({"q": "a", "beam": True}, JSON_TYPE, 400, "beam: expected an integer, got true"),
    ({"q": "a", "beam": 99}, JSON_TYPE, 400, "beam: 99 is out of range (1 to 16)"),
    ({"q": "a", "beam": 2, "alternatives": 2}, JSON_TYPE, 400, "alternatives: 2 needs"),
    ({"q": "a", "source": "fr"}, JSON_TYPE, 400, "source: 'fr' is not served"),
    ({"q": "a", "target": "de"}, JSON_TYPE, 400, "target: 'de' is not served"),
    ({"q": "a", "format": "xml"}, JSON_TYPE, 400, "format: 'xml' is not served (text or html)"),
    (b'["q"]', JSON_TYPE, 400, "body: expected a JSON object, got a list"),
    (b'{"q": "a"', JSON_TYPE, 400, "body is not valid JSON"),
    (b"[" * 100_000, JSON_TYPE, 400, "body is not valid JSON: nested too deeply"),
    (b'{"q": "caf\xe9"}', JSON_TYPE, 400, "body is not UTF-8 (byte 10)"),
    (b"q=caf%E9", FORM_TYPE, 400, "body is not UTF-8 (byte 3 of a value)"),
    (b"q=a&alternatives=two", FORM_TYPE, 400, "alternatives: expected an integer"),
    ({"q": "a"}, "text/plain", 415, "Content-Type: expected application/json"),
    ({"q": "a" * 1001}, JSON_TYPE, 413, "q[0]: 1001 characters, at most 1000"),
    ({"q": ["Hello."] * 10_000}, JSON_TYPE, 413, "q: 10000 texts, at most 64"),
    ({"q": "word " * 600_000}, JSON_TYPE, 413, "body of 3,000,009 bytes or more"),
]


@pytest.mark.parametrize(("body", "kind", "status", "message"), BAD)
def test_bad_requests_get_a_json_error_and_the_server_goes_on(server, body, kind, status, message):
    address, _ = server
    got, answer, _ = call(address, "/translate", body, kind)
    assert (got, answer["error"][: len(message)]) == (status, message), answer
    assert list(answer) == ["error"]


def test_wrong_method_path_and_disconnecting_clients(server, capfd):
    address, _ = server
    assert call(address, "/translate")[:2] == (405, {"error": "Method Not Allowed"})
    assert call(address, "/nowhere")[:2] == (404, {"error": "Not Found"})
    host, port = address.split(":")
    head = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for sent in (head + "Content-Length: 100\r\n\r\n" + '{"q": "Hel', head):
        with socket.create_connection((host, int(port))) as raw:  # gone mid-body, mid-headers
            raw.sendall(sent.encode())
    body = json.dumps({"q": SENTENCES})
    with socket.create_connection((host, int(port))) as raw:  # gone before its answer
        raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n{body}".encode())
    status, answer, _ = call(address, "/translate", {"q": "Hello."})
    assert status == 200 and answer["translatedText"]
    assert "Traceback" not in capfd.readouterr().err


def test_loading_and_busy_answer_503_with_retry_after(model):
    loaded, free = threading.Event(), threading.Event()
    with serving(held_loader(model, free, loaded), max_requests=1) as (address, service):
        for path, body in (("/health", None), ("/info", None), ("/translate", {"q": "Hi."})):
            status, answer, headers = call(address, path, body)
            assert (status, answer, headers["retry-after"]) == (
                503,
                {"error": "the model is loading"},
                "1",
            )
        page = http.client.HTTPConnection(address)
        page.request("GET", "/")
        assert b'<textarea id="source"' in page.getresponse().read()  # the page shows at once
        loaded.set()
        wait_ready(address)
        first = threading.Thread(target=call, args=(address, "/translate", {"q": "Hi."}))
        first.start()
        while service.pending < 1:
            time.sleep(0.01)
        status, answer, _ = call(address, "/translate", {"q": "Hi there."})
        assert (status, answer["error"]) == (503, "busy: 1 request(s) in flight (--max-requests 1)")
        free.set()
        first.join()
        assert call(address, "/translate", {"q": "Hi there."})[0] == 200


def test_an_exported_folder_is_served_by_ctranslate2(model, tmp_path):
    pytest.importorskip("ctranslate2")
    from mt.export.to_ctranslate2 import to_ctranslate2

    folder = to_ctranslate2(model, tmp_path / "ct2")
    with serving(lambda: open_translator(folder, device="cpu")) as served:
        address, service = served
        wait_ready(address)
        _, info, _ = call(address, "/info")
        assert (info["engine"], info["model"], info["step"]) == ("ctranslate2", "ct2", 60)
        texts = [*SENTENCES, "Hello. I love you."]  # the text layer over CT2 alike
        _, answer, _ = call(address, "/translate", {"q": texts, "alternatives": 1})
    decode = dataclasses.replace(service.first.translator.config.decode, nbest=2)
    sentences = [*SENTENCES, "Hello.", "I love you."]
    translator = service.first.translator
    want = translator.translate_nbest(sentences, decode).nbest
    assert answer["translatedText"][:-1] == [hyps[0][0] for hyps in want[:-2]]
    assert answer["alternatives"][:-1] == [[hyps[1][0]] for hyps in want[:-2]]
    assert answer["translatedText"][-1] == f"{want[-2][0][0]} {want[-1][0][0]}"
    # a sentence longer than the positions: whole, in the pieces torch's engine cuts
    limit = max_sentence_tokens(translator.config.model)
    text = long_sentence(translator.src_tokenizer, 2 * limit)
    cut = source_pieces(translator.src_tokenizer, [text], limit)
    pieces = tok.detokenize(translator.src_tokenizer, cut.ids)
    # the cut alone: no coverage guard, which judges the whole and each piece apart
    decode = dataclasses.replace(decode, piece_tokens=limit, coverage=0.0)
    (whole,) = translator.translate_nbest([text], decode).nbest
    alone = translator.translate_nbest(pieces, decode).nbest
    assert len(pieces) >= 3 and whole[0][0] == cut.joined([[h[0]] for h in alone])[0][0][0]
