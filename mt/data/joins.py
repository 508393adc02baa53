"""How writers join two sentences into one, in English and Spanish: the clause junctions that
training examples are joined with (mt.data.examples), each said in both languages.

Broad on purpose, so that the model learns clauses and not a few words: coordinating and
subordinating conjunctions with and without a comma, and semicolons alone or with a linking
adverb, each kind drawn its own share of the junctions. Spanish says "y" as "e" before a word
that starts with the sound i (but not "hie-", "hia-": "y hielo"), and "o" as "u" before the
sound o.
"""

from __future__ import annotations

from dataclasses import dataclass

# (English, Spanish): what comes between the first sentence (its full stop taken off) and
# the second (its first word as said mid-sentence), by kind
CONJUNCTIONS = (
    (", and", ", y"),
    (" and", " y"),
    (", but", ", pero"),
    (" but", " pero"),
    (", or", ", o"),
    (", so", ", así que"),
    (", because", ", porque"),
    (" because", " porque"),
    (", although", ", aunque"),
    (", while", ", mientras que"),
    (", and then", ", y luego"),
    (", since", ", ya que"),
    (", and yet", ", y sin embargo"),
    (", but still", ", pero aun así"),
    (", or rather", ", o mejor dicho"),
    (", whereas", ", mientras que"),
)
SEMICOLONS = ((";", ";"),)
LINKING_ADVERBS = (
    ("; however,", "; sin embargo,"),
    ("; therefore,", "; por lo tanto,"),
    ("; besides,", "; además,"),
    ("; nevertheless,", "; no obstante,"),
    ("; otherwise,", "; si no,"),
    ("; meanwhile,", "; mientras tanto,"),
    ("; then,", "; entonces,"),
    ("; still,", "; aun así,"),
    ("; indeed,", "; en efecto,"),
    ("; for example,", "; por ejemplo,"),
    ("; as a result,", "; como resultado,"),
    ("; fortunately,", "; por suerte,"),
    ("; unfortunately,", "; por desgracia,"),
    ("; at least,", "; al menos,"),
    ("; above all,", "; sobre todo,"),
    ("; by the way,", "; por cierto,"),
    ("; honestly,", "; sinceramente,"),
)
# each kind's share of the clause junctions, whatever the number of its entries: a model of the
# CPU recipe learns each linking adverb only from being shown it, and a longer list of them
# must not take the semicolon's and the conjunctions' draws (docs/benchmarks.md, "Real text")
KINDS = ((CONJUNCTIONS, 12 / 16), (SEMICOLONS, 1 / 16), (LINKING_ADVERBS, 3 / 16))
CLAUSES = tuple(pair for kind, _ in KINDS for pair in kind)
LANGUAGES = ("en", "es")


@dataclass(frozen=True)
class Join:
    """One junction as each side of a pair says it; `languages` those of the sides."""

    words: tuple[str, str]
    languages: tuple[str, str]
    share: float  # of the clause junctions drawn

    def cut(self, side: int, word: str) -> tuple[str, str]:
        """The junction before `word` as a long sentence is cut in it (mt.decoding.pieces):
        the punctuation that ends the clause before, and what starts the piece after, its
        space off; ("", the junction) where it has no comma or semicolon to cut after."""
        junction = self.said(side, word)
        if junction[:1] not in (",", ";"):
            return "", junction
        return junction[0], junction[1:].strip()

    def said(self, side: int, word: str) -> str:
        """The junction on `side`, before `word`: Spanish "y" and "o" as that word asks."""
        junction = self.words[side]
        if self.languages[side] != "es":
            return junction
        head, space, last = junction.rpartition(" ")
        return head + space + spanish_conjunction(last, word)


def spanish_conjunction(conjunction: str, word: str) -> str:
    """ "y" or "o" as said before `word`: "e" before the sound i, "u" before the sound o."""
    w = word.lower().lstrip("¿¡\"«'(")
    sound_i = w[:1] in ("i", "í") or (w[:2] in ("hi", "hí") and w[2:3] not in ("a", "e", "o", "u"))
    sound_o = w[:1] in ("o", "ó") or w[:2] in ("ho", "hó")
    if conjunction == "y" and sound_i:
        return "e"
    if conjunction == "o" and sound_o:
        return "u"
    return conjunction


def clause_joins(src_lang: str, tgt_lang: str) -> list[Join]:
    """The junctions of a pair from `src_lang` into `tgt_lang`; none for other languages."""
    if {src_lang, tgt_lang} != set(LANGUAGES):
        return []
    order = (0, 1) if src_lang == LANGUAGES[0] else (1, 0)
    return [
        Join((pair[order[0]], pair[order[1]]), (src_lang, tgt_lang), share / len(kind))
        for kind, share in KINDS
        for pair in kind
    ]
