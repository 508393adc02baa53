"""`mt serve` on the web as LibreTranslate is: CORS on every route (a page of another origin
calls it with `fetch` in headless Chromium; a preflight is answered), `/spec`, and a URL
prefix behind which the API, the published clients and the page (uploading a file) work."""

from __future__ import annotations

import http.server
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from helpers.serving import (
    SENTENCES,
    call,
    expected,
    headless_chromium,
    loader,
    multipart,
    request,
    serving,
    wait_ready,
)
from mt.serve import app as serve_app
from mt.serve.batcher import Service, Settings
from mt.serve.deployment import Deployment
from mt.serve.requests import DETECT_FIELDS, FIELDS, FILE_FIELDS

ORIGIN = "https://app.example.org"
PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}


def test_every_answer_allows_any_origin_and_a_preflight_is_answered(server):
    address, _ = server
    for method, path, body in [
        ("GET", "/health", None),
        ("GET", "/nowhere", None),  # a 404 too
        ("GET", "/spec", None),
        ("GET", "/metrics", None),
        ("POST", "/translate", b'{"q": "Hello."}'),
        ("POST", "/detect", b"{}"),  # a 400 too
    ]:
        headers = {"Origin": ORIGIN, "Content-Type": "application/json"}
        status, said, _ = request(address, method, path, headers, body)
        assert said["access-control-allow-origin"] == "*", (path, status)
        assert said["access-control-expose-headers"] == "Retry-After"
        assert "access-control-allow-credentials" not in said  # no cookie is used
    status, said, body = request(
        address,
        "OPTIONS",
        "/translate",
        {**PREFLIGHT, "Access-Control-Request-Headers": "content-type"},
    )
    assert (status, body) == (204, b"")
    assert said["access-control-allow-origin"] == "*"
    assert said["access-control-allow-methods"] == "GET, POST"
    assert said["access-control-allow-headers"] == "Authorization, Content-Type"
    assert said["access-control-max-age"] == str(20 * 24 * 3600)  # LibreTranslate's
    status, said, _ = request(address, "OPTIONS", "/translate")  # not a preflight
    assert (status, said["allow"]) == (204, "GET, POST, OPTIONS")


def test_listed_origins_are_echoed_and_others_get_none(model):
    deployment = Deployment.checked(cors_origins=f"{ORIGIN}, http://127.0.0.1:8080")
    with serving(loader(model), deployment=deployment) as (address, _):
        wait_ready(address)
        for origin, allowed in [(ORIGIN, ORIGIN), ("https://evil.example", None), (None, None)]:
            headers = {"Origin": origin} if origin else {}
            _, said, _ = request(address, "GET", "/health", headers)
            assert said.get("access-control-allow-origin") == allowed
            assert said["vary"] == "Origin"  # a cache must not serve one origin's to another
            if origin:
                _, said, _ = request(address, "OPTIONS", "/translate", {**PREFLIGHT, **headers})
                assert said.get("access-control-allow-origin") == allowed
    with serving(loader(model), deployment=Deployment.checked(cors_origins="")) as (address, _):
        wait_ready(address)
        _, said, _ = request(address, "GET", "/health", {"Origin": ORIGIN})
        assert not [name for name in said if name.startswith("access-control-")]


def test_spec_describes_every_route_and_field_as_libretranslate_serves_it(server):
    address, _ = server
    status, spec, _ = call(address, "/spec")
    assert status == 200 and spec["swagger"] == "2.0" and spec["basePath"] == "/"
    # every route but the page, with its methods (Starlette adds HEAD to a GET)
    table = serve_app.create_app(Service([], Settings())).routes
    routes = {r.path: {m.lower() for m in r.methods} - {"head"} for r in table if r.path != "/"}
    assert {path: set(spec["paths"][path]) for path in spec["paths"]} == routes
    fields = {
        path: tuple(p["name"] for p in spec["paths"][path]["post"]["parameters"])
        for path in ("/translate", "/detect", "/translate_file")
    }
    assert fields == {
        "/translate": FIELDS,
        "/detect": DETECT_FIELDS,
        "/translate_file": FILE_FIELDS,
    }
    # every field of an answer is described (source auto: detectedLanguage; secret: ignored)
    status, said, _ = call(address, "/translate", {"q": "Hello.", "source": "auto", "secret": 1})
    assert status == 200 and set(said) <= set(spec["definitions"]["translate"]["properties"])
    assert call(address, "/spec", {})[0] == 405  # as LibreTranslate's own test says


@pytest.fixture(scope="module")
def prefixed(model):
    """A server under /mt, its links absolute from --public-url."""
    deployment = Deployment.checked("http://example.org:5000", url_prefix="mt/")
    with serving(loader(model), deployment=deployment) as (address, service):
        wait_ready(address, "/mt/")
        yield address, service


def test_a_url_prefix_serves_the_api_under_it_and_nothing_beside(prefixed):
    address, service = prefixed
    status, answer, _ = call(address, "/mt/translate", {"q": "Hello."})
    assert status == 200
    assert answer["translatedText"] == expected(service, ["Hello."], service.first.beam, 1)[0][0][0]
    assert call(address, "/mt/spec")[1]["basePath"] == "/mt"
    for path in ("/", "/mt"):  # the page's own address
        status, said, _ = request(address, "GET", path)
        assert (status, said["location"]) == (301, "/mt/")
    status, answer, _ = call(address, "/health")
    assert (status, answer["error"]) == (
        404,
        "not found: this server answers under /mt/ (--url-prefix)",
    )
    body, kind = multipart("a.txt", b"Hello.\n")
    url = call(address, "/mt/translate_file", body, kind)[1]["translatedFileUrl"]
    assert url.startswith("http://example.org:5000/mt/download_file/")
    path = url.removeprefix("http://example.org:5000")
    hello = expected(service, ["Hello."], service.first.beam, 1)[0][0][0]
    assert request(address, "GET", path)[2].decode() == f"{hello}\n"


def test_libretranslate_clients_work_under_a_prefix(prefixed):
    address, service = prefixed
    want = expected(service, SENTENCES[:2], service.first.beam, 1)
    lt = pytest.importorskip("libretranslate_aio")
    with lt.LibreTranslate(f"http://{address}/mt") as client:
        assert client.translate(SENTENCES[:2], "en", "es").translated_text == [
            hyps[0][0] for hyps in want
        ]
    lt_py = pytest.importorskip("libretranslatepy").LibreTranslateAPI(f"http://{address}/mt/")
    assert lt_py.translate(SENTENCES[0], "en", "es") == want[0][0][0]


# A page of another origin, as web apps call a LibreTranslate server: a JSON request (which
# the browser preflights) and LibreTranslate's own page's request, a multipart form with
# `secret`. It writes what it got, or the error, in #json and #form.
PAGE = """<!doctype html><meta charset="utf-8"><p id="json"></p><p id="form"></p><script>
const api = new URLSearchParams(location.search).get("api");
const show = (id, promise) => promise.then((a) => a.translatedText, (e) => "failed: " + e.name)
  .then((text) => { document.getElementById(id).textContent = text; });
show("json", fetch(api + "/translate", {method: "POST", headers: {"Content-Type":
  "application/json"}, body: JSON.stringify({q: "Hello.", source: "en", target: "es"})})
  .then((r) => r.json()));
const form = new FormData();
for (const [k, v] of Object.entries({q: "I love you.", source: "en", target: "es",
  format: "text", alternatives: 3, api_key: "", secret: "XYZ"})) form.append(k, v);
show("form", fetch(api + "/translate", {method: "POST", body: form}).then((r) => r.json()));
</script>"""


@contextmanager
def page_server() -> Iterator[str]:
    """A server of PAGE on a port of its own of 127.0.0.1: its origin."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(PAGE.encode())

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def test_a_page_of_another_origin_translates_with_fetch_in_headless_chromium(
    server, model, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    address, service = server
    hello = expected(service, ["Hello."], service.first.beam, 1)[0][0][0]
    beam = max(service.first.beam, 4)  # 3 alternatives: the beam grows to fit
    love = expected(service, ["I love you."], beam, 4)[0][0][0]
    with page_server() as origin, page_server() as stranger, headless_chromium(tmp_path) as driver:
        listed = Deployment.checked(cors_origins=origin)
        with serving(loader(model), deployment=listed) as (only_origin, _):
            wait_ready(only_origin)
            for page, api, want in [
                (origin, address, (hello, love)),  # any origin: *
                (origin, only_origin, (hello, love)),  # its origin listed
                (stranger, only_origin, ("failed: TypeError",) * 2),  # not listed: refused
            ]:
                driver.get(f"{page}/?api=http://{api}")
                wait = WebDriverWait(driver, 30)
                found = wait.until(
                    lambda d: (
                        all(d.find_element(By.ID, i).text for i in ("json", "form"))
                        and tuple(d.find_element(By.ID, i).text for i in ("json", "form"))
                    )
                )
                assert found == want, (page, api)


def test_the_page_under_a_prefix_translates_a_file_in_headless_chromium(prefixed, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    address, service = prefixed
    file = tmp_path / "phrases.txt"
    file.write_text("Hello.\n\nI love you.\n", encoding="utf-8")
    hello, love = (
        hyps[0][0] for hyps in expected(service, ["Hello.", "I love you."], service.first.beam, 1)
    )
    with headless_chromium(tmp_path) as driver:
        driver.get(f"http://{address}/mt/")
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: ".txt" in d.find_element(By.ID, "file").get_attribute("accept"))
        driver.find_element(By.ID, "file").send_keys(str(file))
        driver.find_element(By.ID, "upload").click()
        link = wait.until(
            lambda d: (
                d.find_element(By.ID, "download").is_displayed()
                and d.find_element(By.ID, "download")
            )
        )
        url = link.get_dom_attribute("href")
        assert url.startswith("http://example.org:5000/mt/download_file/")
        assert link.get_dom_attribute("download") == "phrases.txt"
        assert driver.find_element(By.ID, "error").text == ""
        logs = driver.get_log("browser")
        assert not [x for x in logs if "Content Security Policy" in x["message"]], logs
    path = url.removeprefix("http://example.org:5000")
    with urllib.request.urlopen(f"http://{address}{path}") as got:
        assert got.read().decode() == f"{hello}\n\n{love}\n"
