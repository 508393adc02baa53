"""What the HTTP routes answer: LibreTranslate's answer to /translate, `{"error": ...}` with
its status, a handler's refusals turned into those, a request cancelled when its client
leaves, the page's Content-Security-Policy, a language as /languages lists it, and what a
client wrote made safe for the log."""

from __future__ import annotations

import hashlib
import math
import re
from base64 import b64encode
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .batcher import BadRequest

if TYPE_CHECKING:
    from ..text import Translations

LANGUAGE_NAMES = {"en": "English", "es": "Spanish"}


def _score(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def answer(
    found: Translations, single: bool, taken: list | None, info: dict, beam: int, seconds: float
) -> dict:
    """LibreTranslate's answer (translatedText, alternatives, and detectedLanguage: the
    language each text was taken to be in, given source auto) and ours."""
    short, placed, found = found.short, found.placed, found.nbest
    best = [hyps[0][0] for hyps in found]
    alternatives = [[text for text, _ in hyps[1:]] for hyps in found]
    scores = [[_score(s) for _, s in hyps] for hyps in found]
    out: dict[str, Any] = {
        "translatedText": best[0] if single else best,
        "alternatives": alternatives[0] if single else alternatives,
    }
    if taken is not None:
        out["detectedLanguage"] = taken[0] if single else taken
    out.update(
        scores=scores[0] if single else scores,
        short=short[0] if single else short,
        placed=placed[0] if single else placed,
        beam=beam,
        model=info["model"],
        step=info["step"],
        seconds=round(seconds, 4),
    )
    return out


def json_answer(content: Any, status: int = 200, headers: dict | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(content, status, headers=headers)


def error(status: int, message: str, retry: int = 0) -> Any:
    """`{"error": message}` with its status (and Retry-After, in seconds, where trying again
    may work). After a body too slow or too large, whose rest may be on its way, the
    connection is closed."""
    headers = {"Retry-After": str(retry)} if retry else {}
    if status in (408, 413):
        headers["Connection"] = "close"
    return json_answer({"error": message}, status, headers)


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def endpoint(handler: Callable) -> Callable:
    """A handler whose BadRequest is its error answer (one past a limit counted by the
    metrics)."""

    async def handle(api: Any, request: Any) -> Any:
        from starlette.requests import ClientDisconnect

        try:
            return await handler(api, request)
        except BadRequest as e:
            if e.limit and api.metrics is not None:
                api.metrics.refused(e.limit)
            return error(e.status, str(e), e.retry)
        except (ClientDisconnect, ClientGone):  # nobody reads it: the access log's status
            return error(499, "the client disconnected")

    return handle


async def unless_gone(request: Any, work: Awaitable) -> Any:
    """The result of `work`, which is cancelled (its texts leave the decoder's queue) if the
    client disconnects first: ClientGone then. The request's body must have been read."""
    import asyncio

    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled (the server stopping)
        watch.cancel()
        left = not task.done()
        task.cancel()  # no-op once it is done
    if left:
        raise ClientGone
    return task.result()


def page_policy(page: str) -> str:
    """The page's Content-Security-Policy: its own inline script and style (by hash), its own
    API, no framing."""

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.S)
        return " ".join(
            f"'sha256-{b64encode(hashlib.sha256(x.encode()).digest()).decode()}'" for x in found
        )

    return (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def printable(text: str) -> str:
    """`text` with every control or non-printing character escaped (\\n, \\x1b ...): what a
    client wrote cannot forge log lines or drive a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def language(code: str, targets: list[str]) -> dict[str, Any]:
    """A language as LibreTranslate's /languages lists it."""
    return {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": targets}
