"""Hostile input to the routes and layers of issue 53: CORS and its preflight, /metrics and its
token, /spec, fields nobody knows. Each answers at once (the deadline fixture), what a client
wrote never becomes a header, a metric's label or an unbounded log, and the server goes on."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from helpers.serving import call, loader, request, serving, wait_ready
from mt.serve.deployment import Deployment

pytestmark = pytest.mark.usefixtures("deadline")  # (tests/conftest.py)

ORIGIN = "https://app.example.org"


@pytest.fixture(scope="module")
def guarded(model):
    """A server of listed origins and a metrics token."""
    deployment = Deployment.checked(cors_origins=ORIGIN, metrics_token="t0ken")
    with serving(loader(model), deployment=deployment) as (address, service):
        wait_ready(address)
        yield address, service


def series(address: str) -> set[tuple]:
    """Every series /metrics has: (name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    body = request(address, "GET", "/metrics", {"Authorization": "Bearer t0ken"})[2]
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def test_origins_not_listed_are_never_echoed(guarded):
    address, _ = guarded
    for origin in [
        ORIGIN + ".evil.example",
        ORIGIN.upper(),
        ORIGIN + "/",
        "null",
        "x" * 15_000,
        ORIGIN.encode().decode("latin-1") + "\xe9",
    ]:
        for method in ("GET", "OPTIONS"):
            status, said, _ = request(
                address,
                method,
                "/health",
                {"Origin": origin.encode("latin-1"), "Access-Control-Request-Method": "POST"},
            )
            assert status in (200, 204) and "access-control-allow-origin" not in said
    status, said, _ = request(  # a preflight asking for every header: the fixed list
        address,
        "OPTIONS",
        "/translate",
        {"Origin": ORIGIN, "Access-Control-Request-Headers": ", ".join(["x-a"] * 2000)},
    )
    assert (status, said["access-control-allow-headers"]) == (204, "Authorization, Content-Type")


def test_paths_methods_and_preflights_do_not_grow_the_metrics(guarded):
    address, _ = guarded
    before = series(address)
    names = ["/" + "".join(random.choices("abcdefgh/", k=30)) for _ in range(300)]
    for path in names:
        request(address, "OPTIONS", path, {"Origin": ORIGIN})
        request(address, "GET", path)
        request(address, "DELETE", "/translate" + path)
    grown = {labels for name, labels in series(address) - before if name == "mt_requests_total"}
    routes = {dict(labels)["route"] for labels in grown}
    assert routes <= {"other", "/metrics", "/download_file/{filename}"}
    assert len(grown) <= 8  # a label set per route, method and status: not per path


def test_the_metrics_token_refuses_at_once_whatever_is_sent(guarded):
    address, _ = guarded
    for authorization in [
        b"Bearer " + b"t" * 15_000,
        b"Bearer t0ke",
        b"Bearer t0ken ",
        b"bearer t0ken",
        b"Bearer \xff\xfe",
        b"Basic dDBrZW4=",
        b"",
    ]:
        status, said, body = request(address, "GET", "/metrics", {"Authorization": authorization})
        assert (status, said["www-authenticate"]) == (401, "Bearer"), authorization
        assert b"t0ken" not in body
    assert series(address)


def test_spec_is_the_same_document_whatever_follows_it(guarded):
    address, _ = guarded
    status, spec, _ = call(address, "/spec")
    assert status == 200
    assert call(address, "/spec?" + "a=b&" * 3000)[1] == spec
    assert call(address, "/spec", {"q": "x" * 10_000})[0] == 405
    assert call(address, "/spec/..")[0] == 404


def test_fields_nobody_knows_are_ignored_in_bounded_time_and_log(guarded, capfd):
    address, _ = guarded
    fields = {f"f{i}\x1b[31m": i for i in range(10_000)}  # 270 KB, under the body's bound
    body = json.dumps({"q": "Hello.", **fields}).encode()
    status, answer, _ = call(address, "/translate", body)
    assert status == 200 and len(answer["ignored"]) == 10_000
    assert answer["ignored"] == sorted(answer["ignored"])
    said = [line for line in capfd.readouterr().err.splitlines() if "field(s)" in line]
    assert len(said) == 1 and said[0].count("'f") <= 64 and "\x1b" not in said[0]
    many = b"".join(
        b'--X\r\nContent-Disposition: form-data; name="n%d"\r\n\r\nv\r\n' % i for i in range(17)
    )
    status, answer, _ = call(
        address, "/translate", many + b"--X--\r\n", "multipart/form-data; boundary=X"
    )
    assert (status, answer["error"]) == (400, "body: more than 16 parts (at most 16)")
    part = b'--X\r\nContent-Disposition: form-data; name="q"\r\n\r\ncaf\xe9\r\n--X--\r\n'
    status, answer, _ = call(address, "/translate", part, "multipart/form-data; boundary=X")
    assert (status, answer["error"]) == (400, "q: not UTF-8 (byte 3)")
    assert call(address, "/health")[0] == 200
