"""Documents as blocks of pieces: a block is one text to translate (a paragraph, a subtitle)
made of the pieces its markup cuts it into (an HTML element's text nodes, a .docx paragraph's
text elements), and its translation is cut back into as many pieces, so that the markup around
each piece stays where it was and the document's structure is unchanged by construction.

A block is translated whole, never piece by piece (LibreTranslate #806: "I went to <b>Paris</b>
last summer." as three translations). Where each piece's translation falls in the block's is
found by anchors: each piece is translated alone too, in the same call, and looked for in the
block's translation as a whole word sequence, in order; a piece kept as it is (`<code>`) is
looked for as itself. The pieces between two anchors share the text between them in
proportion to their source lengths, cut at word starts. The tags thus keep their order: a
target language that reorders a phrase moves the words, never the tags.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Translate = Callable[[list[str]], list[str]]  # texts in, their translations out, in order
END_PUNCTUATION = ".!?…;:,。"


@dataclass
class Block:
    """One text to translate, as the pieces its markup cuts it into; `kept` pieces (code,
    whitespace between tags) come back as they are."""

    pieces: list[str]
    kept: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.kept |= {i for i, piece in enumerate(self.pieces) if not piece.strip()}

    @property
    def source(self) -> str:
        """What the model reads: the pieces joined, whitespace runs made one space."""
        return " ".join("".join(self.pieces).split())

    def hints(self) -> list[int]:
        """The pieces translated alone to anchor them (none for a block of one piece)."""
        moving = [i for i in range(len(self.pieces)) if i not in self.kept]
        return moving if len(moving) > 1 else []


@dataclass
class Document:
    """A read document: its blocks, and how to write it with each block's pieces replaced."""

    blocks: list[Block]
    write: Callable[[list[list[str]]], bytes]
    unit: str = "block"  # what a block is called in an error: line, paragraph, cue

    @property
    def units(self) -> list[str]:
        """The texts a person reads, one a block with text (limits count these)."""
        return [block.source for block in self.blocks if block.source]

    def requests(self) -> list[str]:
        """Every text to translate: each block's source, then the pieces that anchor it."""
        blocks = [b for b in self.blocks if b.source]
        hints = [" ".join(b.pieces[i].split()) for b in blocks for i in b.hints()]
        return [b.source for b in blocks] + hints

    def render(self, translations: Sequence[str]) -> bytes:
        """The document written with `translations` (one for each of `requests()`)."""
        blocks = [b for b in self.blocks if b.source]
        whole, hints = iter(translations[: len(blocks)]), iter(translations[len(blocks) :])
        out = []
        for block in self.blocks:
            if not block.source:
                out.append(list(block.pieces))
                continue
            found = {i: next(hints) for i in block.hints()}
            out.append(cut(block, next(whole), found))
        return self.write(out)


def translate_documents(documents: Sequence[Document], translate: Translate) -> list[bytes]:
    """Each document translated, all their texts in one call of `translate`."""
    requests = [doc.requests() for doc in documents]
    found = translate([text for texts in requests for text in texts]) if any(requests) else []
    out, start = [], 0
    for doc, texts in zip(documents, requests):
        out.append(doc.render(found[start : start + len(texts)]))
        start += len(texts)
    return out


def cut(block: Block, translation: str, hints: dict[int, str]) -> list[str]:
    """`translation` of the block cut into its pieces, each with its source's spacing at its
    edges; kept pieces as they were."""
    pieces, n = block.pieces, len(block.pieces)
    cuts: list[int | None] = [0, *([None] * (n - 1)), len(translation)]
    inside = [0 < j < n and _joined(pieces[j - 1], pieces[j]) for j in range(n + 1)]
    cursor, anchored = 0, set()
    for i, piece in enumerate(pieces):
        kept = i in block.kept
        anchor = " ".join((piece if kept else hints.get(i, "")).split())
        anchor = anchor if kept else anchor.rstrip(END_PUNCTUATION)
        if not anchor:
            continue
        # whole words, unless the source's tag cuts a word there too
        before, after = ("" if inside[j] else b for j, b in ((i, r"(?<!\w)"), (i + 1, r"(?!\w)")))
        pattern = before + re.escape(anchor) + after
        if not kept and piece.rstrip()[-1:] in END_PUNCTUATION:  # its punctuation goes along
            pattern += rf"[{re.escape(END_PUNCTUATION)}]*"
        match = re.compile(pattern, re.IGNORECASE).search(translation, cursor)
        if match:
            anchored.add(i)
            if cuts[i] is None or cuts[i] < cursor:
                cuts[i] = match.start()
            cursor = match.end()
            if i + 1 < n:  # the last piece ends where the translation does
                cuts[i + 1] = cursor
    weights = [0 if i in block.kept else len(" ".join(p.split())) for i, p in enumerate(pieces)]
    _fill(cuts, weights, inside, translation)
    for i in sorted(block.kept - anchored):  # what fell to a kept piece goes to its neighbour
        if i + 1 < n:
            cuts[i + 1] = cuts[i]
        else:
            cuts[i] = cuts[i + 1]
    out = []
    for i, piece in enumerate(pieces):
        if i in block.kept:
            out.append(piece)
            continue
        part = translation[cuts[i] : cuts[i + 1]].strip()
        lead, trail = _spacing(piece)
        if part[:1] in set(END_PUNCTUATION):  # no space before a comma or a full stop
            lead = ""
        out.append(lead + part + trail if part else lead or trail)
    return out


def _joined(before: str, after: str) -> bool:
    """Whether a tag between two pieces sits inside a word (`<b>x</b>y`)."""
    return bool(before) and bool(after) and not (before[-1].isspace() or after[0].isspace())


def _fill(cuts: list[int | None], weights: list[int], inside: list[bool], text: str) -> None:
    """The unknown cuts between two known ones, in proportion to the weights of the pieces
    between them, each moved to the nearest word start (never before the cut before it)
    unless the source cuts inside a word there too."""
    known = [i for i, c in enumerate(cuts) if c is not None]
    breaks = [p + 1 for p, c in enumerate(text) if c.isspace()]  # where a word may start
    solid = [p for p, c in enumerate(text) if not c.isspace()]
    for a, b in itertools.pairwise(known):
        low, high = cuts[a], cuts[b]
        words = text[low:high]
        first, last = low + len(words) - len(words.lstrip()), low + len(words.rstrip())
        total, before = sum(weights[a:b]) or 1, 0
        for j in range(a + 1, b):
            before += weights[j - 1]  # the weights of the pieces a to j - 1
            at = first + (last - first) * before / total
            if inside[j]:
                cuts[j] = min(max(round(at), cuts[j - 1]), high)
            else:
                cuts[j] = _word_start(breaks, solid, at, cuts[j - 1], high, weights[j - 1] > 0)


def _word_start(
    breaks: list[int], solid: list[int], at: float, low: int, high: int, word: bool
) -> int:
    """The position nearest `at` in [low, high] where a word starts (after a space: one of
    `breaks`) or an end of the range; with `word`, one that leaves a word to the piece before
    it (a non-space character: one of `solid`) if one before `high` does (a bold word gets a
    word, not an empty <b></b>). Both lists in order, searched by bisection: a block may
    have thousands of pieces, and a scan of the range for each was quadratic."""

    def near(lo: int, hi: int) -> list[int]:  # the breaks in [lo, hi] either side of `at`
        first, last = bisect.bisect_left(breaks, lo), bisect.bisect_right(breaks, hi)
        i = bisect.bisect_left(breaks, at, first, last)
        return breaks[max(i - 1, first) : min(i + 1, last)]

    def nearest(found: list[int]) -> int:
        return min(found, key=lambda p: (abs(p - at), p))

    start = bisect.bisect_left(solid, low)  # the range's first non-space character
    if word and start < len(solid) and solid[start] < high:  # high too: the rest to it
        return nearest([high, *near(solid[start] + 1, high - 1)])
    return nearest([low, high, *near(low, high)])


def _spacing(piece: str) -> tuple[str, str]:
    """A piece's leading and trailing whitespace."""
    stripped = piece.strip()
    if not stripped:
        return piece, ""
    start = piece.index(stripped)
    return piece[:start], piece[start + len(stripped) :]
