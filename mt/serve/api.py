"""The HTTP routes: LibreTranslate's API where it has one, so that its clients (browser
extensions, chat bots, libretranslatepy) work unchanged, and ours.

`POST /translate` with `q` (a text or a list), `source`, `target`, `alternatives`, `format`
("text") and `api_key` (ignored), as JSON or a form, answers `translatedText` and
`alternatives`; ours add `scores` (best first, the length-normalised log-probability; null for
greedy search), `beam`, `model`, `step` and `seconds`. LibreTranslate's too: `GET /languages`,
`POST /detect` (the model's source language, certain), `GET /frontend/settings`, `POST
/translate_file` (a .txt file, one text a line; its translation downloaded from
`/download_file/...`) and `POST /suggest` (off: 403). Ours: `GET /` the web page, `GET
/health` says whether the model is ready, `GET /info` what it is. Errors are `{"error": "..."}`
with their status: 400 bad input, 413 too long, 415 wrong content type, 503 loading or busy;
never a traceback.
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

from .batcher import BadRequest, Service
from .requests import (
    FILE_FORMATS,
    check_limits,
    parse_glossary,
    parse_prefixes,
    parse_request,
    read_body,
    read_fields,
    read_text_file,
)

PAGE = Path(__file__).with_name("page.html")
LANGUAGE_NAMES = {"en": "English", "es": "Spanish"}
KEPT_FILES = 64  # translated files kept in memory for /download_file, the newest
FRONTEND_TIMEOUT_MS = 500  # /frontend/settings: LibreTranslate's default


def _score(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def answer(found: list, single: bool, auto: bool, info: dict, beam: int, seconds: float) -> dict:
    """LibreTranslate's answer (translatedText, alternatives, detectedLanguage) and ours."""
    best = [hyps[0][0] for hyps in found]
    alternatives = [[text for text, _ in hyps[1:]] for hyps in found]
    scores = [[_score(s) for _, s in hyps] for hyps in found]
    out: dict[str, Any] = {
        "translatedText": best[0] if single else best,
        "alternatives": alternatives[0] if single else alternatives,
    }
    if auto:  # one source language: what LibreTranslate says when it is sure
        detected = {"language": info["source"], "confidence": 100}
        out["detectedLanguage"] = detected if single else [detected] * len(found)
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

    @endpoint
    async def translate(self, request: Any) -> Any:
        started = time.perf_counter()
        fields, form = await read_fields(request, self.settings)
        info = self._info()
        texts, single, beam, alternatives, auto = parse_request(
            fields, form, self.service.beam, info["source"], info["target"]
        )
        check_limits(texts, self.settings)
        prefixes, terms = parse_prefixes(fields, len(texts)), parse_glossary(fields, texts)
        request.scope["mt.texts"] = len(texts)
        found = await self.service.submit(texts, beam, alternatives + 1, prefixes, terms)
        seconds = time.perf_counter() - started
        return _json(answer(found, single, auto, info, beam, seconds))

    @endpoint
    async def detect(self, request: Any) -> Any:
        """The model's source language, certain: LibreTranslate's list of candidates (one), a
        list of them per text for a list."""
        fields, _ = await read_fields(request, self.settings)
        q = fields.get("q")
        if not q or not isinstance(q, (str, list)):
            raise BadRequest(400, "Invalid request: missing q parameter")
        found = [{"confidence": 100.0, "language": self._info()["source"]}]
        return _json(found if isinstance(q, str) else [found] * len(q))

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

    @endpoint
    async def translate_file(self, request: Any) -> Any:
        """A .txt file translated line by line (blank lines kept); its translation is kept
        in memory (the newest KEPT_FILES) for /download_file."""
        name, lines = await read_text_file(request, self.settings, self._info())
        request.scope["mt.texts"] = len(lines)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        texts, most, found = [lines[i] for i in todo], self.settings.max_texts, []
        for start in range(0, len(texts), most):  # a request's worth at a time: the
            # /translate requests that come meanwhile are decoded between them
            found += await self.service.submit(texts[start : start + most], self.service.beam, 1)
        for i, hyps in zip(todo, found):
            lines[i] = hyps[0][0]
        stored = f"{uuid.uuid4()}.{name}"
        self.files[stored] = "".join(line + "\n" for line in lines).encode("utf-8")
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
        return Response(self.files[stored], media_type="text/plain; charset=utf-8", headers=headers)


def language(code: str, targets: list[str]) -> dict[str, Any]:
    """A language as LibreTranslate's /languages lists it."""
    return {"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": targets}
