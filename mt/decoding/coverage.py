"""The coverage guard: a translation much shorter than its source predicts has lost text (a
model that never saw so long a sentence turns it into one short one). The prediction is the
training corpus's length ratio, target tokens per source token of train, which `mt prepare`
measures (mt.decoding.trained).

A translation under decode.coverage (0.5) of its prediction is translated again once, in
pieces half as long as its first (mt.decoding.pieces), and the longer of the two kept; one
still short after that is flagged to the caller: a Translator's translate_nbest returns its
`Translations`, each translation's verdict with it, so that no caller measures again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from ..config import DecodeConfig
from ..data import tokenizer as tok
from ..messages import say

# Sources shorter are not judged: a sentence of one or two clauses that comes out short is
# the model's quality, which a second try in pieces (cut mid-clause) would only make worse;
# what the guard is for is a long sentence of many clauses turned into one short one.
# (Tatoeba's longest test sentence has 40 tokens; FLORES devtest has 21% over 48.)
LEAST_SOURCE_TOKENS = 48


@dataclass
class Translations:
    """Each text's n-best (text, score) pairs, best first; whether it is `short`: much
    shorter than its source predicts even after the guard's second try (a text of several
    sentences, mt.text: a sentence of it is); and how many of its spans the model did not
    carry over exactly, `placed` where their neighbours are (mt.decoding.placeholders; none
    where not given); and the target `tokens` of its best translation, as the guard measured
    it (before spans were put back; 0 where not measured): what the server's metrics count."""

    nbest: list[list[tuple[str, float]]]
    short: list[bool]
    placed: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.placed = self.placed or [0] * len(self.nbest)
        self.tokens = self.tokens or [0] * len(self.nbest)

    def part(self, start: int, stop: int) -> Translations:
        """The translations of the texts from `start` to `stop` (not included)."""
        kept = slice(start, stop)
        return Translations(
            self.nbest[kept], self.short[kept], self.placed[kept], self.tokens[kept]
        )

    def __add__(self, other: Translations) -> Translations:
        """Both's translations, these first."""
        return Translations(
            self.nbest + other.nbest,
            self.short + other.short,
            self.placed + other.placed,
            self.tokens + other.tokens,
        )


@dataclass(frozen=True)
class Coverage:
    """How long a translation should be: `ratio` target tokens per source token."""

    ratio: float
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer

    def source_lengths(self, sources: Sequence[str]) -> list[int]:
        """The tokens of each source."""
        return list(map(len, tok.encode(self.src_tokenizer, sources)))

    def target_lengths(self, translations: Sequence[str]) -> list[int]:
        """The tokens of each translation."""
        return list(map(len, tok.encode(self.tgt_tokenizer, translations)))

    def guarded(
        self, translate: Callable[[Sequence[int], DecodeConfig], list], sources, decode
    ) -> tuple[list[list[tuple[str, float]]], list[bool], list[int]]:
        """Each of `sources`' n-best, whether it is short and its best translation's tokens:
        `translate` (the indices of the sources to translate, the decode section) translates
        them all, then those short again in pieces half as long as their first, the longer
        translation kept (said)."""
        found = translate(range(len(sources)), decode)
        lengths = self.source_lengths(sources)
        tokens = self.target_lengths([hyps[0][0] for hyps in found])
        short = self.shorter(lengths, tokens, decode.coverage)
        retry = [i for i, flag in enumerate(short) if flag]
        if not retry:
            return found, short, tokens
        by_piece: dict[int, list[int]] = {}  # half a first piece: every retried text is cut
        for i in retry:
            by_piece.setdefault(max(1, min(lengths[i], decode.piece_tokens) // 2), []).append(i)
        longer = []  # the retried whose second try is kept: the others are still short
        for piece, group in by_piece.items():
            again = translate(group, dataclasses.replace(decode, piece_tokens=piece))
            for i, hyps in zip(group, again):
                if len(hyps[0][0]) > len(found[i][0][0]):
                    found[i] = hyps
                    longer.append(i)
        kept = self.target_lengths([found[i][0][0] for i in longer])
        for i, n in zip(longer, kept):
            tokens[i] = n
        for i, flag in zip(
            longer, self.shorter([lengths[i] for i in longer], kept, decode.coverage)
        ):
            short[i] = flag
        say(
            f"warning: {len(retry)} translation(s) much shorter than their source predicts: "
            f"translated again in smaller pieces; {sum(short)} still short"
        )
        return found, short, tokens

    def short(
        self, source_lengths: Sequence[int], translations: Sequence[str], fraction: float
    ) -> list[bool]:
        """Whether each translation is shorter than `fraction` of what its source (of
        `source_lengths` tokens) predicts (never for a source under LEAST_SOURCE_TOKENS, nor
        with `fraction` 0)."""
        return self.shorter(source_lengths, self.target_lengths(translations), fraction)

    def shorter(
        self, source_lengths: Sequence[int], target_lengths: Sequence[int], fraction: float
    ) -> list[bool]:
        """As `short`, of translations already measured (`target_lengths` tokens)."""
        return [
            n >= LEAST_SOURCE_TOKENS and m < fraction * self.ratio * n
            for n, m in zip(source_lengths, target_lengths)
        ]
