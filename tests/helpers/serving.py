"""What the serve tests share: sentences, an in-process server, one request, what `mt
translate` gives, a multipart body, headless Chromium, `mt serve` in a process of its own."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers.runs import mt_executable
from mt.decoding.engine import Translator, open_translator
from mt.serve import app as serve_app
from mt.serve.access import Access
from mt.serve.batcher import Service, Settings
from mt.serve.deployment import Deployment
from mt.serve.requests import JSON_TYPE

SENTENCES = ["Hello.", "I love you.", "Where is the station?", "The coffee is hot.", "Let's go!"]
SPANISH = "¿Dónde está la estación de tren más cercana?"
ENGLISH = "Where is the nearest train station?"


def loader(model: Path) -> Callable[[], Translator]:
    return lambda: open_translator(model, device="cpu")


@contextmanager
def serving(
    *open_models: Callable[[], Translator],
    access: Access | None = None,
    deployment: Deployment | None = None,
    **settings,
):
    """An in-process server of one model or several on a free port: (its URL, its Service)."""
    service = Service(list(open_models), Settings(**settings))
    sock = serve_app.listen("127.0.0.1", 0)
    deployment = deployment or Deployment()
    app = serve_app.create_app(service, access, deployment)
    server = serve_app.server(
        app, service.settings.max_connections, deployment.trusted_proxies, app.metrics.refused
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}", service
    finally:
        server.should_exit = True
        thread.join(10)


def call(
    address: str,
    path: str,
    body: dict | bytes | None = None,
    content_type: str = JSON_TYPE,
    method: str | None = None,
) -> tuple[int, dict | list, dict]:
    """(status, JSON answer, headers) of one request."""
    connection = http.client.HTTPConnection(address, timeout=60)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    headers = {"Content-Type": content_type} if body is not None else {}
    connection.request(method or ("GET" if body is None else "POST"), path, body, headers)
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, json.loads(answer), dict(response.getheaders())


def request(
    address: str, method: str, path: str, headers: dict | None = None, body: bytes | None = None
) -> tuple[int, dict, bytes]:
    """(status, headers with lowercase names, body) of one request, whatever it answers."""
    connection = http.client.HTTPConnection(address, timeout=60)
    connection.request(method, path, body, headers or {})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def wait_ready(address: str, root: str = "/") -> None:
    """Once the server at `address`, under the path `root`, answers /health."""
    deadline = time.monotonic() + 60
    while call(address, f"{root}health")[0] != 200:
        assert time.monotonic() < deadline, "the server did not get ready in 60 s"
        time.sleep(0.05)


def expected(service: Service, texts: list[str], beam: int, nbest: int) -> list:
    """What mt translate's own function gives for `texts` decoded alone."""
    decode = dataclasses.replace(service.first.translator.config.decode, beam=beam, nbest=nbest)
    return [service.first.translator.translate_nbest([t], decode).nbest[0] for t in texts]


def multipart(name: str, data: bytes, **fields: str) -> tuple[bytes, str]:
    """A multipart/form-data body with `file` and `fields`, and its content type."""
    parts = [
        f'--B\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    head = f'--B\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
    body = b"".join(parts) + head.encode() + data + b"\r\n--B--\r\n"
    return body, "multipart/form-data; boundary=B"


def chromium() -> tuple[str, str]:
    """The paths of Debian's chromium and chromedriver, or a skip saying what is missing."""
    pytest.importorskip("selenium", reason="selenium is not installed: make install")
    found = [shutil.which(name) for name in ("chromium", "chromedriver")]
    if not all(found):
        pytest.skip("no chromium and chromedriver: make install installs them as root")
    return found[0], found[1]


@contextmanager
def headless_chromium(tmp_path: Path):
    """A headless Chromium driven by selenium (its leftovers in `tmp_path`), or a skip."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as Driver

    browser, driver_path = chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,700"):
        options.add_argument(flag)
    temporary = {**os.environ, "TMPDIR": str(tmp_path)}
    driver = webdriver.Chrome(options=options, service=Driver(driver_path, env=temporary))
    try:
        yield driver
    finally:
        driver.quit()


def start_cli_server(model: Path, *options: str) -> tuple[subprocess.Popen, str]:
    """`mt serve` in a process of its own, once ready: (the process, its address)."""
    process = subprocess.Popen(
        [mt_executable(), "serve", str(model), "--port", "0", *options],
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    line = process.stderr.readline()
    assert "listening on http://127.0.0.1:" in line, line
    address, _, prefix = line.rsplit("http://", 1)[1].strip().partition("/")
    wait_ready(address, "/" + prefix)
    return process, address


def held_loader(
    model: Path, free: threading.Event, loaded: threading.Event | None = None, seen=None
) -> Callable[[], Translator]:
    """A loader whose translator waits for `free` before each batch but the warm-up (and
    itself, once called, for `loaded`), noting each batch's texts in `seen`."""

    def load() -> Translator:
        if loaded is not None:
            loaded.wait(30)
        translator = loader(model)()
        decode = translator.translate_nbest

        def held(texts: list[str], *args):
            if seen is not None:
                seen.extend(texts)
            if texts != ["Hello."]:  # the warm-up passes
                free.wait(30)
            return decode(texts, *args)

        translator.translate_nbest = held
        return translator

    return load
