"""Sources longer than the model carries, one policy for every caller (the Translator of
either engine, mt score, validation): a source longer than decode.piece_tokens (0: the length
the model carries, mt.decoding.trained; within its positions) is cut into pieces that fit,
each translated alone, and their translations joined with a space, so that the sentence comes
back whole; a pair to score (or to take the loss of) cannot be cut so, and is scored on what
fits of it, which is said.

Where: after every sentence end the source has, else after every ; or :, else after every
comma (a break only where a word follows, so "1,000" is none), and each piece that still
does not fit after its own, and so on; no piece shorter than a third of the limit; what still
does not fit between two words, near an even cut.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from tokenizers import Tokenizer

from ..config import DecodeConfig, ModelConfig
from ..data import tokenizer as tok
from ..errors import ConfigError
from ..model import max_sentence_tokens

T = TypeVar("T")

# the last character of a token that ends a clause, by strength: a break after it
BREAK_STRENGTH = {".": 4, "!": 4, "?": 4, ";": 3, ":": 3, ",": 2}
WORD_START = 1  # a token that starts a word: a break before it
CLAUSE = 2  # the least strength of a break after a clause
SHORTEST_PIECE = 1 / 3  # of a piece's limit: no piece but the last is shorter


def join_nbest(
    parts: Sequence[Sequence[tuple[str, float]]], separators: Sequence[str]
) -> list[tuple[str, float]]:
    """The n-best of a text made of `parts` (each part's n-best, best first), joined with
    `separators` (one fewer than the parts): the k-th joins each part's k-th translation
    (its last where it has fewer), scored by the mean of their scores. The best is thus the
    parts' best joined; an alternative changes the parts that have one."""
    if not parts:
        return [("", float("nan"))]
    out = []
    for k in range(max(len(p) for p in parts)):
        chosen = [p[min(k, len(p) - 1)] for p in parts]
        text = chosen[0][0] + "".join(sep + t for sep, (t, _) in zip(separators, chosen[1:]))
        out.append((text, sum(s for _, s in chosen) / len(chosen)))
    return out


@dataclass
class Pieces:
    """Every text's pieces of token ids (a text that fits is one piece), flat and in order,
    and how many pieces each text has."""

    ids: list[list[int]]
    counts: list[int]

    @property
    def numbers(self) -> list[int]:
        """The number (from 1) of the text each piece is of, for messages about a text."""
        return [k for k, count in enumerate(self.counts, start=1) for _ in range(count)]

    def first(self, values: Sequence[T], rest: T) -> list[T]:
        """One value per piece: each text's on its first piece, `rest` on the others."""
        return [
            v for value, count in zip(values, self.counts) for v in [value, *[rest] * (count - 1)]
        ]

    def joined(self, found: Sequence[list[tuple[str, float]]]) -> list[list[tuple[str, float]]]:
        """The n-best of each text from the n-best of each of its pieces (`found`, as `ids`),
        joined with a space."""
        out, start = [], 0
        for count in self.counts:
            parts = found[start : start + count]
            out.append(parts[0] if count == 1 else join_nbest(parts, [" "] * (count - 1)))
            start += count
        return out


def piece_limit(model: ModelConfig, decode: DecodeConfig) -> int:
    """The most tokens a piece of a source may have: decode.piece_tokens (0: no limit of its
    own) within the model's positions."""
    return min(decode.piece_tokens or math.inf, max_sentence_tokens(model))


def source_pieces(tokenizer: Tokenizer, texts: Sequence[str], limit: int, lead: str = "") -> Pieces:
    """The token ids of each text, cut into pieces where one is longer than `limit`
    (`piece_limit`); the token of language `lead` (decode.target_language), when given,
    first in every piece."""
    leading = lead_ids(tokenizer, lead)
    ids, counts = [], []
    room = limit - len(leading)
    for text_ids in tok.encode(tokenizer, texts):
        cut = (
            [text_ids]
            if len(text_ids) <= room
            else as_sources(
                tokenizer, split_at_breaks(text_ids, room, breaks(tokenizer, text_ids)), room
            )
        )
        ids += [leading + piece for piece in cut]
        counts.append(len(cut))
    return Pieces(ids, counts)


def as_sources(tokenizer: Tokenizer, pieces: list[list[int]], room: int) -> list[list[int]]:
    """Each piece encoded again as a source of its own text starts, without the space that
    led it mid-sentence (as the model saw every training source begin); one that would not
    fit so stays as cut."""
    texts = [text.strip() for text in tok.detokenize(tokenizer, pieces)]
    again = tok.encode(tokenizer, texts)
    return [new if len(new) <= room else old for old, new in zip(pieces, again)]


def lead_ids(tokenizer: Tokenizer, language: str) -> list[int]:
    """What decode.target_language `language` puts before a source: [] for "", else the id
    of its token >>language<< in the source vocabulary, as MarianTokenizer looks a leading
    >>xx<< code up; refused in one line when the vocabulary has no such token."""
    if not language:
        return []
    token = f">>{language}<<"
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ConfigError(
            f"decode.target_language: {language}: the model's source vocabulary has no {token}"
        )
    return [found]


def breaks(tokenizer: Tokenizer, ids: Sequence[int]) -> list[int]:
    """How good a break lies before each position of `ids` (0 at the start): the clause
    punctuation that ends the token before it where a word starts there, else whether a
    word starts there."""
    tokens = tok.detokenize(tokenizer, [[i] for i in ids])
    words = [after[:1].isspace() or tok.starts_word(tokenizer, i) for after, i in zip(tokens, ids)]
    return [0] + [
        (BREAK_STRENGTH.get(before.rstrip()[-1:], 0) or WORD_START) if word else 0
        for before, word in zip(tokens, words[1:])
    ]


def split_at_breaks(ids: Sequence[int], limit: int, strength: Sequence[int]) -> list[list[int]]:
    """`ids` as pieces of at most `limit` tokens (see the module's doc): if they do not fit,
    cut after every clause of the strongest kind they have (sentences, then ; and :, then
    commas), each piece still too long after its own strongest, and so on; then what is still
    too long at its best break points (`strength` of a break before each position)."""
    if len(ids) <= limit:
        return [list(ids)]
    shortest = max(1, int(limit * SHORTEST_PIECE))
    strongest = max(CLAUSE, *strength[1:])
    cuts, start = [], 0
    for p in range(1, len(ids)):
        if strength[p] >= strongest and p - start >= shortest and len(ids) - p >= shortest:
            cuts.append(p)
            start = p
    if not cuts:
        return even_cut(ids, limit, strength)
    spans = zip([0, *cuts], [*cuts, len(ids)])
    return [
        piece
        for begin, end in spans
        for piece in split_at_breaks(ids[begin:end], limit, strength[begin:end])
    ]


def even_cut(ids: Sequence[int], limit: int, strength: Sequence[int]) -> list[list[int]]:
    """`ids` as pieces of at most `limit` tokens, cut at the best break points (`strength`
    of a break before each position); the first pieces at least SHORTEST_PIECE of `limit`."""
    pieces, start = [], 0
    while len(ids) - start > limit:
        left = len(ids) - start
        even = left / math.ceil(left / limit)  # the piece of an even cut
        lowest = start + max(1, int(limit * SHORTEST_PIECE))
        end = max(
            range(lowest, start + limit + 1),
            key=lambda p: (strength[p], -abs(p - start - even)),
        )
        pieces.append(list(ids[start:end]))
        start = end
    return [*pieces, list(ids[start:])]


def fitted_pairs(
    src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], limit: int
) -> tuple[Sequence[Sequence[int]], Sequence[Sequence[int]], list[int]]:
    """Pairs to score whole (teacher forcing cannot join pieces): each side cut to `limit`
    tokens, and the indices of the pairs that were, whose score is then not exact (the
    sides as given where none was)."""
    cut_ones = [i for i, (s, t) in enumerate(zip(src_ids, tgt_ids)) if max(len(s), len(t)) > limit]
    if not cut_ones:
        return src_ids, tgt_ids, []
    return [s[:limit] for s in src_ids], [t[:limit] for t in tgt_ids], cut_ones


def not_exact(cut_ones: Sequence[int], limit: int) -> str:
    """The one line that says which pairs were scored on what fits of them, and why."""
    numbers = ", ".join(str(i + 1) for i in cut_ones[:5]) + (", ..." if len(cut_ones) > 5 else "")
    return (
        f"warning: {len(cut_ones)} pair(s) ({numbers}) longer than the {limit} tokens the "
        "model's positions hold on a side: scored on their first tokens, not exactly"
    )
