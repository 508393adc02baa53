"""Spans carried over verbatim by a model that reserves placeholders (tokenizer.placeholders):
the spans of a source (mt.data.spans: URLs, e-mail addresses, {{templates}}, %d, `code`,
dates, times, numbers) become ⦅1⦆, ⦅2⦆, ... in their order, which the model learned to carry
over (mt.data.examples), and each placeholder of its translation becomes its span again.

A translation that loses a placeholder is decoded again with the lost ones as constraints
where the engine has them (mt.decoding.constraints); one still lost, or one the engine cannot
force, is put back where its neighbours are: after the span before it, or before the span
after it, where the translation has those, else at the place of the translation as far along
as the span is in its source. A placeholder written twice keeps its first place. Each span
so put back is counted (`Translations.placed`) and said to the caller.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config import DecodeConfig
from ..data.spans import MARKER, placeholder, spans


@dataclass(frozen=True)
class Protected:
    """A source with its spans as placeholders: `text` what the model reads, `spans` the
    text of placeholder 1, 2, ..., and `at` how far along its source each is (0 to 1)."""

    text: str
    spans: tuple[str, ...] = ()
    at: tuple[float, ...] = ()

    @classmethod
    def of(cls, source: str, most: int) -> Protected:
        """`source` with its first `most` spans as placeholders (0: as it is)."""
        found = spans(source)[:most] if most else []
        if not found:
            return cls(source)
        out, at = [], 0
        for k, (start, end) in enumerate(found, start=1):
            out += [source[at:start], placeholder(k)]
            at = end
        text = "".join([*out, source[at:]])
        where = tuple(start / max(len(source), 1) for start, _ in found)
        return cls(text, tuple(source[a:b] for a, b in found), where)

    def lost(self, translation: str) -> list[int]:
        """The placeholders (numbers from 1) `translation` does not have."""
        there = {int(k) for k in MARKER.findall(translation)}
        return [k for k in range(1, len(self.spans) + 1) if k not in there]

    def restore(self, translation: str) -> tuple[str, int]:
        """`translation` with each placeholder its span, and how many placeholders the model
        did not carry over exactly (lost ones put back where their neighbours are; repeated
        or made-up ones taken out)."""
        if not self.spans and not MARKER.search(translation):
            return translation, 0
        seen: set[int] = set()
        out, at, amiss = [], 0, 0
        for found in MARKER.finditer(translation):
            k = int(found.group(1))
            out.append(translation[at : found.start()])
            if 1 <= k <= len(self.spans) and k not in seen:
                seen.add(k)
                out.append(_mark(k))
            else:
                amiss += 1
            at = found.end()
        text = "".join([*out, translation[at:]])
        for k in range(1, len(self.spans) + 1):
            if k not in seen:
                text = _put(text, k, self.at[k - 1])
                amiss += 1
        text = re.sub("\x00(\\d+)\x00", lambda f: self.spans[int(f.group(1)) - 1], text)
        return (re.sub(" {2,}", " ", text).strip() if amiss else text), amiss


def _mark(k: int) -> str:
    """Where span `k` goes, until all are placed (no text holds a NUL)."""
    return f"\x00{k}\x00"


def _put(text: str, k: int, at: float) -> str:
    """`text` (its spans marked \\0k\\0) with span `k` marked where its neighbours are."""
    mark, before, after = _mark(k), _mark(k - 1), _mark(k + 1)
    if before in text:
        return text.replace(before, f"{before} {mark}", 1)
    if after in text:
        return text.replace(after, f"{mark} {after}", 1)
    words = [m.start() for m in re.finditer(r"(?<!\S)\S", text)] + [len(text)]
    place = min(words, key=lambda w: abs(w - at * len(text)))
    return f"{text[:place]}{mark} {text[place:]}"


def protect(texts: Sequence[str], most: int) -> list[Protected]:
    """Each text with its first `most` spans as placeholders (`Protected.of`)."""
    return [Protected.of(text, most) for text in texts]


def carried_over(
    protected: Sequence[Protected],
    found: list[list[tuple[str, float]]],
    force: Callable[..., list] | None,
    decode: DecodeConfig,
) -> tuple[list[list[tuple[str, float]]], list[int]]:
    """Each source's n-best (`found`, of the `protected` texts) with its spans put back, and
    how many of them the model did not carry over exactly: the best that lost a placeholder
    decoded again by `force` (the indices of the sources, `decode`, the placeholders each
    must hold; None: the engine cannot force), then each restored. The counts are said by
    whoever a person reads: mt translate's warning, /translate's `placed`, a validation's
    record."""
    lost = [i for i, p in enumerate(protected) if p.lost(found[i][0][0])]
    if lost and force is not None:
        forced = [[placeholder(k) for k in protected[i].lost(found[i][0][0])] for i in lost]
        for i, hyps in zip(lost, force(lost, decode, forced)):
            found[i] = hyps
    nbest, placed = [], []
    for p, hyps in zip(protected, found):
        restored = [(*p.restore(text), score) for text, score in hyps]
        nbest.append([(text, score) for text, _, score in restored])
        placed.append(restored[0][1])
    return nbest, placed
