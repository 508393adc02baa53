"""`mt serve` exposed to others: API keys and per-client limits (LibreTranslate's published
clients and the page with a key), nothing decoded for a client that left, the head's size and
time bounded, the body's time, no path or Host header leaked, X-Forwarded-For believed only
from trusted proxies, log lines escaped, the page's security headers and the download store's
bounds. A tiny model (tests/serve/conftest.py's fixtures)."""

from __future__ import annotations

import http.client
import json
import re
import select
import signal
import socket
import threading
import time
import urllib.request

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.serving import (
    ENGLISH,
    SENTENCES,
    call,
    headless_chromium,
    held_loader,
    loader,
    multipart,
    serving,
    start_cli_server,
    wait_ready,
)
from mt.decoding.search import Abandoned, abandoned
from mt.serve import app as serve_app
from mt.serve import head as serve_head
from mt.serve import requests as serve_requests
from mt.serve.access import Access, Allowance, read_keys
from mt.serve.batcher import BadRequest
from mt.serve.deployment import Deployment
from mt.serve.downloads import Downloads

KEY = "k-3f9a1c"


@pytest.fixture(scope="module")
def keyed(model):
    """A server that needs a key: KEY with 3 requests a minute, `spare` with no limit."""
    keys = {KEY: Allowance(requests=3), "spare": Allowance()}
    with serving(loader(model), access=Access(keys)) as (address, service):
        wait_ready(address)
        yield address, service


def test_api_keys_403_without_200_with_429_past_the_limit(keyed, access_log):
    address, _ = keyed
    status, answer, _ = call(address, "/translate", {"q": "Hello."})
    assert (status, answer) == (403, {"error": "API key required (api_key)"})
    status, answer, _ = call(address, "/translate", {"q": "Hello.", "api_key": "guess"})
    assert (status, answer) == (403, {"error": "Invalid API key"})
    assert call(address, "/detect", {"q": "Hello."})[0] == 403
    assert call(address, "/translate_file", *multipart("a.txt", b"Hi."))[0] == 403
    body, kind = multipart("a.txt", b"Hi.", api_key=KEY)
    assert call(address, "/translate_file", body, kind)[0] == 200
    for _ in range(2):
        assert call(address, "/translate", {"q": "Hello.", "api_key": KEY})[0] == 200
    status, answer, headers = call(address, "/translate", {"q": "Hello.", "api_key": KEY})
    assert (status, answer["error"]) == (429, "too many requests: at most 3 a minute")
    assert 1 <= int(headers["retry-after"]) <= 20  # a token comes back every 20 s
    assert call(address, "/translate", {"q": "Hello.", "api_key": "spare"})[0] == 200
    assert call(address, "/health")[0] == call(address, "/languages")[0] == 200  # no key needed
    settings = call(address, "/frontend/settings")[1]
    assert settings["apiKeys"] is settings["keyRequired"] is True
    assert logged(access_log, "/frontend/settings")
    assert not [line for line in access_log if KEY in line]  # never logged


def test_libretranslate_clients_and_the_page_work_with_a_key(keyed, tmp_path):
    address, _ = keyed
    lt = pytest.importorskip("libretranslate_aio")
    with lt.LibreTranslate(f"http://{address}", api_key="spare") as client:
        assert client.translate("Hello.", "en", "es").translated_text
    with lt.LibreTranslate(f"http://{address}") as client, pytest.raises(lt.ForbiddenError):
        client.translate("Hello.", "en", "es")
    lt_py = pytest.importorskip("libretranslatepy").LibreTranslateAPI(f"http://{address}", "spare")
    assert lt_py.translate("Hello.", "en", "es")
    assert lt_py.detect(ENGLISH)[0]["language"] == "en"

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with headless_chromium(tmp_path) as driver:
        driver.get(f"http://{address}/")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: d.find_element(By.ID, "keyed").is_displayed())
        driver.find_element(By.ID, "source").send_keys("Hello.")
        wait.until(lambda d: d.find_element(By.ID, "error").text == "API key required (api_key)")
        driver.find_element(By.ID, "key").send_keys("spare\t")  # a change event
        wait.until(lambda d: d.find_element(By.ID, "status").text.endswith("beam 3"))
        assert driver.find_element(By.ID, "target").text
        driver.refresh()  # the key is remembered
        wait.until(lambda d: d.find_element(By.ID, "key").get_attribute("value") == "spare")
        assert driver.find_element(By.ID, "error").text == ""
        logs = driver.get_log("browser")  # a Content-Security-Policy violation shows here
        assert not [x for x in logs if "Content Security Policy" in x["message"]], logs


def test_per_address_limits_of_requests_and_characters(model):
    access = Access(None, Allowance(requests=100, chars=20))
    with serving(loader(model), access=access, max_request_chars=15) as (address, _):
        wait_ready(address)
        assert call(address, "/translate", {"q": ["Hello.", "Hi."]})[0] == 200  # 9 characters
        status, answer, headers = call(address, "/translate", {"q": "I love you, dog."})
        assert (status, answer["error"]) == (
            413,
            "q: 16 characters, at most 15 a request (--max-request-chars)",
        )
        status, answer, headers = call(address, "/translate", {"q": "Good morning."})
        assert (status, answer["error"]) == (429, "too many characters: at most 20 a minute")
        assert int(headers["retry-after"]) >= 1


def test_read_keys_and_its_errors(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# our clients\nalpha\nbeta 10\ngamma 5 500  # a comment\n\n")
    default = Allowance(60, 0)
    assert read_keys(str(path), default) == {
        "alpha": Allowance(60, 0),
        "beta": Allowance(10, 0),
        "gamma": Allowance(5, 500),
    }
    for text, why in (
        ("alpha\nalpha\n", "line 2: the key is listed twice"),
        ("alpha ten\n", "line 1: expected KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]"),
        ("# none\n", "no key in it"),
    ):
        path.write_text(text)
        with pytest.raises(Exception, match=re.escape(why)):
            read_keys(str(path), default)


def test_cli_refuses_a_bad_key_file_and_public_url_in_one_line(cli_main, model, tmp_path):
    code, _, err = cli_main("serve", str(model), "--api-keys", str(tmp_path / "none"))
    assert code == 2 and err.startswith(f"mt: error: --api-keys {tmp_path / 'none'}: cannot read")
    code, _, err = cli_main("serve", str(model), "--public-url", "example.org")
    assert (code, err) == (
        2,
        "mt: error: --public-url example.org: expected http://... or https://...\n",
    )


def test_nothing_is_decoded_for_a_client_that_left(model):
    """The decoder is held on a first request; a second client sends texts and leaves: once
    the decoder goes on, none of the second client's texts is decoded."""
    seen: list[str] = []
    free = threading.Event()
    with serving(held_loader(model, free, seen=seen), batch_wait_ms=0) as (address, service):
        wait_ready(address)
        first = threading.Thread(target=call, args=(address, "/translate", {"q": "Good morning."}))
        first.start()
        while "Good morning." not in seen:
            time.sleep(0.01)
        host, port = address.split(":")
        body = json.dumps({"q": SENTENCES[1:]})
        head = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n{body}".encode())
            while service.first.jobs.qsize() < 1:  # its texts are queued
                time.sleep(0.01)
        while service.pending > 1:  # the server saw it leave
            time.sleep(0.01)
        free.set()
        first.join()
        assert call(address, "/translate", {"q": "Hello."})[0] == 200  # after the queue
        assert not set(SENTENCES[1:]) & set(seen)


@pytest.fixture
def access_log(monkeypatch) -> list[str]:
    """The access log's lines from now on (they are written after each answer)."""
    lines: list[str] = []
    monkeypatch.setattr(serve_app, "log", lines.append)
    return lines


def logged(lines: list[str], text: str) -> str:
    """The first line of `lines` with `text`, once the server has written it."""
    deadline = time.monotonic() + 10
    while not any(text in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.02)
    return next((line for line in lines if text in line), "")


def raw_request(address: str, data: bytes, wait: float = 0) -> bytes:
    """What the server answers to `data` sent as it is (and `wait` seconds more)."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(data)
        time.sleep(wait)
        chunks = []
        while chunk := raw.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_head_is_bounded_in_size_and_time_and_the_body_in_time(server, monkeypatch):
    address, _ = server
    huge = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw_request(address, huge).startswith(b"HTTP/1.1 431 ")
    many = b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 3000 + b"\r\n"
    assert raw_request(address, many).startswith(b"HTTP/1.1 431 ")
    monkeypatch.setattr(serve_head, "HEAD_SECONDS", 0.3)
    monkeypatch.setattr(serve_requests, "BODY_SECONDS", 0.3)
    answer = raw_request(address, b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never ends
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert raw_request(address, b"").startswith(b"HTTP/1.1 408 ")  # one that sends nothing
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = raw_request(address, head + b'Content-Length: 100\r\n\r\n{"q": ')
    assert b" 408 " in answer.split(b"\r\n")[0] and b"body not received within 0.3 s" in answer
    assert call(address, "/health")[0] == 200


def test_a_head_is_refused_while_it_arrives(server):
    """One header line of 64 MiB sent 8 KB at a time, each piece given 50 ms for an answer:
    the server answers 431 and closes long before 1 MB (uvicorn's parser keeps a header
    whole until its line ends), and answers /health meanwhile."""
    address, _ = server
    host, port = address.split(":")
    piece, sent, answer = b"a" * 8192, 0, b""
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        while sent < 1 << 20 and not answer:  # of the 64 MiB the client would send
            try:
                raw.sendall(piece)
                sent += len(piece)
                if select.select([raw], [], [], 0.05)[0]:
                    answer = raw.recv(65536) or b"closed"
            except OSError as e:  # reset: closed with bytes unread
                answer = repr(e).encode()
            if sent == len(piece):  # before the head is too long
                assert call(address, "/health")[0] == 200
    assert answer.startswith(b"HTTP/1.1 431 "), f"{sent:,} bytes sent: {answer[:100]!r}"
    # a body is not a head, however long: two requests sent at once are both answered
    body = json.dumps({"q": "Hello.", "x": "y" * 40_000}).encode()  # a field ignored
    first = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    first += b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    answers = raw_request(address, first + b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert re.findall(rb"HTTP/1.1 (\d+)", answers) == [b"200", b"200"]


def test_no_path_no_host_header_and_escaped_logs(server, model, access_log):
    address, _ = server
    _, info, _ = call(address, "/info")
    text = json.dumps(info)
    assert str(model.parent.parent) not in text and '"/' not in text and "path" not in info
    assert "data" not in info["config"]
    connection = http.client.HTTPConnection(address, timeout=60)
    body, kind = multipart("a.txt", b"Hi.")
    connection.request(
        "POST", "/translate_file", body, {"Content-Type": kind, "Host": "evil.example"}
    )
    url = json.loads(connection.getresponse().read())["translatedFileUrl"]
    assert url.startswith("/download_file/") and "evil" not in url
    connection.request("GET", "/x%0a12:00:00%20mt%20serve:%20forged%1b[31m", headers={})
    connection.getresponse().read()
    connection.close()
    line = logged(access_log, "forged")
    assert '"GET /x\\n12:00:00 mt serve: forged\\x1b[31m" 404' in line


def test_public_url_and_trusted_proxies(model, access_log):
    deployment = Deployment.checked("https://mt.example.org/", trusted_proxies="127.0.0.1")
    with serving(loader(model), deployment=deployment) as (address, _):
        wait_ready(address)
        body, kind = multipart("a.txt", b"Hi.")
        url = call(address, "/translate_file", body, kind)[1]["translatedFileUrl"]
        assert url.startswith("https://mt.example.org/download_file/")
        request = urllib.request.Request(
            f"http://{address}/health", headers={"X-Forwarded-For": "203.0.113.7"}
        )
        urllib.request.urlopen(request).read()
    assert '203.0.113.7:0 "GET /health" 200' in logged(access_log, "203.0.113.7")


def test_x_forwarded_for_is_not_believed_by_default_and_headers_are_set(server, access_log):
    address, _ = server
    request = urllib.request.Request(
        f"http://{address}/health", headers={"X-Forwarded-For": "203.0.113.7"}
    )
    with urllib.request.urlopen(request) as answer:
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    line = logged(access_log, "GET /health")
    assert "203.0.113.7" not in line and line.startswith("127.0.0.1:")
    with urllib.request.urlopen(f"http://{address}/") as page:
        policy = page.headers["content-security-policy"]
    assert "script-src 'sha256-" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy


def test_the_download_store_is_bounded_in_bytes_and_age(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("mt.serve.downloads.time.monotonic", lambda: now[0])
    store = Downloads(max_bytes=10, max_seconds=60)
    a = store.add("a.txt", b"12345")
    b = store.add("b.txt", b"123456")  # a goes to make room
    assert store.get(a) is None and store.get(b) == b"123456"
    with pytest.raises(BadRequest, match="more than the 10 kept for downloads"):
        store.add("c.txt", b"x" * 11)
    now[0] += 61
    assert store.get(b) is None and store.size == 0


def test_sigterm_with_clients_gone_exits_0_without_a_traceback(model):
    process, address = start_cli_server(model, "--batch-wait-ms", "1000")
    host, port = address.split(":")
    body = json.dumps({"q": [f"{s} " * 30 for s in SENTENCES] * 4})
    head = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for _ in range(4):  # each leaves as soon as it has sent its texts
        with socket.create_connection((host, int(port))) as raw:
            raw.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n{body}".encode())
    process.send_signal(signal.SIGTERM)
    assert process.wait(15) == 0
    log = process.stderr.read()
    assert "stopped" in log and "Traceback" not in log and "terminate" not in log


def test_a_search_nobody_waits_for_stops_between_two_steps(model):
    """What the server's decoder sets when every client of its batch has left."""
    translator = loader(model)()
    asked = []
    token = abandoned.set(lambda: asked.append(1) or len(asked) > 3)
    try:
        with pytest.raises(Abandoned):
            translator.translate(["I love you.", "Where is the station?"])
    finally:
        abandoned.reset(token)
    assert len(asked) == 4  # three steps, then stopped before the fourth
    assert translator.translate(["Hello."])  # in another context it decodes
