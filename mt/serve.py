"""`mt serve`: one model kept in memory behind a JSON API and a web page.

The API is LibreTranslate's where one exists, so that its clients (browser extensions, chat
bots, libretranslatepy) work unchanged: `POST /translate` with `q` (a text or a list),
`source`, `target`, `alternatives`, `format` ("text") and `api_key` (ignored), as JSON or a
form, answers `translatedText` and `alternatives`; ours add `scores` (best first, the
length-normalised log-probability; null for greedy search), `beam`, `model`, `step` and
`seconds`. LibreTranslate's too: `GET /languages`, `POST /detect` (the model's source language,
certain), `GET /frontend/settings`, `POST /translate_file` (a .txt file, one text a line; its
translation downloaded from `/download_file/...`) and `POST /suggest` (off: 403). Ours: `GET
/health` says whether the model is ready, `GET /info` what it is. Errors are `{"error": "..."}`
with their status: 400 bad input, 413 too long, 415 wrong content type, 503 loading or busy;
never a traceback.

Batching: every request's texts join one queue, and one decoder thread takes the oldest, then
whatever else arrives within `batch_wait_ms` (until `batch_texts` texts), and decodes them as
one batch (one per distinct beam and number of alternatives): under load, requests gather
while the previous batch decodes, so the decoder sees batches as `mt translate` does.

The model loads after the port is bound: until it is ready, /health and /translate answer
503. SIGINT or SIGTERM stops accepting connections, finishes the requests in flight (at most
`STOP_SECONDS`) and exits 0.

Starlette and uvicorn are an optional extra (pip install 'mt[serve]', with httptools and uvloop,
which uvicorn picks up: a fifth of the CPU time a request), imported only in the functions
that run a server: training never imports them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import queue
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from .errors import ConfigError, MtError

if TYPE_CHECKING:  # asyncio is imported where a server runs: `mt --help` stays quick
    import asyncio

    from .engine import Translator

PAGE = Path(__file__).with_name("serve.html")
MAX_BEAM = 16
STOP_SECONDS = 8  # grace for the requests in flight at SIGTERM: the process is gone within 10 s
DRAIN_BYTES = 32 << 20  # a body over the limit is read (and dropped) up to this, so that the
# client reads our 413 rather than a connection reset
LANGUAGE_NAMES = {"en": "English", "es": "Spanish"}
FIELDS = ("q", "source", "target", "format", "alternatives", "api_key", "beam")
JSON_TYPE, FORM_TYPE = "application/json", "application/x-www-form-urlencoded"
MULTIPART_TYPE = "multipart/form-data"
FILE_FORMATS = (".txt",)  # /translate_file: one text a line
KEPT_FILES = 64  # translated files kept in memory for /download_file, the newest
FRONTEND_TIMEOUT_MS = 500  # /frontend/settings: LibreTranslate's default


@dataclass
class Settings:
    """The server's limits and batching knobs (`mt serve --help` shows each)."""

    max_chars: int = 1000  # characters a text; longer: 413
    max_texts: int = 64  # texts a request; more: 413
    max_requests: int = 256  # requests waiting or decoding at once; more: 503
    batch_texts: int = 64  # texts a decoder batch gathers at most
    batch_wait_ms: float = 10.0  # how long a batch waits for more after its first request

    def __post_init__(self) -> None:
        for key, value in dataclasses.asdict(self).items():
            least = 0 if key == "batch_wait_ms" else 1  # no wait: each batch takes what is there
            if value < least:
                raise ConfigError(f"--{key.replace('_', '-')} {value}: must be at least {least}")

    @property
    def max_body(self) -> int:
        """Bytes a request body may take: max_texts texts of max_chars characters, each
        escaped as JSON at worst (6 bytes: \\uXXXX), and room for the other fields."""
        return self.max_texts * (self.max_chars * 6 + 8) + 4096


class BadRequest(Exception):
    """A request the server refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.status, self.retry = status, retry


@dataclass
class Job:
    """One request's texts on their way through the decoder."""

    texts: list[str]
    beam: int
    nbest: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class Service:
    """The model, opened in a thread of its own, and the decoder thread that batches jobs.

    `open_model()` returns the `engine.Translator` to serve (its decode section is the
    server's default)."""

    def __init__(self, open_model: Callable[[], Translator], settings: Settings):
        self.open_model, self.settings = open_model, settings
        self.translator: Translator | None = None
        self.info: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.on_failure: Callable[[], None] = lambda: None
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.pending = 0  # requests waiting or decoding, counted on the event loop
        self.batches = self.decoded = 0  # decoder batches so far, and their texts

    @property
    def ready(self) -> bool:
        return self.translator is not None

    def start(self) -> None:
        threading.Thread(target=self._load, name="mt-load", daemon=True).start()

    def stop(self) -> None:
        self.jobs.put(None)

    def _load(self) -> None:
        started = time.perf_counter()
        try:
            translator = self.open_model()
            translator.translate_nbest(["Hello."])  # warm up the first batch
        except BaseException as e:  # an MtError to report, or a bug: the server stops either way
            self.error = e
            log("the model could not be loaded; stopping")
            self.on_failure()
            return
        self.info = translator.info()
        threading.Thread(target=self._decode, name="mt-decode", daemon=True).start()
        self.translator = translator
        seconds = time.perf_counter() - started
        log(
            f"ready in {seconds:.1f} s: {self.info['model']} (step {self.info['step']}), "
            f"{self.info['engine']} on {self.info['device']}, beam {self.beam}"
        )

    @property
    def beam(self) -> int:
        """The beam of a request that does not say."""
        return self.translator.config.decode.beam

    def _decode(self) -> None:
        """Take the oldest job, gather more for up to batch_wait_ms, decode, answer; repeat."""
        wait, limit = self.settings.batch_wait_ms / 1000, self.settings.batch_texts
        while (first := self.jobs.get()) is not None:
            batch, size = [first], len(first.texts)
            deadline = time.monotonic() + wait
            while size < limit:
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:  # stopping: finish this batch first
                    self.jobs.put(None)
                    break
                batch.append(job)
                size += len(job.texts)
            groups: dict[tuple[int, int], list[Job]] = {}
            for job in batch:
                groups.setdefault((job.beam, job.nbest), []).append(job)
            for (beam, nbest), jobs in groups.items():
                self._run(jobs, beam, nbest)

    def _run(self, jobs: list[Job], beam: int, nbest: int) -> None:
        decode = dataclasses.replace(self.translator.config.decode, beam=beam, nbest=nbest)
        texts = [text for job in jobs for text in job.texts]
        self.batches, self.decoded = self.batches + 1, self.decoded + len(texts)
        try:
            found = self.translator.translate_nbest(texts, decode)
        except Exception as e:  # a bug: its requests get a 500, the others go on
            for job in jobs:
                job.loop.call_soon_threadsafe(_settle, job.future, None, e)
            return
        start = 0
        for job in jobs:
            result = found[start : start + len(job.texts)]
            start += len(job.texts)
            job.loop.call_soon_threadsafe(_settle, job.future, result, None)

    async def submit(self, texts: list[str], beam: int, nbest: int) -> list:
        """The n-best (text, score) pairs of each text, decoded in some batch (once ready)."""
        import asyncio

        if self.pending >= self.settings.max_requests:
            most = self.settings.max_requests
            raise BadRequest(
                503, f"busy: {self.pending} request(s) in flight (--max-requests {most})", True
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending += 1
        try:
            self.jobs.put(Job(texts, beam, nbest, loop, future))
            return await future
        finally:
            self.pending -= 1


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # its request was cancelled meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def parse_request(fields: dict[str, Any], form: bool, beam: int, source: str, target: str):
    """A /translate request's fields -> (texts, one text or a list, beam, alternatives, auto),
    or BadRequest naming the culprit. `beam` is the model's default; a form's values are
    strings, JSON's are typed. Limits are checked by `check_limits`."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise BadRequest(400, f"unknown field '{unknown[0]}' (known: {', '.join(FIELDS)})")
    if "q" not in fields:
        raise BadRequest(400, "q: missing (the text to translate, or a list of texts)")
    q = fields["q"]
    single = isinstance(q, str)
    texts = [q] if single else q
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest(400, f"q: expected a string or a list of strings, got {_kind(q)}")
    if not texts:
        raise BadRequest(400, "q: empty list")
    for i, text in enumerate(texts):
        if not text.strip():
            raise BadRequest(400, f"q{'' if single else f'[{i}]'}: empty text")
    check_languages(fields, source, target)
    if fields.get("format", "text") != "text":
        raise BadRequest(400, f"format: {fields['format']!r} is not served (only 'text')")
    alternatives = _integer(fields, "alternatives", 0, 0, MAX_BEAM - 1, form)
    beam = _integer(fields, "beam", max(beam, alternatives + 1), 1, MAX_BEAM, form)
    if alternatives >= beam:
        raise BadRequest(400, f"alternatives: {alternatives} needs a beam above it, got {beam}")
    return texts, single, beam, alternatives, fields.get("source") == "auto"


def check_languages(fields: dict[str, Any], source: str, target: str) -> None:
    """`source` (or auto) and `target`, where given, must be the model's."""
    for key, want in (("source", source), ("target", target)):
        value = fields.get(key, want)
        if value != want and not (key == "source" and value == "auto"):
            raise BadRequest(400, f"{key}: {value!r} is not served (this model: {source}→{target})")


def _integer(fields: dict[str, Any], key: str, default: int, low: int, high: int, form: bool):
    value = fields.get(key, default)
    if form and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(400, f"{key}: expected an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise BadRequest(400, f"{key}: {value} is out of range ({low} to {high})")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
    names |= {int: "a number", float: "a number", type(None): "null"}
    return names[type(value)]


def check_limits(texts: list[str], settings: Settings) -> None:
    if len(texts) > settings.max_texts:
        raise BadRequest(
            413, f"q: {len(texts)} texts, at most {settings.max_texts} a request (--max-texts)"
        )
    for i, text in enumerate(texts):
        check_length(text, settings, f"q[{i}]")


def check_length(text: str, settings: Settings, where: str) -> None:
    """413 for a text (`where` names it) longer than --max-chars."""
    if len(text) > settings.max_chars:
        most = settings.max_chars
        raise BadRequest(413, f"{where}: {len(text)} characters, at most {most} (--max-chars)")


async def read_body(request: Any, limit: int) -> bytes:
    """The request's body, or 413 past `limit` bytes (read on, and dropped, up to DRAIN_BYTES
    so that the client reads the 413 rather than a connection reset)."""
    body, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            if size > DRAIN_BYTES:
                break
            continue
        body.append(chunk)
    if size > limit:
        raise BadRequest(413, f"body of {size:,} bytes or more, at most {limit:,}")
    return b"".join(body)


def content_type(request: Any) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_fields(request: Any, settings: Settings) -> tuple[dict[str, Any], bool]:
    """The body of a /translate or /detect request as fields, and whether it was a form."""
    kind = content_type(request)
    if kind not in (JSON_TYPE, FORM_TYPE):
        raise BadRequest(415, f"Content-Type: expected {JSON_TYPE} or {FORM_TYPE}, got {kind!r}")
    try:
        text = (await read_body(request, settings.max_body)).decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"body is not UTF-8 (byte {e.start})") from None
    if kind == FORM_TYPE:
        try:
            pairs = parse_qs(text, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError as e:
            raise BadRequest(400, f"body is not UTF-8 (byte {e.start} of a value)") from None
        return {k: v[0] if len(v) == 1 else v for k, v in pairs.items()}, True
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(400, f"body is not valid JSON: {e}") from None
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON: nested too deeply") from None
    if not isinstance(fields, dict):
        raise BadRequest(400, f"body: expected a JSON object, got {_kind(fields)}")
    return fields, False


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
        request.scope["mt.texts"] = len(texts)
        found = await self.service.submit(texts, beam, alternatives + 1)
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


async def read_text_file(request: Any, settings: Settings, info: dict) -> tuple[str, list[str]]:
    """A /translate_file request's file (multipart/form-data: `file`, `source`, `target`,
    `api_key`): its safe name and its lines; a file that is not .txt UTF-8 text is refused."""
    if content_type(request) != MULTIPART_TYPE:
        raise BadRequest(415, f"Content-Type: expected {MULTIPART_TYPE}")
    body = await read_body(request, settings.max_body)
    fields = parse_multipart(request.headers["content-type"], body)
    unknown = sorted(set(fields) - {"file", "source", "target", "api_key"})
    if unknown:
        raise BadRequest(
            400, f"unknown field '{unknown[0]}' (known: file, source, target, api_key)"
        )
    if not fields.get("file", (None,))[0]:  # no file, or one without a name
        raise BadRequest(400, "Invalid request: missing file parameter")
    values = {key: value.decode("utf-8", "replace") for key, (_, value) in fields.items()}
    check_languages(values, info["source"], info["target"])
    filename, data = fields["file"]
    name = re.sub(r"[^\w.-]", "_", Path(filename).name).lstrip(".") or "file.txt"
    if Path(name).suffix.lower() not in FILE_FORMATS:
        raise BadRequest(
            400, f"{filename}: file format not supported (only {', '.join(FILE_FORMATS)})"
        )
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"{filename}: not UTF-8 text (byte {e.start})") from None
    for number, line in enumerate(lines, start=1):
        check_length(line, settings, f"{filename}: line {number}")
    return name, lines


def parse_multipart(kind: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """multipart/form-data fields: name -> (the file's name or None, the value's bytes)."""
    from email import message_from_bytes
    from email.policy import HTTP

    head = f"Content-Type: {kind}\r\n\r\n".encode("latin-1", "replace")
    message = message_from_bytes(head + body, policy=HTTP)
    if not message.is_multipart() or message.defects:
        raise BadRequest(400, "body is not valid multipart/form-data")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


def create_app(service: Service) -> Any:
    """The Starlette application of `service`, its access log included."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    api = Api(service)

    async def http_error(request: Any, e: HTTPException) -> Any:
        return error(e.status_code, e.detail)

    async def server_error(request: Any, e: Exception) -> Any:
        return error(500, "internal error (the server's log has the details)")

    @asynccontextmanager
    async def lifespan(app: Starlette):
        service.start()
        yield
        service.stop()

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
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    return access_log(app)


def access_log(app: Any) -> Any:
    """One stderr line a request: client, method, path, status, texts, milliseconds."""

    async def logged(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        started, status = time.perf_counter(), [0]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            host, port = scope.get("client") or ("-", 0)
            texts = f" {scope['mt.texts']} texts" if "mt.texts" in scope else ""
            ms = (time.perf_counter() - started) * 1000
            log(
                f'{host}:{port} "{scope["method"]} {scope["path"]}" {status[0] or "-"}'
                f"{texts} {ms:.0f} ms"
            )

    return logged


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} mt serve: {message}", file=sys.stderr, flush=True)


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


def server(app: Any) -> Any:
    """The uvicorn server of `app`: our access log instead of uvicorn's, its own warnings."""
    import uvicorn

    config = uvicorn.Config(
        app, log_config=None, access_log=False, timeout_graceful_shutdown=STOP_SECONDS
    )
    return uvicorn.Server(config)


def run(open_model: Callable[[], Translator], settings: Settings, host: str, port: int):
    """Serve until SIGINT or SIGTERM; the error of a model that failed to load is raised."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise MtError("starlette and uvicorn are not installed: pip install 'mt[serve]'") from None
    sock = listen(host, port)
    service = Service(open_model, settings)
    uv = server(create_app(service))
    service.on_failure = lambda: setattr(uv, "should_exit", True)
    stop = uv.handle_exit  # uvicorn's signal handler, which starts the graceful stop

    def stopping(sig: int, frame: Any) -> None:
        log(f"{signal.Signals(sig).name}: finishing {service.pending} requests, then stopping")
        stop(sig, frame)

    uv.handle_exit = stopping
    log(f"loading the model; listening on http://{host}:{sock.getsockname()[1]}/")
    # uvicorn raises the signal it stopped on again once it has stopped; ignoring that second
    # one lets a server stopped as asked exit 0
    previous = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        uv.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if service.error is not None:
        raise service.error
    log("stopped")
