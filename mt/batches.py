"""The batches training consumes: this rank's share of each epoch's token batches, collated
into tensors (pinned where they go to a GPU), the next one made in a background thread
while the current one trains.

The position (epoch, batch) is a part of the training state, and this is the only code that
moves it: a run resumed from a saved position gets the batches the uninterrupted run got.
`collate` is the one place that turns a batch's sentences into arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from .data import Split, collate, token_batches
from .errors import ConfigError

Batch = tuple[torch.Tensor, ...]  # src (B, S), tgt_in (B, T), tgt_out (B, T): int64
Collate = Callable[[Split, np.ndarray], tuple[np.ndarray, ...]]


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
        collate: Collate = collate,
    ) -> None:
        self.split, self.max_tokens, self.seed, self.position = split, max_tokens, seed, position
        self.rank, self.world, self.pin, self.collate = rank, world, pin, collate
        self.src_lengths = np.fromiter(map(len, split.src), np.int64, len(split))
        self.tgt_lengths = np.fromiter(map(len, split.tgt), np.int64, len(split))
        self._epoch: tuple[int, list[np.ndarray]] = (-1, [])
        self._pool = ThreadPoolExecutor(1, "batches") if prefetch else None
        self._ahead: tuple[tuple[int, int], Future[Batch]] | None = None

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches (sentence indices) of `epoch`: an equal share, as ranks step
        together; the same for every (seed, epoch)."""
        cached = self._epoch  # one read: the prefetch thread may replace it meanwhile
        if cached[0] != epoch:
            batches = token_batches(
                self.src_lengths, self.tgt_lengths, self.max_tokens, self.seed, epoch
            )
            per_rank = len(batches) // self.world
            if per_rank == 0:
                raise ConfigError(
                    f"train.max_tokens: {len(batches)} batches an epoch cannot be shared by "
                    f"{self.world} processes; lower train.max_tokens"
                )
            mine = batches[self.rank * per_rank : (self.rank + 1) * per_rank]
            self._epoch = cached = (epoch, mine)
        return cached[1]

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

    def _make(self, epoch: int, index: int) -> Batch:
        arrays = self.collate(self.split, self.epoch_batches(epoch)[index])
        tensors = tuple(torch.from_numpy(a) for a in arrays)
        return tuple(x.pin_memory() for x in tensors) if self.pin else tensors

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(cancel_futures=True)
