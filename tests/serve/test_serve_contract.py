"""LibreTranslate's contract where `mt serve` differed: its own requests (its page's
multipart form with `secret`) are answered, fields it does not use ignored and said;
`--char-limit` is a text's characters, as LibreTranslate's; keys are read again on SIGHUP and
when their file changes."""

from __future__ import annotations

import signal
import threading
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.serving import (
    ENGLISH,
    SENTENCES,
    call,
    expected,
    loader,
    multipart,
    serving,
    start_cli_server,
    wait_ready,
)
from mt.serve.requests import FORM_TYPE

# LibreTranslate's page: a FormData of these (app.js.template), its secret when it has one
LT_PAGE = {"source": "en", "target": "es", "format": "text", "alternatives": "3"}
LT_PAGE |= {"api_key": "", "secret": "T2JmdXNjYXRlZA=="}


def form_data(**fields: str) -> tuple[bytes, str]:
    """A multipart/form-data body of `fields`, as a browser's FormData sends it."""
    parts = [
        f'--X\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    return b"".join(parts) + b"--X--\r\n", "multipart/form-data; boundary=X"


def test_libretranslate_pages_request_with_secret_is_answered(server, capfd):
    address, service = server
    beam = max(service.first.beam, 4)  # 3 alternatives
    (want,) = expected(service, ["I love you."], beam, 4)
    status, answer, _ = call(address, "/translate", *form_data(q="I love you.", **LT_PAGE))
    assert status == 200, answer
    assert answer["translatedText"] == want[0][0]
    assert answer["alternatives"] == [text for text, _ in want[1:]]
    assert answer["ignored"] == ["secret"]
    # the same as JSON, as its API's examples send it, and a form
    body = {"q": "I love you.", **LT_PAGE, "alternatives": 3}
    assert call(address, "/translate", body)[1] | {"seconds": 0} == answer | {"seconds": 0}
    form = b"q=I+love+you.&source=en&target=es&alternatives=3&secret=x"
    assert call(address, "/translate", form, FORM_TYPE)[1]["translatedText"] == want[0][0]
    # its file upload and detection, with the secret
    status, found, _ = call(address, "/translate_file", *multipart("a.txt", b"Hello.", secret="x"))
    assert status == 200 and found["ignored"] == ["secret"]
    assert found["translatedFileUrl"].startswith("/download_file/")
    status, found, _ = call(address, "/detect", *form_data(q=ENGLISH, secret="x", api_key=""))
    assert status == 200 and found[0]["language"] == "en"
    err = capfd.readouterr().err
    assert err.count("field(s) 'secret'") == 1  # said once, whoever sends it again


def test_a_clean_request_is_answered_as_before(server):
    address, service = server
    status, answer, _ = call(address, "/translate", {"q": SENTENCES[:2]})
    assert status == 200 and "ignored" not in answer
    ours = {"scores", "short", "placed", "beam", "model", "step", "seconds"}
    assert set(answer) == {"translatedText", "alternatives"} | ours
    want = expected(service, SENTENCES[:2], service.first.beam, 1)
    assert answer["translatedText"] == [hyps[0][0] for hyps in want]


def test_unknown_fields_are_ignored_sorted_and_said_in_the_log_a_bounded_number(server, capfd):
    address, _ = server
    names = [f"unknown{i:03d}" for i in range(100)]
    status, answer, _ = call(address, "/translate", {"q": "Hello.", **dict.fromkeys(names, 1)})
    assert status == 200 and answer["ignored"] == names
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if "unknown0" in line]
    assert len(said) == 1 and said[0].count("'unknown") <= 64  # UNKNOWN_SAID in all
    status, answer, _ = call(address, "/translate", {"q": "Hello.", "unknown099": 1})
    assert answer["ignored"] == ["unknown099"]
    assert "unknown099" not in capfd.readouterr().err  # said before, or past the bound


def test_char_limit_is_a_texts_characters_as_libretranslates(model):
    with serving(loader(model), max_chars=10, max_request_chars=15) as (address, _):
        wait_ready(address)
        status, answer, _ = call(address, "/translate", {"q": ["Hello.", "I love you."]})
        assert (status, answer["error"]) == (413, "q[1]: 11 characters, at most 10 (--max-chars)")
        assert call(address, "/translate", {"q": ["Hello.", "Hello.", "Hi."]})[0] == 200
        status, answer, _ = call(address, "/translate", {"q": ["Hello.", "Hello.", "Hi!!"]})
        assert (status, answer["error"]) == (
            413,
            "q: 16 characters, at most 15 a request (--max-request-chars)",
        )
        settings = call(address, "/frontend/settings")[1]
        assert settings["charLimit"] == 10  # what LibreTranslate's page holds a text to


def log_lines(process) -> list[str]:
    """The lines `process` writes on stderr, gathered as they come by a thread."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
    return lines


def test_keys_are_read_again_on_sighup_and_when_their_file_changes(model, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("first\n", encoding="utf-8")
    process, address = start_cli_server(model, "--api-keys", str(keys))
    log = log_lines(process)

    def status(key: str) -> int:
        return call(address, "/translate", {"q": "Hello.", "api_key": key})[0]

    def logged(text: str, times: int = 1) -> None:
        deadline = time.monotonic() + 20
        while sum(text in line for line in log) < times:
            assert time.monotonic() < deadline, f"never logged: {text}"
            time.sleep(0.1)

    try:
        assert (status("first"), status("second")) == (200, 403)
        keys.write_text("second 100\n", encoding="utf-8")  # the file changes
        logged("the key file changed: 1 API key(s) read from")
        assert (status("first"), status("second")) == (403, 200)
        keys.write_text("second second\n", encoding="utf-8")  # broken: the keys of before stay
        logged("line 1: expected KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]: the keys read")
        assert status("second") == 200
        process.send_signal(signal.SIGHUP)  # read again, though the file did not change
        logged("SIGHUP: ")
        keys.write_text("third\n", encoding="utf-8")
        logged("the key file changed: 1 API key(s)", times=2)
        assert (status("second"), status("third")) == (403, 200)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    text = "".join(log)
    assert not [key for key in ("first", "second", "third") if key in text]  # never logged
    assert "Traceback" not in text
