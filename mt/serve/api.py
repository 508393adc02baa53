"""The HTTP routes: LibreTranslate's API where it has one, so that its clients (browser
extensions, chat bots, libretranslatepy) work unchanged, and ours.

`POST /translate` with `q` (a text or a list: each cut into sentences and joined again with
its spacing and line breaks, mt.text), `source`, `target`, `alternatives`, `format` ("text",
or "html": the text translated, the markup kept, mt.formats) and `api_key` (ignored), as JSON
or a form, answers `translatedText` and `alternatives`; ours add `scores` (best first, the
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
413 too long, 415 wrong content type, 503 loading or busy; never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..data.language import CONFIDENT, identifier
from ..errors import MtError
from ..formats import FILE_FORMATS, Document, translate_documents
from .batcher import BadRequest, Service
from .requests import (
    DETECT_FIELDS,
    check_limits,
    parse_glossary,
    parse_prefixes,
    parse_request,
    parse_texts,
    read_body,
    read_fields,
    read_file,
    read_markups,
)

PAGE = Path(__file__).with_name("page.html")
LANGUAGE_NAMES = {"en": "English", "es": "Spanish"}
KEPT_FILES = 64  # translated files kept in memory for /download_file, the newest
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


def error(status: int, message: str, retry: bool = False) -> Any:
    """`{"error": message}` with its status (and Retry-After where trying again may work)."""
    return _json({"error": message}, status, {"Retry-After": "1"} if retry else None)


def endpoint(handler: Callable) -> Callable:
    """A handler whose BadRequest is its error answer."""

    async def handle(api: Api, request: Any) -> Any:
        from starlette.requests import ClientDisconnect

        try:
            return await handler(api, request)
        except BadRequest as e:
            return error(e.status, str(e), e.retry)
        except ClientDisconnect:
            return error(400, "the client disconnected")

    return handle


class Api:
    """The HTTP endpoints of a Service, each a Starlette handler: LibreTranslate's where it
    has one (/translate, /languages, /detect, /frontend/settings, /translate_file, /suggest),
    so that its clients work unchanged, and ours (/, /health, /info)."""

    def __init__(self, service: Service) -> None:
        self.service, self.settings = service, service.settings
        self.page = PAGE.read_text(encoding="utf-8")
        self.files: dict[str, bytes] = {}  # translated files by download name, oldest first

    def _info(self) -> dict[str, Any]:
        """What the model is, or 503 while it loads (or after it failed to)."""
        if not self.service.ready:
            why = "the model failed to load" if self.service.error else "the model is loading"
            raise BadRequest(503, why, True)
        return self.service.info

    async def index(self, request: Any) -> Any:
        from starlette.responses import HTMLResponse

        return HTMLResponse(self.page)

    @endpoint
    async def health(self, request: Any) -> Any:
        self._info()
        service = self.service
        counts = {"pending": service.pending, "batches": service.batches, "texts": service.decoded}
        return _json({"status": "ready", **counts})

    @endpoint
    async def info(self, request: Any) -> Any:
        limits = dataclasses.asdict(self.settings) | {"max_body": self.settings.max_body}
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
        prefixes: list[str] | None = None,
        terms: list[list[str]] | None = None,
    ) -> list:
        """Each text's n-best, its sentences decoded in the batcher and put back in its layout
        (mt.text), a request's worth of sentences at a time: the /translate requests that
        come meanwhile are decoded between them. Texts given `prefixes` or `terms` (which are
        a whole text's) are translated whole."""
        from ..text import Layouts

        steered = prefixes is not None or terms is not None
        layouts, most, found = Layouts(texts, not steered), self.settings.max_texts, []
        if steered:
            found = await self.service.submit(layouts.sentences, beam, nbest, prefixes, terms)
            return layouts.joined(found)
        for start in range(0, len(layouts.sentences), most):
            found += await self.service.submit(layouts.sentences[start : start + most], beam, nbest)
        return layouts.joined(found)

    @endpoint
    async def translate(self, request: Any) -> Any:
        started = time.perf_counter()
        fields, form = await read_fields(request, self.settings)
        info = self._info()
        texts, single, beam, alternatives, auto = parse_request(
            fields, form, self.service.beam, info["source"], info["target"]
        )
        request.scope["mt.texts"] = len(texts)
        if fields.get("format") == "html":  # its text's language is not identified
            taken = None
            documents = await read_markups(texts, single, self.settings)
            written = await self._translate_documents(documents, beam)
            found = [[(data.decode("utf-8"), math.nan)] for data in written]  # no score
        else:
            check_limits(texts, self.settings)
            prefixes, terms = parse_prefixes(fields, len(texts)), parse_glossary(fields, texts)
            taken = [taken_as(c, info) for c in await self._identify(texts, info)] if auto else None
            # a text already in the target language is returned as it is, unscored
            found = [[(text, math.nan)] for text in texts]
            todo = [
                i for i in range(len(texts)) if not taken or taken[i]["language"] != info["target"]
            ]
            if todo:
                steer = [None if x is None else [x[i] for i in todo] for x in (prefixes, terms)]
                wanted = [texts[i] for i in todo]
                decoded = await self._translate_texts(wanted, beam, alternatives + 1, *steer)
                for i, hyps in zip(todo, decoded):
                    found[i] = hyps
        seconds = time.perf_counter() - started
        return _json(answer(found, single, taken, info, beam, seconds))

    @endpoint
    async def detect(self, request: Any) -> Any:
        """Each text's language: LibreTranslate's list of candidates, best first (the model's
        two languages, confidences 0 to 100), a list of them per text for a list."""
        fields, _ = await read_fields(request, self.settings)
        texts, single = parse_texts(fields, DETECT_FIELDS)
        check_limits(texts, self.settings)
        found = await self._identify(texts, self._info())
        return _json(found[0] if single else found)

    async def _identify(self, texts: list[str], info: dict) -> list[list[dict[str, Any]]]:
        """Each text's candidate languages, best first, identified in a thread (the first
        call loads the identifier's model) sentence by sentence (mt.data.language): a text
        of two languages gets the one most of its characters are in. A tie (nothing to go
        by: a name, a number) goes to the source language."""
        from starlette.concurrency import run_in_threadpool

        def rank() -> list[list[dict[str, Any]]]:
            ident = identifier((info["source"], info["target"]))
            return [
                [{"language": code, "confidence": round(100 * c, 2)} for code, c in ident.rank(t)]
                for t in texts
            ]

        try:
            return await run_in_threadpool(rank)
        except MtError as e:  # py3langid missing, or a language it does not know
            raise BadRequest(501, f"language identification: {e}") from None

    @endpoint
    async def frontend_settings(self, request: Any) -> Any:
        info = self._info()
        src, tgt = language(info["source"], []), language(info["target"], [])
        return _json(
            {
                "charLimit": self.settings.max_chars,
                "frontendTimeout": FRONTEND_TIMEOUT_MS,
                "apiKeys": False,
                "keyRequired": False,
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
        from starlette.concurrency import run_in_threadpool

        requests = [text for doc in documents for text in doc.requests()]
        found = [hyps[0][0] for hyps in await self._translate_texts(requests, beam, 1)]
        # written in a worker thread, as they were read (requests.read_file)
        return await run_in_threadpool(translate_documents, documents, lambda texts: found)

    @endpoint
    async def translate_file(self, request: Any) -> Any:
        """A file (FILE_FORMATS) translated with its layout kept; its translation is kept in
        memory (the newest KEPT_FILES) for /download_file."""
        name, document = await read_file(request, self.settings, self._info())
        request.scope["mt.texts"] = len(document.units)
        (data,) = await self._translate_documents([document], self.service.beam)
        stored = f"{uuid.uuid4()}.{name}"
        self.files[stored] = data
        while len(self.files) > KEPT_FILES:
            del self.files[next(iter(self.files))]
        url = request.url_for("download_file", filename=stored)
        return _json({"translatedFileUrl": str(url)})

    @endpoint
    async def download_file(self, request: Any) -> Any:
        from starlette.responses import Response

        stored = request.path_params["filename"]
        if stored not in self.files:
            raise BadRequest(404, f"{stored}: no such file (or no longer kept)")
        name = stored.partition(".")[2]
        disposition = f"attachment; filename*=UTF-8''{quote(name)}"
        headers = {"Content-Disposition": disposition}
        media = MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")
        return Response(self.files[stored], media_type=media, headers=headers)


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
