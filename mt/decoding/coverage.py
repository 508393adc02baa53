"""The coverage guard: a translation much shorter than its source predicts has lost text (a
model that never saw so long a sentence turns it into one short one). The prediction is the
training corpus's length ratio, target tokens per source token of train, which `mt prepare`
measures (mt.decoding.trained).

A translation under decode.coverage (0.5) of its prediction is translated again once, in
pieces half as long as its first (mt.decoding.pieces), and the longer of the two kept; one
still short after that is flagged to the caller (`Coverage.short`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from ..data import tokenizer as tok

# Sources shorter are not judged: a sentence of one or two clauses that comes out short is
# the model's quality, which a second try in pieces (cut mid-clause) would only make worse;
# what the guard is for is a long sentence of many clauses turned into one short one.
# (Tatoeba's longest test sentence has 40 tokens; FLORES devtest has 21% over 48.)
LEAST_SOURCE_TOKENS = 48


@dataclass(frozen=True)
class Coverage:
    """How long a translation should be: `ratio` target tokens per source token."""

    ratio: float
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer

    def lengths(self, sources: Sequence[str], translations: Sequence[str]) -> list[tuple]:
        """(source tokens, translation tokens) of each pair."""
        return list(
            zip(
                map(len, tok.encode(self.src_tokenizer, sources)),
                map(len, tok.encode(self.tgt_tokenizer, translations)),
            )
        )

    def short(
        self, sources: Sequence[str], translations: Sequence[str], fraction: float
    ) -> list[bool]:
        """Whether each translation is shorter than `fraction` of what its source predicts
        (never for a source under LEAST_SOURCE_TOKENS, nor with `fraction` 0)."""
        return [
            n >= LEAST_SOURCE_TOKENS and m < fraction * self.ratio * n
            for n, m in self.lengths(sources, translations)
        ]
