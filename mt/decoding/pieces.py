"""Inputs longer than the model can carry, one policy for every caller (mt translate, mt
serve, validation, mt score, both engines): a source longer than decode.piece_tokens (0: the
length the model carries, mt.decoding.trained; within the model's positions) is cut into
pieces that fit, each translated as a sentence (mt.decoding.clauses), and their translations
joined with a space, so that the sentence comes back whole; a pair to score (or to take the
loss of) cannot be cut so, and is scored on what fits of it, which is said.

Where: a source that does not fit is cut after every clause of the strongest kind it has
(after . ! ?, else ; or :, else a comma; before a word), and each piece that still does not fit
after its own, and so on; any source before a connective after a clause ("..., and"); no piece
shorter than a third of the limit; what still does not fit between two words, near an even
cut. The Tatoeba model translates sentences joined by commas so within 2 BLEU of the same
sentences one by one; in pieces cut only where needed, 15 to 17 below (docs/benchmarks.md,
issue 43).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tokenizers import Tokenizer

from ..config import DecodeConfig, ModelConfig
from ..data import tokenizer as tok
from ..errors import ConfigError
from ..model import max_sentence_tokens
from .clauses import FINAL_STOPS, Dress, present

T = TypeVar("T")

# the last character of a token that ends a clause, by strength: a break after it
BREAK_STRENGTH = {".": 4, "!": 4, "?": 4, ";": 3, ":": 3, ",": 2}
WORD_START = 1  # a token that starts a word (byte-level "Ġ", a space): a break before it
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
    dress: list[Dress | None]  # how each piece was given to the model (None: a whole text)

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
        """The n-best of each text from the n-best of each of its pieces (`found`, as `ids`):
        each piece's translations restored (mt.decoding.clauses) and joined with a space."""
        out, start = [], 0
        for count in self.counts:
            parts = [
                [(dress.restore(text) if dress else text, score) for text, score in hyps]
                for hyps, dress in zip(found[start : start + count], self.dress[start:])
            ]
            out.append(parts[0] if count == 1 else join_nbest(parts, [" "] * (count - 1)))
            start += count
        return out


def piece_limit(model: ModelConfig, decode: DecodeConfig) -> int:
    """The most tokens a piece of a source may have: decode.piece_tokens (0: no limit of its
    own) within the model's positions."""
    return min(decode.piece_tokens or math.inf, max_sentence_tokens(model))


def source_pieces(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    limit: int,
    lead: str = "",
    connectives: Mapping[str, str] | None = None,
) -> Pieces:
    """The token ids of each text, cut into pieces where one is longer than `limit`
    (`piece_limit`) or has a clause led by one of `connectives` (word: its translation,
    mt.decoding.trained), each piece given as a sentence (mt.decoding.clauses); the token of
    language `lead` (decode.target_language), when given, first in every piece."""
    connectives = connectives or {}
    led_by = connective_pattern(connectives)
    leading = lead_ids(tokenizer, lead)
    ids, counts, dress = [], [], []
    room = limit - len(leading)
    for text, text_ids in zip(texts, tok.encode(tokenizer, texts)):
        # nearly always one piece: no break points to look for
        if len(text_ids) <= room and not (led_by and led_by.search(text)):
            ids.append(leading + text_ids)
            counts.append(1)
            dress.append(None)
            continue
        strength, connective = breaks(tokenizer, text_ids, connectives)
        cut = split_at_breaks(text_ids, room, strength, connective)
        texts_cut = tok.detokenize(tokenizer, cut)
        starts = [True] + [before.rstrip()[-1:] in FINAL_STOPS for before in texts_cut]
        given = [
            present(piece, start, k == len(cut) - 1, connectives)
            for k, (piece, start) in enumerate(zip(texts_cut, starts))
        ]
        encoded = tok.encode(tokenizer, [text for text, _ in given])
        for piece, presented, (_, how) in zip(cut, encoded, given):
            fits = 0 < len(presented) <= room  # a capital may take a token more
            ids.append(leading + (presented if fits else piece))
            dress.append(how if fits else None)
        counts.append(len(cut))
    return Pieces(ids, counts, dress)


def connective_pattern(connectives: Mapping[str, str]) -> re.Pattern | None:
    """What finds a clause led by a connective in a text (None: there are none)."""
    if not connectives:
        return None
    marks = "".join(m for m, strength in BREAK_STRENGTH.items() if strength >= CLAUSE)
    words = "|".join(re.escape(w) for w in sorted(connectives))
    return re.compile(rf"[{re.escape(marks)}]\s+(?:{words})\s")


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


def breaks(
    tokenizer: Tokenizer, ids: Sequence[int], connectives: Mapping[str, str]
) -> tuple[list[int], list[bool]]:
    """How good a break lies before each position of `ids` (0 at the start): the clause
    punctuation that ends the token before it where a word starts there, else whether a
    word starts there; and whether a connective's clause starts there."""
    tokens = tok.detokenize(tokenizer, [[i] for i in ids])
    words = [after[:1].isspace() or tok.starts_word(tokenizer, i) for after, i in zip(tokens, ids)]
    words.append(True)  # the end, as a word after the last token
    strength = [0] + [
        (BREAK_STRENGTH.get(before.rstrip()[-1:], 0) or WORD_START) if word else 0
        for before, word in zip(tokens, words[1:-1])
    ]
    connective = [
        strength[p] >= CLAUSE and words[p + 1] and tokens[p].strip() in connectives
        for p in range(len(ids))
    ]
    return strength, connective


def split_at_breaks(
    ids: Sequence[int], limit: int, strength: Sequence[int], connective: Sequence[bool]
) -> list[list[int]]:
    """`ids` as pieces of at most `limit` tokens (see the module's doc): if they do not fit,
    cut after every clause of the strongest kind they have (sentences, then ; and :, then
    commas), each piece still too long after its own strongest, and so on; before every
    `connective` clause; then what is still too long at its best break points (`strength` of a
    break before each position)."""
    shortest = max(1, int(limit * SHORTEST_PIECE))
    strongest = max(CLAUSE, *strength[1:]) if len(ids) > limit else math.inf
    cuts, start = [], 0
    for p in range(1, len(ids)):
        clause = connective[p] or strength[p] >= strongest
        if clause and p - start >= shortest and len(ids) - p >= shortest:
            cuts.append(p)
            start = p
    if not cuts:
        return even_cut(ids, limit, strength)
    spans = zip([0, *cuts], [*cuts, len(ids)])
    return [
        piece
        for begin, end in spans
        for piece in split_at_breaks(
            ids[begin:end], limit, strength[begin:end], connective[begin:end]
        )
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
