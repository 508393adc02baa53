"""The HTTP routes: LibreTranslate's API where it has one, so that its clients (browser
extensions, chat bots, libretranslatepy) work unchanged, and ours; one model or several (a
pair of languages each: en→es and es→en), a request routed by its `source` and `target`.

`POST /translate` with `q` (a text or a list: each cut into sentences and joined again with
its spacing and line breaks, mt.text), `source` and `target` (by default the first model's
pair; a source alone, its own target), `alternatives`, `format` ("text", or "html": the text
translated, the markup kept, mt.formats) and `api_key` (mt.serve.access), as JSON or a form,
answers `translatedText` and `alternatives`; ours add `scores` (best first, the length-
normalised log-probability; null for greedy search and html), `short` (whether a text came out
much shorter than its source predicts even after the coverage guard translated it again in
smaller pieces, mt.decoding.coverage: text may be lost; false for html), `placed` (how many
of a text's numbers, URLs, addresses and placeholders the model did not carry over exactly and
that were put back where their neighbours are, mt.decoding.placeholders), `beam`, `model`,
`step` and `seconds` (of the model that translated the first text). With `source: auto` each
text's language is identified among the models' (mt.data.language) and it goes to the model
from that language (to `target`, if given); `detectedLanguage` says what the text was taken to
be. A text no model takes, identified with 80% confidence or more (one already in the target
language), is returned as it is (its score null, no alternatives); any other goes to the
likeliest language a model translates. A pair no model serves is a 400 naming those served.
A field a route does not know is ignored, as LibreTranslate ignores those it does not use (its
page sends `secret`): said once in the log, and listed in the answer's `ignored` where the
answer is an object (/translate, /translate_file). A form may be urlencoded or multipart (as
LibreTranslate's page sends it). LibreTranslate's too: `GET /languages` (each language with
its targets), `POST /detect` (each text's language among the models', with a confidence of 0
to 100), `GET /frontend/settings`, `POST /translate_file` (.txt, .html, .docx, .odt, .pptx,
.odp, .epub or .srt, the layout kept; its translation downloaded from `/download_file/...`),
`POST /suggest` (off: 403) and `GET /spec` (mt.serve.spec). Ours: `GET /` the web page,
`GET /health` says whether the models are ready, `GET /info` what they are (and `GET
/metrics`: mt.serve.metrics). Errors are `{"error": "..."}` with their status: 400 bad input,
403 no valid API key, 408 a body too slow to arrive, 413 too long, 415 wrong content type, 429
past a client's limit and 503 loading or busy (both with Retry-After); never a traceback.

Every request's work runs off the event loop: the body is read there, everything else that
takes CPU (parsing, sentence splitting, documents) in the workers (Service.work), decoding in
each model's decoder thread; /health answers meanwhile. A request whose client disconnects is
cancelled where it is, its texts dropped from the decoder's queue.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..data.language import CONFIDENT, identifier
from ..errors import MtError
from ..formats import FILE_FORMATS, Document, translate_documents
from ..text import Layouts, Translations
from .access import Access
from .batcher import BadRequest, Model, Service, log
from .deployment import Deployment
from .metrics import Metrics
from .requests import (
    DETECT_FIELDS,
    FIELDS,
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
    unknown_fields,
)
from .responses import (
    answer,
    endpoint,
    json_answer,
    language,
    page_policy,
    printable,
    unless_gone,
)
from .shared import store

PAGE = Path(__file__).with_name("page.html")
AUTO_CHARS = 4000  # of a document's text, to tell its language from
INLINE_BYTES = 4096  # a body this small is parsed where it is read: a worker's hop costs more
FRONTEND_TIMEOUT_MS = 500  # /frontend/settings: LibreTranslate's default
UNKNOWN_SAID = 64  # names of unknown fields said in the log, once each, at most
MEDIA_TYPES = {  # /download_file's, by suffix
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".srt": "application/x-subrip; charset=utf-8",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".epub": "application/epub+zip",
}


class Api:
    """The HTTP endpoints of a Service, each a Starlette handler: LibreTranslate's where it
    has one (/translate, /languages, /detect, /frontend/settings, /translate_file, /suggest),
    so that its clients work unchanged, and ours (/, /health, /info). `deployment`: where
    clients reach the server (its public URL and prefix, for download links) and what its
    replicas share (the store of the limits' buckets and of the downloads)."""

    def __init__(self, service: Service, access: Access, deployment: Deployment) -> None:
        self.service, self.settings, self.access = service, service.settings, access
        self.links = deployment.public_url + deployment.url_prefix  # before /download_file
        self.page = PAGE.read_text(encoding="utf-8")
        self.page_policy = page_policy(self.page)
        kept = (self.settings.kept_mb << 20, self.settings.kept_minutes * 60)
        self.store = access.store = store(deployment.shared_storage, *kept)
        self.metrics: Metrics | None = None  # set by create_app once the routes are made
        self.said: set[str] = set()  # the unknown fields said in the log

    def _info(self) -> dict[str, Any]:
        """What the first model is, or 503 while the models load (or after one failed to)."""
        if not self.service.ready:
            why = "the model failed to load" if self.service.error else "the model is loading"
            raise BadRequest(503, why, 1)
        return self.service.first.info

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

    async def _charge(self, client: tuple[str, Any], chars: int) -> None:
        """A request of `chars` characters counted against its client's limits (413, 429)."""
        most = self.settings.max_request_chars
        if most and chars > most:
            why = f"q: {chars:,} characters, at most {most:,} a request (--max-request-chars)"
            raise BadRequest(413, why, limit="max_request_chars")
        await self.access.charge(*client, chars)

    def _ignored(self, request: Any, fields: dict[str, Any], known: tuple[str, ...]) -> None:
        """The fields of a request its route does not know, ignored: kept for the answer
        (the request's `mt.ignored`) and said in the log once each (the first UNKNOWN_SAID
        names: a client cannot fill the log or the memory with new ones)."""
        unknown = unknown_fields(fields, known)
        request.scope["mt.ignored"] = unknown
        new = [name for name in unknown if name not in self.said][: UNKNOWN_SAID - len(self.said)]
        if new:
            self.said.update(new)
            names = printable(", ".join(repr(name[:40]) for name in new))
            log(f"ignored, as LibreTranslate ignores what it does not use: field(s) {names}")

    async def index(self, request: Any) -> Any:
        from starlette.responses import HTMLResponse

        return HTMLResponse(self.page, headers={"Content-Security-Policy": self.page_policy})

    @endpoint
    async def health(self, request: Any) -> Any:
        self._info()
        models = self.service.models
        counts = {
            "pending": self.service.pending,
            "batches": sum(model.batches for model in models),
            "texts": sum(model.decoded for model in models),
        }
        return json_answer({"status": "ready", **counts})

    @endpoint
    async def info(self, request: Any) -> Any:
        limits = dataclasses.asdict(self.settings) | {"max_body": self.settings.max_body}
        limits["api_keys"] = self.access.key_required
        self._info()
        models = [model.info | {"beam": model.beam} for model in self.service.models]
        return json_answer(models[0] | {"models": models, "serve": limits})

    @endpoint
    async def languages(self, request: Any) -> Any:
        """LibreTranslate's list: every language of the models, each with its targets."""
        self._info()
        pairs = self.service.pairs
        codes = list(dict.fromkeys(code for pair in pairs for code in pair))
        return json_answer([language(code, [t for s, t in pairs if s == code]) for code in codes])

    async def _translate_texts(
        self,
        texts: list[str],
        beam: int,
        nbest: int,
        work: Callable,
        model: Model,
        prefixes: list[str] | None = None,
        terms: list[list[str]] | None = None,
    ) -> Translations:
        """Each text's n-best, its sentences decoded in the batcher and put back in its layout
        (mt.text), a request's worth of sentences at a time: the /translate requests that
        come meanwhile are decoded between them, and whether it is short (the coverage
        guard's verdict, decoded with them). Texts given `prefixes` or `terms` (which are a
        whole text's) are translated whole."""
        steered = prefixes is not None or terms is not None
        layouts = await work(Layouts, texts, not steered)
        most, found = self.settings.max_texts, Translations([], [])
        if steered:
            found = await model.submit(layouts.sentences, beam, nbest, prefixes, terms)
        else:
            for start in range(0, len(layouts.sentences), most):
                sentences = layouts.sentences[start : start + most]
                found += await model.submit(sentences, beam, nbest)
        return await work(layouts.translations, found)

    @endpoint
    async def translate(self, request: Any) -> Any:
        started = time.perf_counter()
        self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings)
            work = self._translate(request, kind, body)
            found, single, taken, model, beam = await unless_gone(request, work)
        seconds = time.perf_counter() - started
        said = answer(found, single, taken, (model or self.service.first).info, beam, seconds)
        if request.scope["mt.ignored"]:
            said["ignored"] = request.scope["mt.ignored"]
        return json_answer(said)

    async def _translate(self, request: Any, kind: str, body: bytes) -> tuple:
        """(each text's n-best, one text or a list, what each was taken for with source auto,
        the model of the first text translated, its beam)."""
        work = self._work(body)
        fields, form = await work(parse_fields, kind, body)
        self._ignored(request, fields, FIELDS)
        client = self._client(request, fields)
        texts, single, asked, alternatives, source, target = await work(
            parse_request, fields, form, self.service.pairs
        )
        request.scope["mt.texts"] = len(texts)
        if fields.get("format") == "html":  # its text's language is not identified
            model = self._model(source, target)
            beam = asked or model.beam
            documents = await work(read_markups, texts, single, self.settings)
            units = [" ".join(d.units) for d in documents]
            await self._charge(client, sum(map(len, units)))
            self._translated(model, units)
            written = await self._translate_documents(documents, beam, model)
            found = [[(data.decode("utf-8"), math.nan)] for data in written]  # no score
            return Translations(found, [False] * len(found)), single, None, model, beam
        check_limits(texts, self.settings)
        await self._charge(client, sum(map(len, texts)))
        prefixes = parse_prefixes(fields, len(texts))
        terms = await work(parse_glossary, fields, texts)
        if source == "auto":
            routes = [self._route(c, target) for c in await self._identify(texts)]
        else:
            routes = [(None, self._model(source, target))] * len(texts)
        # a text no model takes (already in the target language) is returned as it is
        found = Translations([[(text, math.nan)] for text in texts], [False] * len(texts))
        beams = {}
        for model in dict.fromkeys(model for _, model in routes if model is not None):
            todo = [i for i, (_, routed) in enumerate(routes) if routed is model]
            beams[model] = beam = asked or max(model.beam, alternatives + 1)
            steer = [None if x is None else [x[i] for i in todo] for x in (prefixes, terms)]
            wanted = [texts[i] for i in todo]
            self._translated(model, wanted)
            decoded = await self._translate_texts(
                wanted, beam, alternatives + 1, work, model, *steer
            )
            for k, i in enumerate(todo):
                found.nbest[i], found.short[i] = decoded.nbest[k], decoded.short[k]
                found.placed[i] = decoded.placed[k]
        first = next((model for _, model in routes if model is not None), None)
        taken = [c for c, _ in routes] if source == "auto" else None
        return found, single, taken, first, beams.get(first, asked or self.service.first.beam)

    def _translated(self, model: Model, texts: list[str]) -> None:
        """`texts` given to `model`, counted by the metrics."""
        if self.metrics is not None:
            self.metrics.translated(model, texts)

    def _model(self, source: str, target: str | None) -> Model:
        """The model of a pair check_languages let through ("auto" with html: the first
        model to `target`)."""
        if source == "auto":
            return next(m for m in self.service.models if target in (None, m.pair[1]))
        return self.service.model(source, target)

    def _route(self, candidates: list[dict[str, Any]], target: str | None) -> tuple:
        """(the language a text sent with source auto is taken to be in, the model that
        translates it, None to return it as it is), from its `candidates`, best first: the
        best one's model to `target` (None: any target); else, when it is identified with
        CONFIDENT confidence, no model (a text already in the target language); else the
        likeliest language a model translates."""

        def model_of(code: str) -> Model | None:
            return next(
                (
                    m
                    for m in self.service.models
                    if m.pair[0] == code and target in (None, m.pair[1])
                ),
                None,
            )

        best = candidates[0]
        if model_of(best["language"]) is None and best["confidence"] >= 100 * CONFIDENT:
            return best, None
        for candidate in candidates:
            if (model := model_of(candidate["language"])) is not None:
                return candidate, model
        return best, None

    @endpoint
    async def detect(self, request: Any) -> Any:
        """Each text's language: LibreTranslate's list of candidates, best first (the model's
        languages, confidences 0 to 100), a list of them per text for a list."""
        self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings)
            work = self._work(body)
            fields, _ = await work(parse_fields, kind, body)
            self._ignored(request, fields, DETECT_FIELDS)
            client = self._client(request, fields)
            texts, single = parse_texts(fields)
            check_limits(texts, self.settings)
            await self._charge(client, sum(map(len, texts)))
            found = await unless_gone(request, self._identify(texts))
        return json_answer(found[0] if single else found)

    async def _identify(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        """Each text's candidate languages among the models', best first, identified by a
        worker (the first call loads the identifier's model) sentence by sentence
        (mt.data.language): a text of two languages gets the one most of its characters are
        in. A tie (nothing to go by: a name, a number) goes to the first model's source."""
        codes = tuple(dict.fromkeys(code for pair in self.service.pairs for code in pair))

        def rank() -> list[list[dict[str, Any]]]:
            ident = identifier(codes)
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
        info = self._info()  # the first model's pair
        src, tgt = language(info["source"], []), language(info["target"], [])
        keys = self.access.key_required
        return json_answer(
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

    async def _translate_documents(
        self, documents: list[Document], beam: int, model: Model
    ) -> list[bytes]:
        """Each document translated by `model`, all their texts decoded together."""
        work = self.service.work
        requests = await work(lambda: [t for d in documents for t in d.requests()])
        decoded = await self._translate_texts(requests, beam, 1, work, model)
        found = [hyps[0][0] for hyps in decoded.nbest]
        return await self.service.work(translate_documents, documents, lambda texts: found)

    @endpoint
    async def translate_file(self, request: Any) -> Any:
        """A file (FILE_FORMATS) translated with its layout kept; its translation is kept in
        memory (mt.serve.downloads) for /download_file."""
        self._info()
        async with self.service.admitted():
            kind, body = await read_form(request, self.settings, multipart=True)
            return await unless_gone(request, self._translate_file(request, kind, body))

    async def _translate_file(self, request: Any, kind: str, body: bytes) -> Any:
        work = self.service.work
        fields = await work(parse_multipart, kind, body)
        self._ignored(request, fields, FILE_FIELDS)
        values = {key: value.decode("utf-8", "replace") for key, (_, value) in fields.items()}
        client = self._client(request, values)  # a document is read for a valid key only
        source, target = check_languages(values, self.service.pairs)
        name, document = await work(read_document_file, fields, self.settings)
        request.scope["mt.texts"] = len(document.units)
        await self._charge(client, sum(len(unit) for unit in document.units))
        if source == "auto":  # the language most of its text is in
            (candidates,) = await self._identify(["\n".join(document.units)[:AUTO_CHARS]])
            model = self._route(candidates, target)[1] or self._model("auto", target)
        else:
            model = self._model(source, target)
        self._translated(model, document.units)
        (data,) = await self._translate_documents([document], model.beam, model)
        stored = await self.store.keep(name, data)
        said = {"translatedFileUrl": f"{self.links}/download_file/{quote(stored)}"}
        if request.scope["mt.ignored"]:
            said["ignored"] = request.scope["mt.ignored"]
        return json_answer(said)

    @endpoint
    async def download_file(self, request: Any) -> Any:
        from starlette.responses import Response

        stored = request.path_params["filename"]
        data = await self.store.kept(stored)
        if data is None:
            raise BadRequest(404, f"{stored}: no such file (or no longer kept)")
        name = stored.partition(".")[2]
        disposition = f"attachment; filename*=UTF-8''{quote(name)}"
        headers = {"Content-Disposition": disposition}
        media = MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")
        return Response(data, media_type=media, headers=headers)
