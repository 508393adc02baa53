"""The batches training consumes: this rank's share of each epoch's token batches, collated
into tensors (pinned where they go to a GPU), the next one made in a background thread
while the current one trains.

An epoch is planned a maxi-batch at a time (Marian's maxi-batches): its sentences are taken
in `MAXI`-sentence groups of randomly ordered `BLOCK`s of the store (or drawn by corpus weight,
`epoch_order`), and each group is batched by length on its own when training reaches it, so
the time and memory of planning do not grow with the corpus. Each group's batches are shared
by the ranks in equal parts, as ranks step together.

The position (epoch, batch) is a part of the training state, and this is the only code that
moves it: a run resumed from a saved position gets the batches the uninterrupted run got.
Batches are padded (`token_batches`, `collate`) or packed into rows of one length
(`packing.pack_rows`, `packing.collate_packed`): `Batches._plan` and `Batches._make` are the
places that choose, by `pack_length`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from .batch import Batch
from .examples import ExampleMaker
from .packing import Rows, collate_packed, pack_rows
from .store import Split
from .tokenizer import PAD, SPECIALS, Specials

MAXI = 1 << 16  # sentences batched together
BLOCK = 1 << 8  # neighbours in the store that an epoch keeps in one maxi-batch


@dataclass
class Position:
    epoch: int = 0
    batch: int = 0  # batches of this epoch already consumed (by this rank)


def epoch_order(split: Split, seed: int, epoch: int) -> tuple[Callable[[int], np.ndarray], int]:
    """The sentences of each maxi-batch of `epoch` (a function of its number) and how many
    there are. Without corpus weights every sentence comes once: maxi-batch m gathers
    MAXI / BLOCK blocks of the store in an order drawn per epoch, O(blocks) memory. With
    weights, corpus i gives round(n * w_i / sum(w)) of the epoch's n sentences (all of its
    sentences in a new order as often as that takes, then a sample), shuffled together."""
    rng = np.random.default_rng([seed, epoch, 2])  # not the streams of the batches
    n = len(split)
    if not any(weight is not None for _, weight in split.corpora):
        blocks = rng.permutation(-(-n // BLOCK))
        per = MAXI // BLOCK

        def blocked(m: int) -> np.ndarray:
            ids = (blocks[m * per : (m + 1) * per, None] * BLOCK + np.arange(BLOCK)).ravel()
            return ids[ids < n]

        return blocked, -(-len(blocks) // per)
    weights = np.array([1.0 if w is None else w for _, w in split.corpora])
    draws = np.round(n * weights / weights.sum()).astype(np.int64)
    start, drawn = 0, []
    for (size, _), count in zip(split.corpora, draws):
        if not size:  # every pair of it filtered out
            continue
        rounds, rest = divmod(int(count), size)
        drawn += [rng.permutation(size) + start for _ in range(rounds)]
        drawn.append(rng.choice(size, rest, replace=False) + start)
        start += size
    ids = rng.permutation(np.concatenate(drawn))
    return (lambda m: ids[m * MAXI : (m + 1) * MAXI]), -(-len(ids) // MAXI)


class _Epoch:
    """One epoch of this rank, planned a maxi-batch at a time as its batches are reached."""

    def __init__(self, split: Split, seed: int, epoch: int) -> None:
        self.split, self.epoch = split, epoch
        self.order, self.maxis = epoch_order(split, seed, epoch)
        self.counts: list[int] = []  # this rank's batches in each maxi-batch planned so far
        # the latest maxi-batches' examples (the split's pairs, or those made of them) and
        # this rank's batches of them
        self.planned: dict[int, tuple[Split, list[Any]]] = {}


class Batches:
    """An endless iterator of this rank's batches from `position`, which it advances."""

    def __init__(
        self,
        split: Split,
        max_tokens: int,
        seed: int,
        position: Position,
        rank: int = 0,
        world: int = 1,
        pin: bool = False,  # non_blocking copies to a GPU are asynchronous only when pinned
        prefetch: bool = True,
        pack_length: int = 0,  # tokens a packed row (`packing.row_length`); 0: padded
        resegment: Callable[[int], Split] | None = None,  # epoch -> its split (BPE-dropout)
        specials: Specials = SPECIALS,  # the model's pad, BOS and EOS ids
        examples: ExampleMaker | None = None,  # None: every example a pair as stored
    ) -> None:
        self.specials, self.examples = specials, examples
        self.split, self.max_tokens, self.seed, self.position = split, max_tokens, seed, position
        self.rank, self.world, self.pin, self.resegment = rank, world, pin, resegment
        self.pack_length, self.rows = pack_length, max_tokens // max(pack_length, 1)
        self._epoch: _Epoch | None = None
        self._lock = threading.Lock()  # the prefetch thread plans too
        self._pool = ThreadPoolExecutor(1, "batches") if prefetch else None
        self._ahead: tuple[tuple[int, int], Future[Batch]] | None = None

    def _of(self, epoch: int) -> _Epoch:
        if self._epoch is None or self._epoch.epoch != epoch:
            split = self.resegment(epoch) if self.resegment else self.split
            self._epoch = _Epoch(split, self.seed, epoch)
        return self._epoch

    def _planned(self, plan: _Epoch, m: int) -> tuple[Split, list[Any]]:
        """The examples of maxi-batch `m` and this rank's batches of them: an equal share of
        them (ranks step together), the rest left for another epoch."""
        if m not in plan.planned:
            split, index = plan.split, plan.order(m)
            if self.examples:
                made = np.random.default_rng([self.seed, plan.epoch, m, 3])
                split = self.examples.make(plan.split, index, made)
                index = np.arange(len(split))
            lengths = split.src.lengths(index), split.tgt.lengths(index)
            plan.split.src.release()  # the offsets read: unmapped (`Sentences.release`)
            plan.split.tgt.release()
            key = int(np.random.SeedSequence([self.seed, plan.epoch, m]).generate_state(1)[0])
            if self.pack_length:
                rows = pack_rows(*lengths, self.pack_length, self.rows, key, 0)
                batches = [Rows(index[r.index], r.row) for r in rows]
            else:
                batches = [index[b] for b in token_batches(*lengths, self.max_tokens, key, 0)]
            share = len(batches) // self.world
            if len(plan.planned) > 2:  # a batch is wanted near the one before it
                del plan.planned[min(plan.planned)]
            plan.planned[m] = split, batches[self.rank * share : (self.rank + 1) * share]
            if m == len(plan.counts):
                plan.counts.append(share)
        return plan.planned[m]

    def _locate(self, epoch: int, index: int) -> tuple[Split, Any] | None:
        """The examples batch `index` (of this rank) of the epoch is of, and the batch; None
        past the epoch's end."""
        with self._lock:
            plan = self._of(epoch)
            for m in range(plan.maxis):
                count = plan.counts[m] if m < len(plan.counts) else len(self._planned(plan, m)[1])
                if index < count:
                    split, batches = self._planned(plan, m)
                    return split, batches[index]
                index -= count
            if not any(plan.counts):
                raise ConfigError(
                    f"train.max_tokens: an epoch's batches cannot be shared by {self.world} "
                    "processes; lower train.max_tokens"
                )
            return None

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Batch:
        """The batch at the position, which then moves on; an epoch ends with its last batch."""
        p = self.position
        here = (p.epoch, p.batch)
        ahead, self._ahead = self._ahead, None
        batch = ahead[1].result() if ahead and ahead[0] == here else self._make(*here)
        p.batch += 1
        if self._locate(p.epoch, p.batch) is None:
            p.epoch, p.batch = p.epoch + 1, 0
        if self._pool:  # made while this one trains; dropped if the position is moved
            self._ahead = (p.epoch, p.batch), self._pool.submit(self._make, p.epoch, p.batch)
        return batch

    def peek(self) -> Batch:
        """The batch at the position, which does not move (for the rehearsal of an update)."""
        return self._make(self.position.epoch, self.position.batch)

    def _make(self, epoch: int, index: int) -> Batch:
        found = self._locate(epoch, index)
        if found is None:
            raise IndexError(f"epoch {epoch} has no batch {index}")
        split, batch = found
        self._locate(epoch, index + 1)  # plans the next maxi-batch here, in the prefetch
        # thread, when this batch is its last: not in `__next__` on the training thread
        if self.pack_length:
            arrays = collate_packed(
                split.src, split.tgt, batch, self.pack_length, self.rows, self.specials
            )
        else:
            arrays = collate(split, batch, self.specials)
        split.src.release()  # a batch's pages read: unmapped (`Sentences.release`)
        split.tgt.release()
        tensors = arrays.map(torch.from_numpy)
        return tensors.map(torch.Tensor.pin_memory) if self.pin else tensors

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(cancel_futures=True)


def token_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
) -> list[np.ndarray]:
    """Sentence indices grouped into batches of at most `max_tokens` padded tokens.

    Sentences are sorted by length (ties broken at random, so buckets differ between
    epochs), packed greedily, and the batches are then shuffled. A batch costs
    sentences x (longest source or target + 1 for EOS/BOS). The order depends only on
    (seed, epoch): resuming rebuilds exactly the same epoch.
    """
    rng = np.random.default_rng([seed, epoch])
    tie = rng.random(len(src_lengths)) if shuffle else np.arange(len(src_lengths))
    order = np.lexsort((tie, src_lengths, tgt_lengths))
    batches, start, longest = [], 0, 0
    cost = np.maximum(src_lengths, tgt_lengths)[order] + 1
    for i, c in enumerate(cost.tolist()):
        longest_if_added = max(longest, c)
        if i > start and (i - start + 1) * longest_if_added > max_tokens:
            batches.append(order[start:i])
            start, longest_if_added = i, c
        longest = longest_if_added
    if start < len(order):
        batches.append(order[start:])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def collate(split: Split, index: np.ndarray, specials: Specials = SPECIALS) -> Batch:
    """The padded batch of sentences `index`: src + EOS, BOS + tgt (decoder input), tgt + EOS
    (labels)."""
    src, tgt = split.src.take(index), split.tgt.take(index)
    pad, bos, eos = specials
    return Batch(
        padded(*src, suffix=eos, pad=pad),
        padded(*tgt, prefix=bos, pad=pad),
        padded(*tgt, suffix=eos, pad=pad),
    )


def pad_batch(
    seqs: Sequence[Sequence[int]],
    prefix: int | None = None,
    suffix: int | None = None,
    pad: int = PAD,
) -> np.ndarray:
    """Sequences as the rows of a `pad`-filled (B, longest + extras) int64 array, each with an
    optional token before (BOS) and after (EOS)."""
    lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))  # (B,)
    return padded(np.concatenate(seqs), lengths, prefix, suffix, pad)


def padded(
    ids: np.ndarray,
    lengths: np.ndarray,
    prefix: int | None = None,
    suffix: int | None = None,
    pad: int = PAD,
) -> np.ndarray:
    """`pad_batch` of sentences given as their ids concatenated and their lengths: one
    scatter, no loop over the rows."""
    start = int(prefix is not None)
    out = np.full((len(lengths), int(lengths.max()) + start + (suffix is not None)), pad, np.int64)
    columns = np.arange(out.shape[1])
    # row-major order of the mask matches the order of the concatenated tokens
    out[(columns >= start) & (columns < start + lengths[:, None])] = ids
    if prefix is not None:
        out[:, 0] = prefix
    if suffix is not None:
        out[np.arange(len(lengths)), start + lengths] = suffix
    return out
