"""Which language a text is in: py3langid's naive Bayes model (shipped inside its package:
nothing is downloaded), asked to choose among the languages the caller knows, with its
confidence; and the language filter of `mt prepare` (data.filter_language).

A text is identified sentence by sentence (cut after . ! ? and at line breaks): a language's
confidence for the text is its confidence for each sentence weighted by the sentence's length,
so a text of two languages is given the one most of its characters are in, with a confidence
that says how much. A text with nothing to go by (a name, a number) gets every candidate at
the same confidence, and the first candidate wins the tie. Choosing among a pair's two
languages, rather than among all of py3langid's, is what makes short sentences reliable
(docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from ..config import DataConfig
from ..errors import ConfigError, MtError
from .scan import source_key

# a side identified as the other language with at least this confidence is dropped by
# data.filter_language (and a text sent to the server with source auto is returned as it is):
# on the Tatoeba train file 0.8 drops 14 of 107,675 clean pairs and 99.1% of Spanish sources
CONFIDENT = 0.8
KEPT, WRONG_LANGUAGE, COPY = range(3)  # what the filter says of a pair
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


TAG = re.compile(r"^<\w+> ")  # a training corpus's tag before each source (data.files.train)


def _model():
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise MtError(
            "language identification needs py3langid: pip install 'mt[language]'"
        ) from None
    return LanguageIdentifier, MODEL_FILE


@functools.cache
def identifier(languages: tuple[str, ...]) -> Identifier:
    """The identifier of these languages, loaded once a process (2 s: the model unpacks)."""
    return Identifier(languages)


class Identifier:
    """Ranks texts among `languages` (ISO 639-1 codes), confidences that sum to 1."""

    def __init__(self, languages: tuple[str, ...]) -> None:
        model, model_file = _model()
        self.model = model.from_model_file(model_file, norm_probs=True)
        unknown = [code for code in languages if code not in self.model.labels]
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a language the identifier knows")
        self.model.set_languages(list(languages))
        self.languages = languages

    def rank(self, text: str) -> list[tuple[str, float]]:
        """(language, confidence) best first; a tie keeps the order of `languages`."""
        parts = [part for part in SENTENCE_END.split(text) if part.strip()] or [text]
        total = dict.fromkeys(self.languages, 0.0)
        for part in parts:
            for code, confidence in self.model.rank(part):
                total[code] += confidence * max(len(part), 1)
        size = sum(max(len(part), 1) for part in parts)
        return sorted(((code, c / size) for code, c in total.items()), key=lambda f: -f[1])

    def best(self, texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Each text's language and its confidence."""
        ranked = [self.rank(text)[0] for text in texts]
        return [code for code, _ in ranked], np.array([c for _, c in ranked], np.float64)


def filter_languages(data: DataConfig) -> tuple[str, str] | None:
    """The languages data.filter_language tells apart (their identifier loaded, so that forked
    workers share it), or None when it is off."""
    if not data.filter_language:
        return None
    try:
        identifier((data.src_lang, data.tgt_lang))
    except ConfigError as e:
        raise ConfigError(f"data.filter_language: {e}") from None
    return data.src_lang, data.tgt_lang


def filter_pairs(src: Sequence[str], tgt: Sequence[str], languages: tuple[str, str]):
    """data.filter_language on normalised pairs: per pair KEPT, COPY (the target is the source,
    case and spacing aside) or WRONG_LANGUAGE (a side identified as the other language with
    CONFIDENT confidence or more)."""
    ident = identifier(languages)
    src = [TAG.sub("", text, count=1) for text in src]  # a corpus's tag is not its text
    verdict = np.full(len(src), KEPT, np.uint8)
    for texts, want in zip((src, tgt), languages):
        found, confidence = ident.best(texts)
        wrong = np.array([code != want for code in found], bool) & (confidence >= CONFIDENT)
        verdict[wrong] = WRONG_LANGUAGE
    copy = [source_key(s) == source_key(t) for s, t in zip(src, tgt)]
    verdict[np.array(copy, bool)] = COPY
    return verdict
