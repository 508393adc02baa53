"""`mt serve`: one model kept in memory behind a JSON API and a web page: the Starlette
application, its access log, the socket and the uvicorn server, and the graceful stop.

The model loads after the port is bound: until it is ready, /health and /translate answer
503. SIGINT or SIGTERM stops accepting connections, finishes the requests in flight (at most
`STOP_SECONDS`) and exits 0.

Around the routes (mt.serve.web): CORS and the URL prefix; /metrics (mt.serve.metrics) and
/spec (mt.serve.spec) beside them. The key file is read again on SIGHUP and when it changes
(mt.serve.access); with `--shared-storage` the replicas share limits and downloads through
Redis (mt.serve.shared), whose connection is made when the server starts.

What uvicorn leaves open, set as nginx sets it: a request's line and headers at most
16 KB (431 beyond, counted as they arrive) and all in within 8 s (408; head.py), a body within
requests.BODY_SECONDS, at most --max-connections connections (503), X-Forwarded-For believed
only from --trusted-proxies. Every answer carries `X-Content-Type-Options: nosniff` and a
Content-Security-Policy that forbids framing; the log escapes what the client wrote.

Starlette and uvicorn are an optional extra (pip install 'mt[serve]', with httptools and uvloop,
which uvicorn picks up: a fifth of the CPU time a request), imported only in the functions
that run a server: training never imports them.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MachineError

if TYPE_CHECKING:  # asyncio is imported where a server runs: `mt --help` stays quick
    from ..decoding.engine import Translator

from .access import Access
from .api import Api
from .batcher import STOP_SECONDS, Service, Settings, log
from .deployment import Deployment
from .head import guarded_protocol
from .metrics import Metrics
from .responses import error, json_answer, printable
from .shared import reachable
from .spec import document
from .web import cross_origin, under_prefix

# every answer's: no MIME sniffing, no framing (the page sets a stricter policy of its own)
HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def create_app(
    service: Service, access: Access | None = None, deployment: Deployment | None = None
) -> Any:
    """The Starlette application of `service`, in its layers: the access log and headers,
    CORS, the URL prefix; its attributes `metrics` (the server's: mt.serve.metrics) and
    `routes` (its table)."""
    import asyncio
    from contextlib import asynccontextmanager
    from importlib.metadata import PackageNotFoundError, version

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    access, deployment = access or Access(), deployment or Deployment()
    api = Api(service, access, deployment)
    try:
        spec = document(deployment.url_prefix, version("mt"))
    except PackageNotFoundError:  # run from a checkout that is not installed
        spec = document(deployment.url_prefix, "0")

    async def http_error(request: Any, e: HTTPException) -> Any:
        return error(e.status_code, e.detail)

    async def server_error(request: Any, e: Exception) -> Any:
        return error(500, "internal error (the server's log has the details)")

    async def spec_answer(request: Any) -> Any:
        return json_answer(spec)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        await api.store.open()
        service.start()
        watch = asyncio.ensure_future(access.watch(asyncio.sleep)) if access.path else None
        yield
        if watch is not None:
            watch.cancel()
        service.stop()
        await api.store.close()

    post = ["POST"]
    routes = [
        Route("/", api.index),
        Route("/health", api.health),
        Route("/info", api.info),
        Route("/languages", api.languages),
        Route("/translate", api.translate, methods=post),
        Route("/detect", api.detect, methods=post),
        Route("/frontend/settings", api.frontend_settings),
        Route("/translate_file", api.translate_file, methods=post),
        Route("/download_file/{filename}", api.download_file, name="download_file"),
        Route("/suggest", api.suggest, methods=post),
        Route("/spec", spec_answer),
    ]
    metrics = api.metrics = Metrics(service, routes, deployment.metrics_token)
    routes.append(Route("/metrics", metrics.endpoint))
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    app = under_prefix(app, deployment.url_prefix)
    app = access_log(cross_origin(app, deployment.cors_origins), metrics)
    app.metrics = metrics  # for the head guard's refusals, which come before any route
    app.routes = routes
    return app


def access_log(app: Any, metrics: Metrics) -> Any:
    """One stderr line a request: client, method, path, status, texts, milliseconds; and
    HEADERS on every answer; each request counted by the metrics. A request cancelled at
    stop (its grace over) ends quietly."""
    import asyncio

    async def logged(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        started, status = time.perf_counter(), [0]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                names = {name for name, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in HEADERS if k not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await app(scope, receive, sending)
        except asyncio.CancelledError:
            status[0] = status[0] or "cancelled at stop"
        finally:
            host, port = scope.get("client") or ("-", 0)
            texts = f" {scope['mt.texts']} texts" if "mt.texts" in scope else ""
            seconds = time.perf_counter() - started
            said = printable(f'{host}:{port} "{scope["method"]} {scope["path"]}"')
            log(f"{said} {status[0] or '-'}{texts} {seconds * 1000:.0f} ms")
            metrics.answered(scope, status[0] or "cancelled", seconds)

    return logged


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening (port 0: a free one), or a one-line error."""
    try:
        # proto TCP, not 0: asyncio then turns Nagle's algorithm off on each connection, else
        # an answer written in two parts waits 40 ms for the client's delayed ACK
        family, kind, proto, _, _ = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        raise ConfigError(f"{host}:{port}: cannot listen ({e.strerror or e})") from None
    return sock


def server(
    app: Any,
    max_connections: int = Settings.max_connections,
    trusted_proxies: str = "",
    refused: Callable[[str], None] = lambda limit: None,
) -> Any:
    """The uvicorn server of `app`: our access log instead of uvicorn's, its own warnings,
    the head bounded (each head refused told to `refused`, by its limit's name),
    X-Forwarded-For believed only from `trusted_proxies` (comma-separated addresses or
    networks)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=guarded_protocol(refused),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=STOP_SECONDS,
        limit_concurrency=max_connections,
        proxy_headers=bool(trusted_proxies),
        forwarded_allow_ips=trusted_proxies or None,
        server_header=False,
    )
    return uvicorn.Server(config)


def run(
    open_models: list[Callable[[], Translator]],
    settings: Settings,
    host: str,
    port: int,
    access: Access | None = None,
    deployment: Deployment | None = None,
):
    """Serve until SIGINT or SIGTERM (SIGHUP: the key file read again); the error of a model
    that failed to load is raised."""
    try:
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise MachineError(
            "starlette, uvicorn and prometheus_client are not installed: pip install 'mt[serve]'"
        ) from None
    access, deployment = access or Access(), deployment or Deployment()
    if deployment.shared_storage:
        reachable(deployment.shared_storage)
    sock = listen(host, port)
    service = Service(open_models, settings)
    app = create_app(service, access, deployment)
    metrics = app.metrics
    uv = server(app, settings.max_connections, deployment.trusted_proxies, metrics.refused)
    service.on_failure = lambda: setattr(uv, "should_exit", True)
    stop = uv.handle_exit  # uvicorn's signal handler, which starts the graceful stop

    def stopping(sig: int, frame: Any) -> None:
        log(f"{signal.Signals(sig).name}: finishing {service.pending} requests, then stopping")
        stop(sig, frame)

    uv.handle_exit = stopping
    where = f"http://{host}:{sock.getsockname()[1]}{deployment.url_prefix}/"
    log(f"loading the model; listening on {where}")
    # uvicorn raises the signal it stopped on again once it has stopped; ignoring that second
    # one lets a server stopped as asked exit 0
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: access.hung_up())
    try:
        uv.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if service.error is not None:
        raise service.error
    log("stopped")
    if service.busy:  # the interpreter must not exit under a thread inside torch: an abort
        sys.stderr.flush()
        os._exit(0)
