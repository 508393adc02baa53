"""Training examples made from the store's pairs as training reaches them, so that the model
is taught the text it will be given, not short single sentences only:

- **Joined pairs** (train.join): that share of the examples are 2 to train.join_most pairs of
  the epoch's order joined into one, within data.max_length tokens a side, as writers join
  sentences: one after another ("I'm tired. It's late."), or (train.join_clauses of the
  junctions, where both sentences end in a full stop) as clauses, with a comma or semicolon
  and a conjunction (mt.data.joins) and the next sentence's first word lowercased unless it
  is a name ("I'm tired, but it's late." / "Estoy cansado, pero es tarde."); train.join_pieces
  of those joined at a comma or semicolon given as one of their pieces, as decoding cuts a
  sentence too long for the model (mt.decoding.pieces): "I'm tired," / "Estoy cansado,", or
  "but it's late." / "pero es tarde.".
- **Sentences as they go on inside another** (train.lowered_starts): that share of the pairs
  starts with its first word lowercased on both sides unless it is a name, as a clause after
  a junction and a piece of a cut sentence start ("the cat sleeps." / "el gato duerme."), so
  that the model learns sentences, not only their capitalised openings.
- **Placeholders** (train.placeholders, with tokenizer.placeholders reserved): in that share
  of the pairs whose two sides hold the same span (a number, a URL, ... mt.data.spans, or a
  name: mt.data.sides), each such span is replaced on both sides by one placeholder token,
  numbered at random among those reserved, so that the model learns to carry any of them
  over where its source has it.

Examples are made a maxi-batch at a time (mt.data.batches) from its pairs and a generator
seeded by the run's seed, the epoch and the maxi-batch, so a resumed run makes the same ones.
Only the junctions, the lowered first words and the masked pairs are decoded and encoded; the
rest of every pair keeps its ids (BPE-dropout's too). Each pair is in one example an epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from ..config import Config
from . import tokenizer as tok
from .corpus import corpus_tags
from .directions import lead_tokens
from .joins import Join, clause_joins
from .sides import WORD, Pairs, Side
from .spans import masked, spans
from .store import Sentences, Split
from .store import spans as spans_of


@dataclass
class Settings:
    """What train.* and data.* say of the examples (see the module's doc)."""

    join: float
    most: int
    clauses: float
    placeholders: float
    longest: int  # tokens a side at most (data.max_length)
    pieces: float = 0.0  # of the examples with a clause to cut after (train.join_pieces)
    lowered: float = 0.0  # of the pairs, their first word lowercased (train.lowered_starts)

    @classmethod
    def of(cls, config: Config) -> Settings | None:
        """The settings of `config`; None where every example is a pair as stored."""
        t = config.train
        masking = t.placeholders if config.tokenizer.placeholders else 0.0
        if not (t.join or masking or t.lowered_starts):
            return None
        return cls(
            t.join,
            t.join_most,
            t.join_clauses,
            masking,
            config.data.max_length,
            t.join_pieces,
            t.lowered_starts,
        )


@dataclass
class Masked:
    """A pair's texts (without leading tokens) and its shared spans on each side: the k-th
    span of each holds the same text."""

    texts: tuple[str, str]
    spans: tuple[list[tuple[int, int]], list[tuple[int, int]]]


class ExampleMaker:
    """Makes a maxi-batch's examples from its pairs (`make`), for the training split of
    `config` whose tokenizers are given."""

    def __init__(
        self, settings: Settings, split: Split, tokenizers: Sequence[Tokenizer], config: Config
    ) -> None:
        self.settings, self.tokenizers = settings, tokenizers
        self.sides = [
            Side(t, s.inside_counts(), k)
            for k, (t, s) in enumerate(zip(tokenizers, (split.src, split.tgt)))
        ]
        data, source = config.data, tokenizers[0]
        self.leading = {source.token_to_id(t) for t in corpus_tags(data) + lead_tokens(data)}
        self.leading.discard(None)
        # the languages of a pair by the token that leads its source (None: one direction)
        languages = (data.src_lang, data.tgt_lang)
        into = dict(zip(lead_tokens(data), [languages, languages[::-1]]))
        self.joins: dict[int, list[Join]] = {-1: clause_joins(*languages)}
        self.joins.update({source.token_to_id(t): clause_joins(*p) for t, p in into.items()})
        # where each junction's share of the draws ends, the last's left out: a draw in [0, 1)
        # falls after as many of them as the junction it draws
        self.bounds = {d: np.cumsum([j.share for j in js])[:-1] for d, js in self.joins.items()}
        self.placeholders = config.tokenizer.placeholders
        # tokens a junction may add to a side, at most: its words, and a lowercased word's
        # tokens more than its capitalised one's
        said = [j.words[k] for joins in self.joins.values() for j in joins for k in (0, 1)]
        self.junction = max(map(len, self.sides[0].going_on(said)), default=0) + 2

    def make(self, split: Split, index: np.ndarray, rng: np.random.Generator) -> Split:
        """The examples of the pairs `index` of `split`, in a new order, held in memory."""
        pairs = Pairs(split, index, self.leading, set(self.joins) - {-1})
        masked_pairs = self._masked(pairs, rng)
        self._lowered(pairs, masked_pairs, rng)
        order = rng.permutation(len(pairs))
        groups = [order[pairs.direction[order] == d] for d in np.unique(pairs.direction)]
        examples = [e for group in groups for e in self._grouped(group.tolist(), pairs, rng)]
        self._number(examples, masked_pairs, pairs, rng)
        return self._joined(examples, pairs, rng)

    def _grouped(self, members: list[int], pairs: Pairs, rng) -> list[list[int]]:
        """`members` (pairs of one direction, in order) as examples: a share joined, each of
        2 to `most` pairs while they fit `longest` tokens a side."""
        s = self.settings
        joined = (rng.random(len(members)) < s.join).tolist()
        sizes = rng.integers(2, s.most + 1, len(members)).tolist()
        src_lengths, tgt_lengths = ((e - b).tolist() for b, e in zip(pairs.start, pairs.end))
        examples, at = [], 0
        while at < len(members):
            first = members[at]
            example, src, tgt = [first], src_lengths[first], tgt_lengths[first]
            size = sizes[at] if joined[at] else 1
            at += 1
            while len(example) < size and at < len(members):
                i = members[at]
                src, tgt = (
                    src + src_lengths[i] + self.junction,
                    tgt + tgt_lengths[i] + self.junction,
                )
                if max(src, tgt) > s.longest:
                    break
                example.append(i)
                at += 1
            examples.append(example)
        return examples

    def _masked(self, pairs: Pairs, rng: np.random.Generator) -> dict[int, Masked]:
        """The pairs whose shared spans become placeholders: a share of those with any."""
        share = self.settings.placeholders
        if not share:
            return {}
        notable = [pairs.holds(k, side.notable) for k, side in enumerate(self.sides)]
        chosen = np.flatnonzero(notable[0] & notable[1] & (rng.random(len(pairs)) < share))
        texts = [
            tok.detokenize(t, [pairs.ids(i, k)[pairs.lead[i] if k == 0 else 0 :] for i in chosen])
            for k, t in enumerate(self.tokenizers)
        ]
        found = {}
        for i, src, tgt in zip(chosen.tolist(), *texts):
            each = [_spans(text, side) for text, side in zip((src, tgt), self.sides)]
            words = [[text[a:b] for a, b in found] for text, found in zip((src, tgt), each)]
            once = [w for w in words[0] if words[0].count(w) == 1 and words[1].count(w) == 1]
            if once:
                shared = [[f[w.index(x)] for x in once] for f, w in zip(each, words)]
                found[i] = Masked((src, tgt), (shared[0], shared[1]))
        return found

    def _lowered(self, pairs: Pairs, masked_pairs: dict[int, Masked], rng) -> None:
        """A share of the pairs (none masked) with their first word as said mid-sentence on
        both sides: each side's first chunk lowered and encoded again, the rest of its ids
        (BPE-dropout's too) kept."""
        share = self.settings.lowered
        if not share:
            return
        drawn = np.flatnonzero(rng.random(len(pairs)) < share)
        chosen = np.array([i for i in drawn.tolist() if i not in masked_pairs], np.int64)
        if not len(chosen):
            return
        for k, side in enumerate(self.sides):
            flat, start, end = pairs.flat(k), pairs.start[k][chosen], pairs.end[k][chosen]
            begin = start + (pairs.lead[chosen] if k == 0 else 0)
            cut = side.first_chunks(flat, begin, end)
            chunks = tok.detokenize(side.tokenizer, [flat[b : b + c] for b, c in zip(begin, cut)])
            heads = side.encoded(side.lowered(chunks, np.ones(len(chosen), bool)))
            rows = [
                np.concatenate((flat[a:b], head, flat[b + c : e]))
                for a, b, c, e, head in zip(start, begin, cut, end, heads)
            ]
            pairs.replace(k, chosen, rows)

    def _number(
        self, examples: list[list[int]], masked_pairs: dict[int, Masked], pairs: Pairs, rng
    ) -> None:
        """Each masked pair's ids put in `pairs` in place of its own: its spans placeholders
        numbered at random, distinct within its example (spans past the placeholders
        reserved stay as they are)."""
        texts: list[list[str]] = [[], []]
        done = []
        for example in examples:
            here = [i for i in example if i in masked_pairs]
            drawn = (rng.permutation(self.placeholders) + 1).tolist() if here else []
            for i in here:
                m = masked_pairs[i]
                numbers, drawn = drawn[: len(m.spans[0])], drawn[len(m.spans[0]) :]
                for k in (0, 1):
                    texts[k].append(masked(m.texts[k], m.spans[k][: len(numbers)], numbers))
                done.append(i)
        if not done:
            return
        done = np.array(done)
        leads = [pairs.ids(i, 0)[: pairs.lead[i]] for i in done]
        for k, side in enumerate(self.sides):
            rows = side.encoded(texts[k])
            if k == 0:  # the source's tags and direction kept
                rows = [np.concatenate((lead, row)) for lead, row in zip(leads, rows)]
            pairs.replace(k, done, rows)

    def _joined(self, examples: list[list[int]], pairs: Pairs, rng) -> Split:
        """The examples as a split: each its pairs one after another, a junction a sentence's
        or (train.join_clauses of them, where both sides end in a full stop) a clause's."""
        members = np.fromiter((i for e in examples for i in e), np.int64)
        sizes = np.fromiter(map(len, examples), np.int64, len(examples))
        first = np.zeros(len(members), bool)
        first[np.cumsum(sizes) - sizes] = True
        after = members[~first]  # the pair after each junction
        before = members[np.flatnonzero(~first) - 1]
        # each pair after a junction: where it begins (its tags are the example's first's)
        # and its first chunk, which the junction says again
        begin = [pairs.start[0][after] + pairs.lead[after], pairs.start[1][after]]
        cut = [
            side.first_chunks(pairs.flat(k), begin[k], pairs.end[k][after])
            for k, side in enumerate(self.sides)
        ]
        # a clause takes the full stop off the pair before it, which must be its own
        stops = np.ones(len(after), bool)
        led = ~first[np.flatnonzero(~first) - 1]  # the pair before is after a junction too
        for k, side in enumerate(self.sides):
            ends = pairs.flat(k)[np.maximum(pairs.end[k][before] - 1, 0)]
            stops &= (ends == side.stop) & (pairs.end[k][before] > pairs.start[k][before])
            whole = cut[k] >= pairs.end[k][after] - begin[k]  # all of it is in its head
            stops[led] &= ~whole[np.flatnonzero(led) - 1]
        clause = stops & (rng.random(len(after)) < self.settings.clauses)
        directions, drawn = pairs.direction[after], rng.random(len(after))
        choice = np.zeros(len(after), np.int64)
        for d, bounds in self.bounds.items():
            here = directions == d
            choice[here] = np.searchsorted(bounds, drawn[here], side="right")
        joins = [
            self.joins[d][c] if is_clause and self.joins[d] else None
            for is_clause, c, d in zip(clause.tolist(), choice.tolist(), directions.tolist())
        ]
        clause = np.array([j is not None for j in joins], bool)
        heads = [
            side.heads(pairs.flat(k), begin[k], cut[k], joins) for k, side in enumerate(self.sides)
        ]
        ends, starts = self._pieces(sizes, np.minimum(heads[0][2], heads[1][2]), rng)
        # segments: each pair after its junction's head, less the first chunk the head says
        # again, and less its full stop where a clause follows
        at = np.arange(len(members)) + np.cumsum(~first)  # each pair's segment
        head_at = at[~first] - 1  # each junction's
        example_of = np.repeat(np.arange(len(examples)), sizes + sizes - 1)
        count = len(members) + len(after)
        # a piece keeps its example's segments from the head it starts at to the one it ends at
        last = np.cumsum(sizes + sizes - 1) - 1
        lowest, highest = last - (sizes + sizes - 2), last.copy()
        junction_example = example_of[head_at]
        lowest[junction_example[starts]] = head_at[starts]
        highest[junction_example[ends]] = head_at[ends]
        segment = np.arange(count)
        kept = (segment >= lowest[example_of]) & (segment <= highest[example_of])
        out = []
        for k, side in enumerate(self.sides):
            ids, lengths, marks = heads[k]
            head_start = pairs.add(k, ids, lengths)
            start = pairs.start[k][members].copy()
            start[~first] = begin[k] + cut[k]
            end = pairs.end[k][members].copy()
            end[np.flatnonzero(~first) - 1] -= clause
            seg_start = np.empty(count, np.int64)
            seg_end = np.empty_like(seg_start)
            seg_start[at], seg_end[at] = start, end
            seg_start[head_at], seg_end[head_at] = head_start, head_start + lengths
            seg_end[head_at[ends]] = head_start[ends] + marks[ends]  # the comma that ends it
            if len(starts):  # its head as the piece starts, after the tags its source has
                leads = self._starting(k, pairs, members, sizes, junction_example[starts])
                said, said_lengths, _ = side.heads(
                    pairs.flat(k),
                    begin[k][starts],
                    cut[k][starts],
                    [joins[j] for j in starts],
                    [True] * len(starts),
                )
                rows = [
                    np.concatenate((lead, row))
                    for lead, row in zip(leads, np.split(said, np.cumsum(said_lengths)[:-1]))
                ]
                row_lengths = np.fromiter(map(len, rows), np.int64, len(rows))
                seg_start[head_at[starts]] = pairs.add(k, np.concatenate(rows), row_lengths)
                seg_end[head_at[starts]] = seg_start[head_at[starts]] + row_lengths
            seg_end[~kept] = seg_start[~kept]
            flat = pairs.flat(k)
            seg_lengths = seg_end - seg_start
            tokens = np.bincount(example_of, seg_lengths, len(examples)).astype(np.int64)
            out.append(
                Sentences(
                    flat[spans_of(seg_start, seg_lengths)],
                    np.concatenate(([0], np.cumsum(tokens))),
                )
            )
        return Split(*out)

    def _pieces(
        self, sizes: np.ndarray, marks: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """The examples given as one of their pieces (train.join_pieces of those with a
        junction to cut after, `marks` > 0): the junctions whose head ends a piece, and those
        whose head starts one, each at most one an example, in order."""
        share = self.settings.pieces
        none = np.zeros(0, np.int64)
        cuttable = np.flatnonzero(marks > 0)
        if not share or not len(cuttable):
            return none, none
        example = np.repeat(np.arange(len(sizes)), sizes - 1)[cuttable]
        candidates = np.unique(example)
        chosen = candidates[rng.random(len(candidates)) < share]
        low = np.searchsorted(example, chosen, "left")
        high = np.searchsorted(example, chosen, "right")
        piece = rng.integers(0, high - low + 1)  # which of the example's pieces
        ends = cuttable[(low + piece)[piece < high - low]]
        starts = cuttable[(low + piece - 1)[piece > 0]]
        return ends, starts

    def _starting(
        self, side: int, pairs: Pairs, members: np.ndarray, sizes: np.ndarray, examples: np.ndarray
    ) -> list[np.ndarray]:
        """What leads a piece that starts mid-example: on the source side the tags of its
        example's first pair (its corpus, its direction), else nothing."""
        firsts = members[(np.cumsum(sizes) - sizes)[examples]]
        if side:
            return [np.zeros(0, np.int32)] * len(firsts)
        return [pairs.ids(i, 0)[: pairs.lead[i]] for i in firsts]


def _spans(text: str, side: Side) -> list[tuple[int, int]]:
    """A side's spans to carry over: those of mt.data.spans and its names, in order, none
    overlapping ("I" is no name: it is not a word both languages write)."""
    found = spans(text)
    taken = np.zeros(len(text) + 1, bool)
    for a, b in found:
        taken[a:b] = True
    words = [w for w in WORD.finditer(text) if not taken[w.start()] and w.group() != "I"]
    names = [w.span() for w, name in zip(words, side.are_names([w.group() for w in words])) if name]
    return sorted(found + names)
