"""One side of the token store as training examples (mt.data.examples) need it, and the
pairs of a maxi-batch held for them: which tokens start a word, which may be of a name or a
span, the junctions' heads as each side says them, and the buffers that take the new ids.

A name is a capitalised word that the corpus's side writes so more often than lowercased
inside a sentence ("Tom", "Boston"; not "The" or "No"): the counts of its two tokens there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from . import tokenizer as tok
from .joins import Join
from .store import Split
from .store import spans as spans_of

WORD = re.compile(r"[^\W\d_]+")  # a word of letters
SPAN_CHARACTERS = frozenset("0123456789@{}%`/:$⦅")  # a token with one may be of a span


class Side:
    """One side of the store as examples need it: which tokens start a word, which may be of
    a name or a span, and sentences' first words said mid-sentence."""

    MEMO = 1 << 18  # junction heads remembered; past that the memo starts again

    def __init__(self, tokenizer: Tokenizer, counts: np.ndarray, index: int) -> None:
        self.tokenizer, self.index = tokenizer, index  # 0: the source side, 1: the target
        self.said: dict[tuple[Join | None, bytes, bool], tuple[np.ndarray, int]] = {}
        self.encoder = tok.PieceEncoder(tokenizer)
        self.names: dict[str, bool] = {}
        size = max(tokenizer.get_vocab_size(), len(counts))
        self.counts = np.zeros(size, np.int64)
        self.counts[: len(counts)] = counts
        texts = tok.detokenize(tokenizer, [[i] for i in range(size)])
        self.starts_word = np.array([tok.starts_word(tokenizer, i) for i in range(size)])
        self.stop = tokenizer.token_to_id(".")
        name = np.array(self.are_names([t.strip() for t in texts]))
        spanned = np.array([not SPAN_CHARACTERS.isdisjoint(t) for t in texts])
        self.notable = name | spanned  # a token of a name or of a span: worth a look

    def are_names(self, words: Sequence[str]) -> list[bool]:
        """Whether each word is a name: capitalised, and written so more often than
        lowercased inside a sentence here (a word that takes more than a token is not)."""
        new = [w for w in dict.fromkeys(words) if w not in self.names]
        capitals = [w for w in new if w[:1].isupper() and w.isalpha()]
        self.names.update(dict.fromkeys(new, False))
        if capitals:
            ids, lengths = self.encoder.encode([f" {c}" for w in capitals for c in (w, w.lower())])
            single = lengths == 1
            starts = np.cumsum(lengths) - lengths
            first = self.counts[ids[np.minimum(starts, len(ids) - 1)]]
            for k, word in enumerate(capitals):
                upper, lower = 2 * k, 2 * k + 1
                lowered = first[lower] if single[lower] else 0
                self.names[word] = bool(single[upper] and first[upper] > lowered)
        return [self.names[w] for w in words]

    def encoded(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The ids of `texts` (normalised text: words one space apart)."""
        ids, lengths = self.encoder.encode(texts)
        return np.split(ids.astype(np.int64), np.cumsum(lengths)[:-1]) if len(texts) else []

    def going_on(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The ids of `texts` as they go on a sentence (`tok.encode_going_on`)."""
        return [np.array(row, np.int64) for row in tok.encode_going_on(self.tokenizer, texts)]

    def first_chunks(self, flat: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
        """For each row flat[begin:end], its tokens before the first that starts a word after
        its first: its first word with what is glued to it ("¿Qué", "I'm"); all of a row of
        one word."""
        lengths = end - begin
        if not len(lengths):
            return lengths
        at = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        later = np.where(self.starts_word[flat[spans_of(begin, lengths)]] & (at >= 1), at, 1 << 30)
        starts = np.cumsum(lengths) - lengths
        firsts = np.minimum.reduceat(later, np.minimum(starts, len(later) - 1)) if len(later) else 0
        return np.where(lengths > 0, np.minimum(firsts, lengths), 0)

    def heads(
        self,
        flat: np.ndarray,
        begin: np.ndarray,
        cut: np.ndarray,
        joins: list[Join | None],
        starting: Sequence[bool] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ids of each junction's head (one after another), their lengths, and how many
        of a head's first tokens are the punctuation a long sentence is cut after (0: none):
        the junction (a space, or `joins`' as this side says it) and the first chunk of the
        sentence after it (flat[begin:begin + cut]), lowered after a clause; where `starting`
        says, as it starts a piece of the cut sentence (Join.cut). Remembered, as first
        words and junctions repeat."""
        starting = starting if starting is not None else [False] * len(joins)
        keys = [
            (j, flat[b : b + c].tobytes(), s) for b, c, j, s in zip(begin, cut, joins, starting)
        ]
        new = [key for key in dict.fromkeys(keys) if key not in self.said]
        if len(self.said) + len(new) > self.MEMO:
            self.said.clear()
            new = list(dict.fromkeys(keys))
        if new:
            chunks = tok.detokenize(
                self.tokenizer, [np.frombuffer(c, flat.dtype) for _, c, _ in new]
            )
            clauses = [j for j, _, _ in new]
            words = self.lowered(chunks, np.array([j is not None for j in clauses], bool))
            cuts = [j.cut(self.index, w) if j else ("", "") for j, w in zip(clauses, words)]
            texts = [
                (f"{after} {w}".strip() if start else f"{j.said(self.index, w)} {w}")
                if j
                else " " + c
                for c, w, j, (_, after), (_, _, start) in zip(chunks, words, clauses, cuts, new)
            ]
            # a junction's head goes on the sentence before it; a piece's starts one
            starting = iter(self.encoded([t for t, key in zip(texts, new) if key[2]]))
            going_on = iter(self.going_on([t for t, key in zip(texts, new) if not key[2]]))
            rows = [next(starting) if key[2] else next(going_on) for key in new]
            marks = self.going_on([mark for mark, _ in cuts])
            for key, row, mark in zip(new, rows, marks):
                cuttable = len(mark) and np.array_equal(row[: len(mark)], mark)
                self.said[key] = (row, len(mark) if cuttable and not key[2] else 0)
        rows, marks = zip(*(self.said[key] for key in keys)) if keys else ((), ())
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        ids = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return ids, lengths, np.fromiter(marks, np.int64, len(marks))

    def lowered(self, chunks: Sequence[str], where: np.ndarray) -> list[str]:
        """Sentences' first words as said mid-sentence (those `where` marks): lowercased
        unless a name or "I"."""
        words = [
            (found.group() if (found := WORD.search(c)) else "") if mark else ""
            for c, mark in zip(chunks, where.tolist())
        ]
        out = []
        for chunk, word, name in zip(chunks, words, self.are_names(words)):
            if not word or name or word == "I":
                out.append(chunk)
                continue
            at = chunk.index(word)
            out.append(chunk[:at] + word[0].lower() + chunk[at + 1 :])
        return out


class Pairs:
    """The pairs of a maxi-batch, each side's ids in one buffer that takes more (a masked
    pair's, junctions'): pair i is buffer[start[i]:end[i]]; how many reserved tokens lead
    each source (corpus tags, a direction's token) and the direction's token (-1: none)."""

    def __init__(self, split: Split, index: np.ndarray, leading: set[int], directions: set) -> None:
        self.buffer, self.start, self.end = [], [], []
        for side in (split.src, split.tgt):
            ids, lengths = side.take(index)
            self.buffer.append([ids.astype(np.int32)])
            self.end.append(np.cumsum(lengths))
            self.start.append(self.end[-1] - lengths)
        self.size = [len(b[0]) for b in self.buffer]
        self.lead = np.zeros(len(index), np.int64)
        self.direction = np.full(len(index), -1, np.int64)
        src, lengths = self.buffer[0][0], self.end[0] - self.start[0]
        for depth in range(len(leading)):  # tags, then the direction's token
            here = (self.lead == depth) & (lengths > depth)
            token = np.where(here, src[np.minimum(self.start[0] + depth, len(src) - 1)], -1)
            self.lead += here & np.isin(token, list(leading))
            self.direction = np.where(np.isin(token, list(directions)), token, self.direction)

    def __len__(self) -> int:
        return len(self.lead)

    def ids(self, i: int, side: int) -> np.ndarray:
        return self.flat(side)[self.start[side][i] : self.end[side][i]]

    def flat(self, side: int) -> np.ndarray:
        """The side's buffer as one array."""
        if len(self.buffer[side]) > 1:
            self.buffer[side] = [np.concatenate(self.buffer[side])]
        return self.buffer[side][0]

    def add(self, side: int, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Puts sequences (`ids` one after another, of `lengths`) in the side's buffer; where
        each starts."""
        starts = self.size[side] + np.cumsum(lengths) - lengths
        self.buffer[side].append(ids.astype(np.int32))
        self.size[side] += len(ids)
        return starts

    def replace(self, side: int, chosen: np.ndarray, rows: Sequence[np.ndarray]) -> None:
        """The pairs `chosen` given `rows` as their `side`'s ids."""
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        self.start[side][chosen] = self.add(side, np.concatenate(rows), lengths)
        self.end[side][chosen] = self.start[side][chosen] + lengths

    def holds(self, side: int, tokens: np.ndarray) -> np.ndarray:
        """Whether each pair's `side` holds a token that `tokens` (by id) marks."""
        marked = np.concatenate(([0], np.cumsum(tokens[self.flat(side)])))
        return marked[self.end[side]] > marked[self.start[side]]
