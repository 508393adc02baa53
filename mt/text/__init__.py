"""Real text in, real text out: the layer above decoding that every caller translating what a
person wrote goes through (mt translate, mt serve's /translate, /translate_file and page,
either engine). Each text is cut into sentences with its layout kept (mt.text.sentences),
every sentence of every text is decoded in one call to the Translator (its usual batches),
and the translations are put back in the layout: the same line breaks, the same spaces
between sentences.

n-best of a text of several sentences: the k-th translation joins each sentence's k-th
(its last where it has fewer), its score the mean of theirs; the best is the sentences'
best. `alternatives` on the server are these, after the best.

A text is `short` where a sentence of it came out much shorter than its source predicts even
after the coverage guard translated it again in smaller pieces (mt.decoding.coverage): the
Translator's verdict on each sentence, taken as it comes, never measured again. `mt
translate` says so on stderr, /translate in its answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..decoding.coverage import Translations
from .sentences import Layout, split_sentences

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from ..decoding.engine import Translator

__all__ = [
    "Layout",
    "Layouts",
    "Translations",
    "split_sentences",
    "translate_texts",
    "translate_texts_nbest",
]

T = TypeVar("T")


class Layouts:
    """Many texts laid out at once: `sentences` is all their sentences, flat, to decode in
    one call; `translations` puts each text's translations back in its layout."""

    def __init__(self, texts: Sequence[str], split: bool = True) -> None:
        self.layouts = [Layout.of(text, split) for text in texts]
        self.sentences = [s for layout in self.layouts for s in layout.sentences]

    def _per_text(self, values: Sequence[T]) -> Iterator[tuple[Layout, Sequence[T]]]:
        """Each text's layout and its sentences' share of `values` (one per sentence)."""
        start = 0
        for layout in self.layouts:
            yield layout, values[start : start + len(layout.sentences)]
            start += len(layout.sentences)

    def joined(self, found: Sequence[list[tuple[str, float]]]) -> list[list[tuple[str, float]]]:
        """Each text's n-best from the n-best of every sentence (`found`, as `sentences`)."""
        return [layout.joined(hyps) for layout, hyps in self._per_text(found)]

    def translations(self, found: Translations) -> Translations:
        """Each text's n-best (`joined`), whether it is short (a sentence of it is: the
        verdict of the guard that `found`, the translations of `sentences`, carry), and its
        spans placed by their neighbours and its tokens (its sentences')."""
        short = [any(flags) for _, flags in self._per_text(found.short)]
        placed = [sum(counts) for _, counts in self._per_text(found.placed)]
        tokens = [sum(counts) for _, counts in self._per_text(found.tokens)]
        return Translations(self.joined(found.nbest), short, placed, tokens)


def translate_texts_nbest(
    translator: Translator,
    texts: Sequence[str],
    decode: DecodeConfig | None = None,
    split: bool = True,
    progress: bool = False,
    prefixes: Sequence[str] | None = None,
    terms: Sequence[Sequence[str]] | None = None,
) -> Translations:
    """Up to `decode.nbest` (translation, score) pairs of each text, best first, its layout
    kept, and which are short; `split` False: each text is one sentence (text already one
    sentence a line). `prefixes` (a target text each translation starts with) and `terms`
    (target terms each contains) are a whole text's: given either, every text is translated
    whole."""
    steered = prefixes is not None or terms is not None
    layouts = Layouts(texts, split and not steered)
    found = translator.translate_nbest(layouts.sentences, decode, progress, prefixes, terms)
    return layouts.translations(found)


def translate_texts(
    translator: Translator, texts: Sequence[str], *args: Any, **options: Any
) -> list[str]:
    """The best translation of each text, its layout kept; the other arguments are
    translate_texts_nbest's."""
    found = translate_texts_nbest(translator, texts, *args, **options).nbest
    return [hyps[0][0] for hyps in found]
