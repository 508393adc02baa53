"""The server's decoder: the model opened in a thread of its own, and one decoder thread
that batches every request's texts.

Every request's texts join one queue, and the decoder thread takes the oldest, then whatever
else arrives within `batch_wait_ms` (until `batch_texts` texts), and decodes them as one batch
(one per distinct beam and number of alternatives): under load, requests gather while the
previous batch decodes, so the decoder sees batches as `mt translate` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MtError, one_line
from ..messages import say

if TYPE_CHECKING:  # asyncio is imported where a server runs: `mt --help` stays quick
    import asyncio

    from ..decoding.coverage import Translations
    from ..decoding.engine import Translator

STOP_SECONDS = 8  # grace for the requests in flight at SIGTERM: the process is gone within 10 s
DECODER_STOP_SECONDS = 2  # then the batch being decoded may finish, for clients gone by then
IDLE_SECONDS = 1.0  # quiet for this long after work, the server hands freed memory back


def knob(default: float, help: str, least: int = 1, also: str = "") -> Any:
    """A setting: its default, its `mt serve --help` text, the least value it takes, and
    another name of its option (`also`: LibreTranslate's)."""
    return field(default=default, metadata={"help": help, "least": least, "also": also})


@dataclass
class Settings:
    """The server's limits and batching knobs, each an option of `mt serve`."""

    max_chars: int = knob(
        1000,
        "Characters a text may have (413 beyond); LibreTranslate's name too.",
        also="--char-limit",
    )
    max_texts: int = knob(64, "Texts a request may hold (413 beyond).")
    max_requests: int = knob(256, "Requests being read, parsed or decoded at once (503 beyond).")
    batch_texts: int = knob(64, "Texts of concurrent requests one decoder batch gathers at most.")
    batch_wait_ms: float = knob(
        10.0, "How long a batch waits for more requests after its first; 0: none.", least=0
    )
    workers: int = knob(2, "Threads that parse requests and documents and write translations.")
    max_connections: int = knob(512, "Open connections at once (503 beyond).")
    max_request_chars: int = knob(
        0, "Characters a request may have, all its texts (413 beyond); 0: no limit.", least=0
    )
    req_limit: int = knob(
        0, "Requests a minute per client, key or address (429 beyond); 0: no limit.", least=0
    )
    chars_per_minute: int = knob(
        0, "Characters a minute per client, key or address (429 beyond); 0: no limit.", least=0
    )
    kept_mb: int = knob(64, "Megabytes of translated files kept for download.")
    kept_minutes: int = knob(30, "Minutes a translated file is kept for download.")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, least = getattr(self, f.name), f.metadata["least"]
            if value < least:
                raise ConfigError(f"--{f.name.replace('_', '-')} {value}: must be at least {least}")

    @property
    def max_body(self) -> int:
        """Bytes a request body may take: max_texts texts of max_chars characters, each
        escaped as JSON at worst (6 bytes: \\uXXXX), and room for the other fields."""
        return self.max_texts * (self.max_chars * 6 + 8) + 4096

    @property
    def max_file_chars(self) -> int:
        """Characters of text a /translate_file document may hold: as many as its body may
        have bytes (a .docx or .odt is a zip, whose text can be far larger than itself)."""
        return self.max_body


class BadRequest(Exception):
    """A request the server refuses: its HTTP status and a one-line reason; `retry`: the
    seconds for Retry-After (0: none); `limit`: the limit it is past, by name (metrics count
    them: mt.serve.metrics), "" for a request refused for another reason."""

    def __init__(self, status: int, message: str, retry: int = 0, limit: str = "") -> None:
        super().__init__(message)
        self.status, self.retry, self.limit = status, retry, limit


@dataclass
class Job:
    """One request's texts on their way through the decoder."""

    texts: list[str]
    beam: int
    nbest: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    prefixes: list[str] | None = None  # the target text each translation starts with
    terms: list[list[str]] | None = None  # the target terms each translation contains
    cancelled: bool = False  # its client left (or the server stops): skip it


class Model:
    """One model of the server, opened in a thread of its own, and its decoder thread that
    batches the jobs sent to it. `open_model()` returns the `engine.Translator` to serve (its
    decode section is the model's default)."""

    def __init__(
        self, open_model: Callable[[], Translator], service: Service, siblings: bool = True
    ) -> None:
        self.open_model, self.service, self.settings = open_model, service, service.settings
        self.siblings = siblings  # a model of both directions serves the other one too
        self.translator: Translator | None = None
        self.info: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.decoder: threading.Thread | None = None
        self.batches = self.decoded = 0  # decoder batches so far, and their texts

    @property
    def ready(self) -> bool:
        return self.translator is not None

    @property
    def pair(self) -> tuple[str, str]:
        """The languages it translates from and to."""
        return self.info["source"], self.info["target"]

    def start(self) -> None:
        threading.Thread(target=self._load, name="mt-load", daemon=True).start()

    def stop(self) -> None:
        """Let the decoder finish its batch (DECODER_STOP_SECONDS at most) and stop."""
        self.jobs.put(None)
        if self.decoder is not None:
            self.decoder.join(DECODER_STOP_SECONDS)

    @property
    def busy(self) -> bool:
        """Whether the decoder thread is still decoding (after stop: it did not finish)."""
        return self.decoder is not None and self.decoder.is_alive()

    def _load(self) -> None:
        started = time.perf_counter()
        try:
            translator = self.open_model()
            if self.siblings and (other := translator.turned()) is not None:
                self.service.add(lambda: other)  # its other direction: a model of its own
            translator.translate_nbest(["Hello."])  # warm up the first batch
        except BaseException as e:  # an MtError to report, or a bug: the server stops either way
            self.service.failed(self, e)
            return
        self.info = translator.info()
        # what is loaded now stays: kept out of the collector's full passes, which then take
        # milliseconds, not the 100 ms that hold up every thread while a document is read
        gc.freeze()
        self.decoder = threading.Thread(target=self._decode, name="mt-decode", daemon=True)
        self.decoder.start()
        self.translator = translator
        seconds = time.perf_counter() - started
        log(
            f"ready in {seconds:.1f} s: {self.info['model']} (step {self.info['step']}), "
            f"{'→'.join(self.pair)}, {self.info['engine']} on {self.info['device']}, "
            f"beam {self.beam}"
        )
        self.service.loaded()

    @property
    def beam(self) -> int:
        """The beam of a request that does not say."""
        return self.translator.config.decode.beam

    def _decode(self) -> None:
        """Take the oldest job, gather more for up to batch_wait_ms, decode, answer; repeat.
        Idle for IDLE_SECONDS after any work, hand freed memory back (once: it takes a few
        milliseconds, too many to spend after every batch)."""
        wait, limit = self.settings.batch_wait_ms / 1000, self.settings.batch_texts
        while True:
            try:
                first = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self.service.worked:
                    self.service.worked = False
                    give_back_memory()
                continue
            if first is None:
                break
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
            for job in (job for job in batch if not job.cancelled):
                groups.setdefault((job.beam, job.nbest), []).append(job)
            for (beam, nbest), jobs in groups.items():
                self._run(jobs, beam, nbest)
            self.service.worked = True

    def _run(self, jobs: list[Job], beam: int, nbest: int) -> None:
        from ..decoding.search import Abandoned, abandoned

        jobs = [job for job in jobs if not job.cancelled]  # gone while an earlier group decoded
        if not jobs:
            return
        decode = dataclasses.replace(self.translator.config.decode, beam=beam, nbest=nbest)
        texts = [text for job in jobs for text in job.texts]
        prefixes = [p for job in jobs for p in job.prefixes or [""] * len(job.texts)]
        terms = [t for job in jobs for t in job.terms or [[]] * len(job.texts)]
        self.batches, self.decoded = self.batches + 1, self.decoded + len(texts)
        # the batch is dropped between two decoding steps once all its clients have left
        gone = abandoned.set(lambda: all(job.cancelled for job in jobs))
        started = time.perf_counter()
        try:
            found = self.translator.translate_nbest(
                texts,
                decode,
                False,
                prefixes if any(prefixes) else None,
                terms if any(terms) else None,
            )
        except Abandoned:
            return
        except MtError as e:  # a request's input (a prefix too long): 400 to it alone
            if len(jobs) > 1:
                for job in jobs:
                    self._run([job], beam, nbest)
                return
            error = BadRequest(400, one_line(e))
            jobs[0].loop.call_soon_threadsafe(_settle, jobs[0].future, None, error)
            return
        except Exception as e:  # a bug: its requests get a 500, the others go on
            for job in jobs:
                job.loop.call_soon_threadsafe(_settle, job.future, None, e)
            return
        finally:
            abandoned.reset(gone)
        seconds = time.perf_counter() - started
        start = 0
        for job in jobs:
            result = found.part(start, start + len(job.texts))
            start += len(job.texts)
            job.loop.call_soon_threadsafe(_settle, job.future, result, None)
        self.service.on_batch(self, found, seconds)

    async def submit(
        self,
        texts: list[str],
        beam: int,
        nbest: int,
        prefixes: list[str] | None = None,
        terms: list[list[str]] | None = None,
    ) -> Translations:
        """The n-best (text, score) pairs of each text, decoded in some batch (once ready),
        and whether it is short (the coverage guard's verdict), each starting with its
        `prefixes` text and containing its `terms` if given. Cancelled (its client left),
        the texts leave the queue: the decoder skips them."""
        import asyncio

        loop = asyncio.get_running_loop()
        job = Job(texts, beam, nbest, loop, loop.create_future(), prefixes, terms)
        self.jobs.put(job)
        try:
            return await job.future
        except asyncio.CancelledError:
            job.cancelled = True
            raise


class Service:
    """The models of a server and what they share: the workers, the requests in flight,
    the limits. Each model has its own decoder thread; a pair of languages one model."""

    def __init__(self, open_models: list[Callable[[], Translator]], settings: Settings):
        self.settings = settings
        self.models = [Model(open_model, self) for open_model in open_models]
        self.error: BaseException | None = None
        self.on_failure: Callable[[], None] = lambda: None
        # after each batch, once its requests are answered: (the model, its best
        # translations, the seconds it took); the metrics count them (mt.serve.metrics)
        self.on_batch: Callable[[Model, Translations, float], None] = lambda *batch: None
        self.pending = 0  # requests admitted and not yet answered, counted on the event loop
        self.pool: Any = None  # the workers: a ThreadPoolExecutor, made at start
        self.worked = False  # since memory was last handed back

    @property
    def ready(self) -> bool:
        return self.error is None and all(model.ready for model in self.models)

    @property
    def first(self) -> Model:
        """The model named first: its pair is the default of a request that names none."""
        return self.models[0]

    def start(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="mt-work")
        for model in list(self.models):  # a model of both directions adds its other one
            model.start()

    def add(self, open_model: Callable[[], Translator]) -> None:
        """Serve one more model (the other direction of a model of both), opened now."""
        model = Model(open_model, self, siblings=False)
        self.models.append(model)  # before its sibling is ready: the server is not yet
        model.start()

    def stop(self) -> None:
        for model in self.models:
            model.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    @property
    def busy(self) -> bool:
        return any(model.busy for model in self.models)

    def failed(self, model: Model, error: BaseException) -> None:
        """A model could not be loaded: the server stops."""
        self.error = self.error or error
        log("a model could not be loaded; stopping")
        self.on_failure()

    def loaded(self) -> None:
        """Once every model is loaded, each pair must be one model's."""
        if not all(model.ready for model in self.models):
            return
        pairs = [model.pair for model in self.models]
        twice = next((pair for pair in pairs if pairs.count(pair) > 1), None)
        if twice is not None:
            names = [m.info["model"] for m in self.models if m.pair == twice]
            why = f"{' and '.join(names)} both translate {'→'.join(twice)}: serve one of them"
            self.failed(self.first, ConfigError(why))

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [model.pair for model in self.models]

    def model(self, source: str, target: str) -> Model | None:
        """The model that translates `source` to `target`, if one does."""
        return next((m for m in self.models if m.pair == (source, target)), None)

    @contextlib.asynccontextmanager
    async def admitted(self):
        """A request counted in flight while it is read, parsed, decoded and written; 503
        with Retry-After past --max-requests."""
        if self.pending >= self.settings.max_requests:
            most = self.settings.max_requests
            why = f"busy: {self.pending} request(s) in flight (--max-requests {most})"
            raise BadRequest(503, why, 1, "max_requests")
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1
            self.worked = True  # its parsing and writing freed memory too

    async def work(self, function: Callable, *args: Any) -> Any:
        """`function(*args)` run by one of the workers: parsing and writing never hold up the
        event loop, and at most --workers of them run at once (the rest wait in turn, bounded
        by --max-requests)."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.pool, function, *args)


def give_back_memory() -> None:
    """Hand the memory of what is no longer used back to the system: a document's trees are
    held in reference cycles until a collection, and glibc keeps what they freed in its
    arenas (one a thread); the server's memory would stay up."""
    import ctypes

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # its request was cancelled meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def log(message: str) -> None:
    """A line of the server's log: the time, then `message`."""
    say(f"{time.strftime('%H:%M:%S')} mt serve: {message}")
