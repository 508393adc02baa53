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

from collections.abc import Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from ..data import tokenizer as tok

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
    where not given)."""

    nbest: list[list[tuple[str, float]]]
    short: list[bool]
    placed: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.placed = self.placed or [0] * len(self.nbest)

    def part(self, start: int, stop: int) -> Translations:
        """The translations of the texts from `start` to `stop` (not included)."""
        return Translations(self.nbest[start:stop], self.short[start:stop], self.placed[start:stop])

    def __add__(self, other: Translations) -> Translations:
        """Both's translations, these first."""
        return Translations(
            self.nbest + other.nbest, self.short + other.short, self.placed + other.placed
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

    def short(
        self, source_lengths: Sequence[int], translations: Sequence[str], fraction: float
    ) -> list[bool]:
        """Whether each translation is shorter than `fraction` of what its source (of
        `source_lengths` tokens) predicts (never for a source under LEAST_SOURCE_TOKENS, nor
        with `fraction` 0)."""
        lengths = map(len, tok.encode(self.tgt_tokenizer, translations))
        return [
            n >= LEAST_SOURCE_TOKENS and m < fraction * self.ratio * n
            for n, m in zip(source_lengths, lengths)
        ]
