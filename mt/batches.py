"""The batches training consumes: this rank's share of each epoch's token batches, collated
into tensors (pinned where they go to a GPU), the next one made in a background thread
while the current one trains.

The position (epoch, batch) is a part of the training state, and this is the only code that
moves it: a run resumed from a saved position gets the batches the uninterrupted run got.
Batches are padded (`data.token_batches`, `data.collate`) or packed into rows of one length
(`packing.pack_rows`, `packing.collate_packed`): `Batches._make` is the one place that
chooses, by `pack_length`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .data import Split, collate, token_batches
from .errors import ConfigError
from .packing import Flat, collate_packed, each, pack_rows

Batch = tuple[torch.Tensor, ...]  # src (B, S), tgt_in (B, T), tgt_out (B, T): int64, padded;
# packed, a PackedBatch: those three and where each row's sentences lie, all (rows, length)


@dataclass
class Position:
    epoch: int = 0
    batch: int = 0  # batches of this epoch already consumed (by this rank)


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
    ) -> None:
        self.max_tokens, self.seed, self.position = max_tokens, seed, position
        self.rank, self.world, self.pin, self.resegment = rank, world, pin, resegment
        self.pack_length, self.rows = pack_length, max_tokens // max(pack_length, 1)
        self._epoch: tuple[int, Any, list[np.ndarray]] = (-1, None, [])
        self._fixed = None if resegment else self._gathered(split)  # the same every epoch
        self._pool = ThreadPoolExecutor(1, "batches") if prefetch else None
        self._ahead: tuple[tuple[int, int], Future[Batch]] | None = None

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches (sentence indices) of `epoch`: an equal share, as ranks step
        together; the same for every (seed, epoch)."""
        return self._epoch_of(epoch)[2]

    def _epoch_of(self, epoch: int) -> tuple[int, Any, list[np.ndarray]]:
        """`epoch`, what its batches gather from (its split, segmented anew each epoch with
        BPE-dropout; flat arrays when packed) and this rank's batches of it."""
        cached = self._epoch  # one read: the prefetch thread may replace it meanwhile
        if cached[0] != epoch:
            source, lengths = self._fixed or self._gathered(self.resegment(epoch))
            if self.pack_length:
                batches = pack_rows(*lengths, self.pack_length, self.rows, self.seed, epoch)
            else:
                batches = token_batches(*lengths, self.max_tokens, self.seed, epoch)
            per_rank = len(batches) // self.world
            if per_rank == 0:
                raise ConfigError(
                    f"train.max_tokens: {len(batches)} batches an epoch cannot be shared by "
                    f"{self.world} processes; lower train.max_tokens"
                )
            mine = batches[self.rank * per_rank : (self.rank + 1) * per_rank]
            self._epoch = cached = (epoch, source, mine)
        return cached

    def _gathered(self, split: Split) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
        """What batches of `split` gather from (flat arrays when packed), and its lengths."""
        sides = split.src, split.tgt
        lengths = tuple(np.fromiter(map(len, side), np.int64, len(split)) for side in sides)
        return (tuple(map(Flat.of, sides)) if self.pack_length else split), lengths

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Batch:
        """The batch at the position, which then moves on; an epoch ends with its last batch."""
        p = self.position
        here = (p.epoch, p.batch)
        ahead, self._ahead = self._ahead, None
        batch = ahead[1].result() if ahead and ahead[0] == here else self._make(*here)
        p.batch += 1
        if p.batch == len(self.epoch_batches(p.epoch)):
            p.epoch, p.batch = p.epoch + 1, 0
        if self._pool:  # made while this one trains; dropped if the position is moved
            self._ahead = (p.epoch, p.batch), self._pool.submit(self._make, p.epoch, p.batch)
        return batch

    def peek(self) -> Batch:
        """The batch at the position, which does not move (for the rehearsal of an update)."""
        return self._make(self.position.epoch, self.position.batch)

    def _make(self, epoch: int, index: int) -> Batch:
        _, source, batches = self._epoch_of(epoch)
        if self.pack_length:
            arrays = collate_packed(*source, batches[index], self.pack_length, self.rows)
        else:
            arrays = collate(source, batches[index])
        tensors = each(torch.from_numpy, arrays)
        return each(torch.Tensor.pin_memory, tensors) if self.pin else tensors

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(cancel_futures=True)
