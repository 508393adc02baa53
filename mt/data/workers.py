"""The worker processes of prepare (forked, each with the tokenizers, bounded in the work
they take ahead) and the progress meter of its passes."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tokenizers import Tokenizer
from tqdm import tqdm

from ..messages import say
from .tokenizer import PieceEncoder, tokenizer_from_str

PERIOD = 30.0  # seconds between progress lines off a terminal


_ENCODERS: tuple[PieceEncoder, ...] = ()  # a worker's, for the jobs that encode


@contextmanager
def workers(count: int, tokenizers: tuple[Tokenizer, ...] = ()) -> Iterator[Callable]:
    """`run(fn, items)`: fn(*item) of each item, in order, in `count` processes (0: one per
    core; 1: this one), at most two tasks a process ahead so that memory stays bounded
    (`Pool.imap` would read the whole corpus ahead)."""
    count = count or len(os.sched_getaffinity(0))
    texts = tuple(t.to_str() for t in tokenizers)
    if count == 1:
        _start_worker(texts)
        yield lambda fn, items: (fn(*item) for item in items)
        return
    with _forked(count, texts) as pool:

        def run(fn: Callable, items: Iterator[tuple]) -> Iterator[Any]:
            pending: deque = deque()
            for item in items:
                pending.append(pool.apply_async(fn, item))
                if len(pending) > 2 * count:
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()

        yield run


@contextmanager
def _forked(count: int, texts: tuple[str, ...]) -> Iterator[Any]:
    """A pool of forked processes (spawned ones would import the caller's __main__, which a
    script without a main guard runs again); `tokenizers` is told that its threads are not
    wanted there (else it warns at the fork), and only there."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        pool = multiprocessing.get_context("fork").Pool(count, _start_worker, (texts,))
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    with pool:
        yield pool


def _start_worker(texts: tuple[str, ...]) -> None:
    """One encoder a distinct tokenizer (a joint one serves both sides, with one memo)."""
    global _ENCODERS
    encoders: dict[str, PieceEncoder] = {}
    for text in texts:
        if text not in encoders:
            encoders[text] = PieceEncoder(tokenizer_from_str(text))
    _ENCODERS = tuple(encoders[text] for text in texts)


class Meter:
    """Pairs done in a pass: a bar with pairs/s and the time left on a terminal; off one, a
    plain line every PERIOD seconds."""

    def __init__(self, desc: str, total: int | None) -> None:
        self.desc, self.total, self.done = desc, total, 0
        self.start = self.said = time.monotonic()
        self.bar = tqdm(
            total=total, desc=desc, unit=" pairs", unit_scale=True, disable=None, leave=False
        )

    def update(self, n: int) -> None:
        self.bar.update(n)
        self.done += n
        now = time.monotonic()
        if self.bar.disable and now - self.said >= PERIOD:
            self.said, rate = now, self.done / max(now - self.start, 1e-9)
            left = f", {(self.total - self.done) / rate / 60:.1f} min left" if self.total else ""
            say(f"prepare: {self.desc} {self.done:,} pairs, {rate:,.0f} pairs/s{left}")

    def close(self) -> None:
        self.bar.close()


def worker_encoders() -> tuple[PieceEncoder, ...]:
    """The encoders of the tokenizers this worker was started with."""
    return _ENCODERS
