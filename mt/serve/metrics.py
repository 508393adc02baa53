"""Prometheus metrics of a server, at `GET /metrics` in prometheus_client's text format
(behind `--metrics-token` when given: `Authorization: Bearer TOKEN`, LibreTranslate's
`--metrics-auth-token`; 401 without).

Counted as they happen: requests by route, method and status (`mt_requests_total`) and their
seconds (`mt_request_seconds`, a histogram by route); texts and their characters translated,
by pair of languages (`mt_texts_translated_total`, `mt_characters_translated_total`); the
decoders' batches (`mt_batch_texts`, a histogram of sentences a batch, by pair), the target
tokens they decoded (the best translation's) and the seconds they took
(`mt_decoded_tokens_total`, `mt_decoding_seconds_total`); requests refused past a limit, by
the limit's name (`mt_limits_hit_total`: max_chars, req_limit, head_bytes ...). Read when
scraped: the requests in flight, the jobs queued for each decoder, its last batch's tokens a
second, and each model's training step. Every label takes few values: a route is its pattern
(`/download_file/{filename}`), a path no route takes is `other`.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from ..decoding.coverage import Translations
from .batcher import Model, Service
from .responses import error

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)  # seconds
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # sentences
OTHER = "other"  # the route of a path no route takes


class Metrics:
    """A server's metrics, in a registry of their own (a process may run several servers:
    the tests do). `routes`: Starlette's, for each request's route pattern."""

    def __init__(self, service: Service, routes: list, token: str = "") -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.service, self.routes, self.token = service, routes, token
        self.patterns = {route.endpoint: route.path for route in routes}
        self.registry = registry = CollectorRegistry()
        pair = ["source", "target"]

        def counter(name: str, text: str, labels: list[str]) -> Any:
            return Counter(name, text, labels, registry=registry)

        self.requests = counter(
            "mt_requests",
            "Requests answered, by route, method and status.",
            ["route", "method", "status"],
        )
        self.latency = Histogram(
            "mt_request_seconds",
            "Seconds from a request's head to the end of its answer, by route.",
            ["route"],
            buckets=LATENCY,
            registry=registry,
        )
        self.texts = counter("mt_texts_translated", "Texts translated, by pair.", pair)
        self.characters = counter(
            "mt_characters_translated", "Characters of the texts translated, by pair.", pair
        )
        self.batches = Histogram(
            "mt_batch_texts",
            "Sentences a decoder batch held, by pair.",
            pair,
            buckets=BATCHES,
            registry=registry,
        )
        self.tokens = counter(
            "mt_decoded_tokens", "Target tokens decoded (each best translation's), by pair.", pair
        )
        self.decoding = counter("mt_decoding_seconds", "Seconds the decoders took, by pair.", pair)
        self.limits = counter(
            "mt_limits_hit", "Requests refused past a limit, by limit.", ["limit"]
        )
        self.speed: dict[tuple[str, str], float] = {}  # each pair's last batch: tokens a second
        registry.register(Now(self))
        service.on_batch = self.batch

    def route(self, scope: dict) -> str:
        """The pattern of the route a request went to (or would have: a preflight)."""
        found = self.patterns.get(scope.get("endpoint"))
        if found is not None:
            return found
        from starlette.routing import Match

        return next(
            (route.path for route in self.routes if route.matches(scope)[0] != Match.NONE), OTHER
        )

    def answered(self, scope: dict, status: int | str, seconds: float) -> None:
        """A request answered (or not: its status says why)."""
        route = self.route(scope)
        self.requests.labels(route, scope["method"], str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def translated(self, model: Model, texts: list[str]) -> None:
        """`texts` given to `model` to translate."""
        self.texts.labels(*model.pair).inc(len(texts))
        self.characters.labels(*model.pair).inc(sum(map(len, texts)))

    def refused(self, limit: str) -> None:
        """A request refused past `limit` (BadRequest.limit)."""
        self.limits.labels(limit).inc()

    def batch(self, model: Model, found: Translations, seconds: float) -> None:
        """A decoder batch done (in its decoder thread, once its requests are answered):
        its sentences, their best translations' tokens (as the coverage guard measured
        them: no tokenizer pass of its own) and its seconds."""
        tokens = sum(found.tokens)
        self.batches.labels(*model.pair).observe(len(found.nbest))
        self.tokens.labels(*model.pair).inc(tokens)
        self.decoding.labels(*model.pair).inc(seconds)
        self.speed[model.pair] = tokens / seconds if seconds > 0 else 0.0

    async def endpoint(self, request: Any) -> Any:
        """GET /metrics: the text format, or 401 without the token where one is set."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        from starlette.responses import Response

        if self.token:
            given = request.headers.get("authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
                why = "Unauthorized: /metrics needs Authorization: Bearer TOKEN (--metrics-token)"
                refused = error(401, why)
                refused.headers["WWW-Authenticate"] = "Bearer"
                return refused
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class Now:
    """What is read when scraped: the requests in flight, the jobs each decoder has queued,
    its last batch's tokens a second, each model's step."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        service, pair = self.metrics.service, ["source", "target"]
        flight = GaugeMetricFamily("mt_requests_in_flight", "Requests admitted, not answered.")
        flight.add_metric([], service.pending)
        queued = GaugeMetricFamily(
            "mt_decoder_queue", "Jobs waiting for a decoder, by pair.", labels=pair
        )
        speed = GaugeMetricFamily(
            "mt_decoded_tokens_per_second",
            "Tokens a second of a decoder's last batch, by pair.",
            labels=pair,
        )
        step = GaugeMetricFamily(
            "mt_model_step", "The training step of the model of each pair.", labels=["model", *pair]
        )
        for model in (model for model in service.models if model.ready):
            queued.add_metric(list(model.pair), model.jobs.qsize())
            speed.add_metric(list(model.pair), self.metrics.speed.get(model.pair, 0.0))
            step.add_metric([str(model.info["model"]), *model.pair], model.info["step"] or 0)
        yield from (flight, queued, speed, step)
