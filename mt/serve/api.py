"""The HTTP routes: LibreTranslate's API where it has one, so that its clients (browser
extensions, chat bots, libretranslatepy) work unchanged, and ours.

`POST /translate` with `q` (a text or a list: each cut into sentences and joined again with
its spacing and line breaks, mt.text), `source`, `target`, `alternatives`, `format` ("text",
or "html": the text translated, the markup kept, mt.formats) and `api_key` (mt.serve.access),
as JSON or a form, answers `translatedText` and `alternatives`; ours add `scores` (best first, the
length-normalised log-probability; null for greedy search and html), `beam`, `model`, `step`
and `seconds`. With `source: auto` each text's language is identified (mt.data.language) and
`detectedLanguage` says what the text was taken to be: a text identified as the model's
target language with 80% confidence or more is returned as it is (its score null, no
alternatives), any other is translated as the source. LibreTranslate's too: `GET
/languages`, `POST /detect` (each text's language, one of the model's two, with a confidence
of 0 to 100), `GET /frontend/settings`, `POST /translate_file` (.txt, .html, .docx, .odt or
.srt, the layout kept; its translation downloaded from `/download_file/...`) and `POST
/suggest` (off: 403). Ours: `GET /` the web page, `GET /health` says whether the model is
ready, `GET /info` what it is. Errors are `{"error": "..."}` with their status: 400 bad input,
403 no valid API key, 408 a body too slow to arrive, 413 too long, 415 wrong content type, 429
past a client's limit and 503 loading or busy (both with Retry-After); never a traceback.

Every request's work runs off the event loop: the body is read there, everything else that
takes CPU (parsing, sentence splitting, documents) in the workers (Service.work), decoding in
the decoder thread; /health answers meanwhile. A request whose client disconnects is
cancelled where it is, its texts dropped from the decoder's queue.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import time
from base64 import b64encode
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..data.language import CONFIDENT, identifier
from ..errors import MtError
from ..formats import FILE_FORMATS, Document, translate_documents
from ..text import Layouts
from .access import Access
from .batcher import BadRequest, Service
from .downloads import Downloads
from .requests import (
    DETECT_FIELDS,
    FILE_FIELDS,
    check_languages,
    check_limits,
    parse_fields,
    parse_glossary,
    parse_multipart,
    parse_prefixes,
    parse_request,
    parse_texts,
    read_body,
    read_document_file,
    read_form,
    read_markups,
)

PAGE = Path(__file__).with_name("page.html")
LANGUAGE_NAMES = {"en": "English", "es": "Spanish"}
INLINE_BYTES = 4096  # a body this small is parsed where it is read: a worker's hop costs more
FRONTEND_TIMEOUT_MS = 500  # /frontend/settings: LibreTranslate's default
MEDIA_TYPES = {  # /download_file's, by suffix
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".srt": "application/x-subrip; charset=utf-8",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".odt": "application/vnd.oasis.opendocument.text",
}


def _score(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def answer(
    found: list, single: bool, taken: list | None, info: dict, beam: int, seconds: float
) -> dict:
    """LibreTranslate's answer (translatedText, alternatives, and detectedLanguage: the
    language each text was `taken_as`, given source auto) and ours."""
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
        beam=beam,
        model=info["model"],
        step=info["step"],
        seconds=round(seconds, 4),
    )
    return out


def _json(content: Any, status: int = 200, headers: dict | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(content, status, headers=headers)


def error(status: int, message: str, retry: int = 0) -> Any:
    """`{"error": message}` with its status (and Retry-After, in seconds, where trying again
    may work). After a body too slow or too large, whose rest may be on its way, the
    connection is closed."""
    headers = {"Retry-After": str(retry)} if retry else {}
    if status in (408, 413):
        headers["Connection"] = "close"
    return _json({"error": message}, status, headers)


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def endpoint(handler: Callable) -> Callable:
    """A handler whose BadRequest is its error answer."""

    async def handle(api: Api, request: Any) -> Any:
        from starlette.requests import ClientDisconnect

        try:
            return await handler(api, request)
        except BadRequest as e:
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


class Api:
    """The HTTP endpoints of a Service, each a Starlette handler: LibreTranslate's where it
    has one (/translate, /languages, /detect, /frontend/settings, /translate_file, /suggest),
    so that its clients work unchanged, and ours (/, /health, /info). `public_url`: where
    clients reach the server, for download links; None: links relative to the server."""

    def __init__(self, service: Service, access: Access, public_url: str | None = None) -> None:
        self.service, self.settings, self.access = service, service.settings, access
        self.public_url = public_url.rstrip("/") if public_url else ""
        self.page = PAGE.read_text(encoding="utf-8")
        self.page_policy = page_policy(self.page)
        minutes = self.settings.kept_minutes
        self.downloads = Downloads(self.settings.kept_mb << 20, minutes * 60)

    def _info(self) -> dict[str, Any]:
        """What the model is, or 503 while it loads (or after it failed to)."""
        if not self.service.ready:
            why = "the model failed to load" if self.service.error else "the model is loading"
            raise BadRequest(503, why, 1)
        return self.service.info

    def _work(self, body: bytes) -> Callable:
        """How to run a request's parsing and sentence splitting: in a worker, or where it
        is for a body of at most INLINE_BYTES (well under a millisecond of work)."""
        if len(body) > INLINE_BYTES:
            return self.service.work

        async def inline(function: Callable, *args: Any) -> Any:
            return function(*args)

        return inline

    def _client(self, request: Any, fields: dict[str, Any]) -> tuple[str, Any]:
        """Who the request counts against and its allowance (mt.serve.access): 403 without a
        valid API key where keys are required."""
        address = request.client.host if request.client else "-"
        return self.access.client(fields.get("api_key"), address)

    def _charge(self, client: tuple[str, Any], chars: int) -> None:
        """A request of `chars` characters counted against its client's limits (413, 429)."""
        if self.settings.char_limit and chars > self.settings.char_limit:
            most = self.settings.char_limit
            raise BadRequest(
                413, f"q: {chars:,} characters, at most {most:,} a request (--char-limit)"
            )
        self.access.charge(*client, chars)

    async def index(self, request: Any) -> Any:
        from starlette.responses import HTMLResponse

        return HTMLResponse(self.page, headers={"Content-Security-Policy": self.page_policy})

    @endpoint
    async def health(self, request: Any) -> Any:
        self._info()
        service = self.service
        counts = {"pending": service.pending, "batches": service.batches, "texts": service.decoded}
        return _json({"status": "ready", **counts})

    @endpoint
    async def info(self, request: Any) -> Any:
        limits = dataclasses.asdict(self.settings) | {"max_body": self.settings.max_body}
        limits["api_keys"] = self.access.key_required
        return _json(self._info() | {"beam": self.service.beam, "serve": limits})

    @endpoint
    async def languages(self, request: Any) -> Any:
        info = self._info()
        src, tgt = info["source"], info["target"]
        return _json([language(src, [tgt]), language(tgt, [])])

    async def _translate_texts(
        self,
        texts: list[str],
        beam: int,
        nbest: int,
        work: Callable,
        prefixes: list[str] | None = None,
        terms: list[list[str]] | None = None,
    ) -> list:
        """Each text's n-best, its sentences decoded in the batcher and put back in its layout
        (mt.text), a request's worth of sentences at a time: the /translate requests that
        come meanwhile are decoded between them. Texts given `prefixes` or `terms` (which are
        a whole text's) are translated whole."""
        steered = prefixes is not None or terms is not None
        layouts = await work(Layouts, texts, not steered)
        most, found = self.settings.max_texts, []
        if steered:
            found = await self.service.submit(layouts.sentences, beam, nbest, prefixes, terms)
        else:
            for start in range(0, len(layouts.sentences), most):
                sentences = layouts.sentences[start : start + most]
                found += await self.service.submit(sentences, beam, nbest)
        return await work(layouts.joined, found)

    @endpoint
    async def translate(self, request: Any) -> Any:
        started, info = time.perf_counter(), self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings)
            work = self._translate(request, kind, body, info)
            found, single, taken, beam = await unless_gone(request, work)
        seconds = time.perf_counter() - started
        return _json(answer(found, single, taken, info, beam, seconds))

    async def _translate(self, request: Any, kind: str, body: bytes, info: dict) -> tuple:
        work = self._work(body)
        fields, form = await work(parse_fields, kind, body)
        client = self._client(request, fields)
        texts, single, beam, alternatives, auto = await work(
            parse_request, fields, form, self.service.beam, info["source"], info["target"]
        )
        request.scope["mt.texts"] = len(texts)
        if fields.get("format") == "html":  # its text's language is not identified
            documents = await work(read_markups, texts, single, self.settings)
            self._charge(client, sum(len(" ".join(d.units)) for d in documents))
            written = await self._translate_documents(documents, beam)
            found = [[(data.decode("utf-8"), math.nan)] for data in written]  # no score
            return found, single, None, beam
        check_limits(texts, self.settings)
        self._charge(client, sum(map(len, texts)))
        prefixes = parse_prefixes(fields, len(texts))
        terms = await work(parse_glossary, fields, texts)
        taken = [taken_as(c, info) for c in await self._identify(texts, info)] if auto else None
        # a text already in the target language is returned as it is, unscored
        found = [[(text, math.nan)] for text in texts]
        todo = [i for i in range(len(texts)) if not taken or taken[i]["language"] != info["target"]]
        if todo:
            steer = [None if x is None else [x[i] for i in todo] for x in (prefixes, terms)]
            wanted = [texts[i] for i in todo]
            decoded = await self._translate_texts(wanted, beam, alternatives + 1, work, *steer)
            for i, hyps in zip(todo, decoded):
                found[i] = hyps
        return found, single, taken, beam

    @endpoint
    async def detect(self, request: Any) -> Any:
        """Each text's language: LibreTranslate's list of candidates, best first (the model's
        two languages, confidences 0 to 100), a list of them per text for a list."""
        info = self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings)
            work = self._work(body)
            fields, _ = await work(parse_fields, kind, body)
            client = self._client(request, fields)
            texts, single = parse_texts(fields, DETECT_FIELDS)
            check_limits(texts, self.settings)
            self._charge(client, sum(map(len, texts)))
            found = await unless_gone(request, self._identify(texts, info))
        return _json(found[0] if single else found)

    async def _identify(self, texts: list[str], info: dict) -> list[list[dict[str, Any]]]:
        """Each text's candidate languages, best first, identified by a worker (the first
        call loads the identifier's model) sentence by sentence (mt.data.language): a text
        of two languages gets the one most of its characters are in. A tie (nothing to go
        by: a name, a number) goes to the source language."""

        def rank() -> list[list[dict[str, Any]]]:
            ident = identifier((info["source"], info["target"]))
            return [
                [{"language": code, "confidence": round(100 * c, 2)} for code, c in ident.rank(t)]
                for t in texts
            ]

        try:
            return await self.service.work(rank)
        except MtError as e:  # py3langid missing, or a language it does not know
            raise BadRequest(501, f"language identification: {e}") from None

    @endpoint
    async def frontend_settings(self, request: Any) -> Any:
        info = self._info()
        src, tgt = language(info["source"], []), language(info["target"], [])
        keys = self.access.key_required
        return _json(
            {
                "charLimit": self.settings.max_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": keys,
                "keyRequired": keys,
                "suggestions": False,
                "filesTranslation": True,
                "supportedFilesFormat": list(FILE_FORMATS),
                "language": {
                    "source": {"code": src["code"], "name": src["name"]},
                    "target": {"code": tgt["code"], "name": tgt["name"]},
                },
            }
        )

    @endpoint
    async def suggest(self, request: Any) -> Any:
        await read_body(request, self.settings.max_body)
        raise BadRequest(403, "Suggestions are disabled on this server.")

    async def _translate_documents(self, documents: list[Document], beam: int) -> list[bytes]:
        """Each document translated, all their texts decoded together."""
        requests = await self.service.work(lambda: [t for d in documents for t in d.requests()])
        found = [
            hyps[0][0] for hyps in await self._translate_texts(requests, beam, 1, self.service.work)
        ]
        return await self.service.work(translate_documents, documents, lambda texts: found)

    @endpoint
    async def translate_file(self, request: Any) -> Any:
        """A file (FILE_FORMATS) translated with its layout kept; its translation is kept in
        memory (mt.serve.downloads) for /download_file."""
        info = self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings, multipart=True)
            return await unless_gone(request, self._translate_file(request, kind, body, info))

    async def _translate_file(self, request: Any, kind: str, body: bytes, info: dict) -> Any:
        work = self.service.work
        fields = await work(parse_multipart, request.headers["content-type"], body)
        unknown = sorted(set(fields) - set(FILE_FIELDS))
        if unknown:
            raise BadRequest(400, f"unknown field '{unknown[0]}' (known: {', '.join(FILE_FIELDS)})")
        values = {key: value.decode("utf-8", "replace") for key, (_, value) in fields.items()}
        client = self._client(request, values)  # a document is read for a valid key only
        check_languages(values, info["source"], info["target"])
        name, document = await work(read_document_file, fields, self.settings)
        request.scope["mt.texts"] = len(document.units)
        self._charge(client, sum(len(unit) for unit in document.units))
        (data,) = await self._translate_documents([document], self.service.beam)
        stored = self.downloads.add(name, data)
        url = f"{self.public_url}/download_file/{quote(stored)}"
        return _json({"translatedFileUrl": url})

    @endpoint
    async def download_file(self, request: Any) -> Any:
        from starlette.responses import Response

        stored = request.path_params["filename"]
        data = self.downloads.get(stored)
        if data is None:
            raise BadRequest(404, f"{stored}: no such file (or no longer kept)")
        name = stored.partition(".")[2]
        disposition = f"attachment; filename*=UTF-8''{quote(name)}"
        headers = {"Content-Disposition": disposition}
        media = MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")
        return Response(data, media_type=media, headers=headers)


def taken_as(candidates: list[dict[str, Any]], info: dict) -> dict[str, Any]:
    """The language a text sent with source auto is taken to be in, of its `candidates` (best
    first): the model's target language (the text is returned as it is) when identified as it
    with CONFIDENT confidence or more; else the source language, whose confidence may be low."""
    best = candidates[0]
    if best["language"] == info["target"] and best["confidence"] >= 100 * CONFIDENT:
        return best
    return next(c for c in candidates if c["language"] == info["source"])


def language(code: str, targets: list[str]) -> dict[str, Any]:
    """A language as LibreTranslate's /languages lists it."""
    return {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": targets}
