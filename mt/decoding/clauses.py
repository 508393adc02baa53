"""How a piece of a cut sentence (mt.decoding.pieces) is put to the model, and its
translation put back: a model trained on sentences translates a piece best when the piece
reads as a sentence, so each is given as one.

- A piece that ends in a clause mark (, ; :) is given without it, and the translation's own
  final stop (. ! ?) becomes that mark again.
- A piece that starts mid-sentence is given with its first letter capitalized, and the
  translation's first word lowercased, unless that word is in the piece as written (a name
  carried over, "Tom") or all capitals ("I", "UN").
- A piece that starts with a connective ("and", "but": a word the training corpus follows a
  comma with yet never starts a sentence with, mt.decoding.trained) is given without it, and
  the translation the corpus gives that word ("y", "pero") is put before its translation:
  the model has hardly seen a sentence that starts with one, and makes one up.

The Tatoeba model translates sentences joined by commas and a last "and" in such pieces
within 2 BLEU of the same sentences one by one (docs/benchmarks.md, issue 43).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

CLAUSE_MARKS = ",;:"
FINAL_STOPS = ".!?"
FIRST_WORD = re.compile(r"^(\W*)(\w+)")
WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Dress:
    """What was changed of a piece to give it to the model, to undo on its translation."""

    mark: str  # the clause mark it ended with ("": none)
    lead: str  # the translation of the connective it started with ("": none)
    mid: bool  # it starts mid-sentence
    words: frozenset[str]  # its words as written

    def restore(self, translation: str) -> str:
        """`translation` as a part of the sentence the piece is of."""
        text = translation.rstrip()
        if not text:  # nothing to put a mark on or lowercase
            return self.lead
        if self.mark:
            text = text[:-1] if text[-1:] in FINAL_STOPS else text
            text += self.mark
        if self.mid and (found := FIRST_WORD.match(text)):
            word, at = found.group(2), found.start(2)
            if word not in self.words and not word.isupper():
                text = text[:at] + word[0].lower() + text[at + 1 :]
        return f"{self.lead} {text}" if self.lead else text


def present(
    piece: str, starts: bool, last: bool, connectives: Mapping[str, str]
) -> tuple[str, Dress]:
    """`piece` as given to the model, and how to restore its translation: `starts`, whether
    it starts a sentence (its text's first piece, or one after a . ! ?); `last`, whether it
    is its text's last; `connectives` (word: translation)."""
    text = piece.strip()
    mark = ""
    if not last and text[-1:] in CLAUSE_MARKS:
        text, mark = text[:-1].rstrip(), text[-1]
    lead = ""
    if not starts:
        word, _, rest = text.partition(" ")
        if rest and word in connectives:
            text, lead = rest.lstrip(), connectives[word]
        if text[:1].islower():
            text = text[0].upper() + text[1:]
    return text, Dress(mark, lead, not starts, frozenset(WORD.findall(piece)))
