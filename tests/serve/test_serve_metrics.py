"""`/metrics`: after a known load, read with prometheus_client's own parser, every count is
exact (requests by route and status, texts, characters, batches, tokens, limits hit); the
token is needed when set; a Prometheus server (Debian's) scrapes it."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from helpers.services import prometheus, prometheus_query
from helpers.serving import SENTENCES, call, loader, request, serving, wait_ready
from mt.data import tokenizer as tok
from mt.serve.access import Access, Allowance
from mt.serve.deployment import Deployment

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def scraped(address: str, path: str = "/metrics", headers: dict | None = None) -> dict:
    """The samples of a scrape, by (name, labels): what prometheus_client's parser reads."""
    from prometheus_client.parser import text_string_to_metric_families

    status, said, body = request(address, "GET", path, headers or BEARER)
    assert status == 200 and said["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_known_load_is_counted_exactly(model):
    deployment = Deployment.checked(metrics_token=TOKEN)
    access = Access(None, Allowance(requests=0, chars=40))
    with serving(loader(model), access=access, deployment=deployment, max_texts=3) as (
        address,
        service,
    ):
        wait_ready(address)
        texts = [SENTENCES[i % 3 : i % 3 + 1 + i % 2] for i in range(6)]  # 1 or 2 texts each
        sent, answers = [], []
        for batch in texts:
            status, answer, _ = call(address, "/translate", {"q": batch})
            if status == 200:
                sent.append(batch)
                answers += answer["translatedText"]
            else:
                assert status == 429  # past the 40 characters a minute
        assert 2 <= len(sent) < len(texts)
        refused = len(texts) - len(sent)
        for _ in range(2):  # past --max-texts: refused before any character is counted
            assert call(address, "/translate", {"q": ["a", "b", "c", "d"]})[0] == 413
        assert call(address, "/nowhere/1")[0] == call(address, "/nowhere/2")[0] == 404
        raw = b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n"
        host, port = address.split(":")
        with socket.create_connection((host, int(port))) as connection:
            connection.sendall(raw)
            assert connection.recv(100).startswith(b"HTTP/1.1 431 ")

        got = scraped(address)
        n, c = len(sent), sum(len(text) for batch in sent for text in batch)
        route = {"route": "/translate", "method": "POST"}
        assert value(got, "mt_requests_total", **route, status="200") == n
        assert value(got, "mt_requests_total", **route, status="429") == refused
        assert value(got, "mt_requests_total", **route, status="413") == 2
        assert value(got, "mt_request_seconds_count", route="/translate") == n + refused + 2
        other = {"route": "other", "method": "GET", "status": "404"}
        assert value(got, "mt_requests_total", **other) == 2  # one label for every path
        pair = {"source": "en", "target": "es"}
        assert value(got, "mt_texts_translated_total", **pair) == sum(map(len, sent))
        assert value(got, "mt_characters_translated_total", **pair) == c
        assert value(got, "mt_limits_hit_total", limit="chars_per_minute") == refused
        assert value(got, "mt_limits_hit_total", limit="max_texts") == 2
        assert value(got, "mt_limits_hit_total", limit="head_bytes") == 1
        # the decoders': every sentence in some batch, every token of the answers counted
        batches, decoded = service.first.batches, service.first.decoded
        assert value(got, "mt_batch_texts_count", **pair) == batches
        assert value(got, "mt_batch_texts_sum", **pair) == decoded == sum(map(len, sent))
        tokens = sum(map(len, tok.encode(service.first.translator.tgt_tokenizer, answers)))
        assert value(got, "mt_decoded_tokens_total", **pair) == tokens
        assert value(got, "mt_decoding_seconds_total", **pair) > 0
        assert value(got, "mt_decoded_tokens_per_second", **pair) > 0
        assert value(got, "mt_model_step", model="run", **pair) == 60
        assert value(got, "mt_requests_in_flight") == 0
        assert value(got, "mt_decoder_queue", **pair) == 0
        # a scrape counts itself once answered
        again = scraped(address)
        metrics = {"route": "/metrics", "method": "GET", "status": "200"}
        assert value(again, "mt_requests_total", **metrics) == 1


def test_the_token_is_needed_when_set(model):
    with serving(loader(model), deployment=Deployment.checked(metrics_token=TOKEN)) as (
        address,
        _,
    ):
        wait_ready(address)
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            status, said, body = request(address, "GET", "/metrics", headers)
            assert (status, said["www-authenticate"]) == (401, "Bearer"), headers
            assert b"--metrics-token" in body and TOKEN.encode() not in body
        assert scraped(address)  # with it
        assert call(address, "/health")[0] == 200  # nothing else needs it
    with serving(loader(model)) as (address, _):  # no token: anyone may read them
        wait_ready(address)
        assert scraped(address, headers={})


def test_a_prometheus_server_scrapes_it(model, tmp_path):
    deployment = Deployment.checked(metrics_token=TOKEN, url_prefix="/mt")
    with serving(loader(model), deployment=deployment) as (address, _):
        wait_ready(address, "/mt/")
        for text in SENTENCES[:3]:
            assert call(address, "/mt/translate", {"q": text})[0] == 200
        with prometheus(tmp_path, address, "/mt/metrics", TOKEN) as server:
            query = 'mt_requests_total{route="/translate",status="200"}'
            deadline = time.monotonic() + 60
            while not (found := prometheus_query(server, query)):
                assert time.monotonic() < deadline, prometheus_query(server, "up")
                time.sleep(0.5)
            assert [float(x["value"][1]) for x in found] == [3.0]
            (up,) = prometheus_query(server, 'up{job="mt"}')
            assert up["value"][1] == "1"
