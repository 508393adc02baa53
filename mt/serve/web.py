"""The layers between the HTTP server and the routes that place the server on the web: a URL
prefix (`--url-prefix`: served under /mt behind a proxy, as LibreTranslate's) and CORS
(`--cors-origins`: which web pages of other origins may call it from a browser).

CORS as LibreTranslate answers it: with `*` (its default and ours) every answer says
`Access-Control-Allow-Origin: *`; with a list, the request's Origin is echoed when it is one
of them (and `Vary: Origin` is said). A preflight (`OPTIONS` with an Origin) is answered here,
204 with the methods and headers a page may use, cached 20 days by the browser; any other
OPTIONS gets 204 and `Allow`. No cookie is used, so no credentials are allowed: an API key
travels in the request's body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

METHODS = b"GET, POST"
HEADERS = b"Authorization, Content-Type"  # LibreTranslate's
EXPOSED = b"Retry-After"  # so that a page can read how long to wait after a 429 or 503
MAX_AGE = str(20 * 24 * 3600).encode()  # LibreTranslate's 20 days


def header(scope: dict, name: bytes) -> bytes | None:
    """The value of a request's header `name` (lowercase), the first if it is repeated."""
    return next((value for key, value in scope["headers"] if key == name), None)


async def answer(send: Callable, status: int, headers: list, body: bytes = b"") -> None:
    """A whole answer, written here."""
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def under_prefix(app: Any, prefix: str) -> Any:
    """`app` served under `prefix` (/mt): a request for /mt/x reaches it as /x (its
    root_path /mt, which Starlette routes by); / and /mt are sent to /mt/ (301), the page's
    own address; any other path is a 404 naming the prefix."""
    if not prefix:
        return app
    home = (prefix + "/").encode()

    async def prefixed(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        path = scope["path"]
        if path.startswith(prefix + "/"):
            scope["root_path"] = scope.get("root_path", "") + prefix
            return await app(scope, receive, send)
        if path in ("/", prefix):
            return await answer(send, 301, [(b"location", home)])
        why = f'{{"error": "not found: this server answers under {prefix}/ (--url-prefix)"}}'
        await answer(send, 404, [(b"content-type", b"application/json")], why.encode())

    return prefixed


def cross_origin(app: Any, origins: tuple[str, ...]) -> Any:
    """`app` whose answers say which `origins` may read them ("*": any; none: no page of
    another origin), preflights answered."""
    if not origins:
        return app
    anyone = origins == ("*",)
    listed = {origin.encode() for origin in origins}
    vary = [] if anyone else [(b"vary", b"Origin")]

    def allowed(scope: dict) -> list:
        if anyone:
            return [(b"access-control-allow-origin", b"*")]
        origin = header(scope, b"origin")
        return [(b"access-control-allow-origin", origin)] if origin in listed else []

    async def layer(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        said = allowed(scope)
        if scope["method"] == "OPTIONS":
            if header(scope, b"origin") is None:  # not a preflight
                return await answer(send, 204, [(b"allow", b"GET, POST, OPTIONS")])
            methods = [(b"access-control-allow-methods", METHODS)]
            methods += [(b"access-control-allow-headers", HEADERS)]
            methods += [(b"access-control-max-age", MAX_AGE)]
            return await answer(send, 204, said + methods * bool(said) + vary)
        extra = [*said, (b"access-control-expose-headers", EXPOSED), *vary] if said else vary

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await app(scope, receive, sending)

    return layer
