"""The batch source: exact resume from a saved position, sharding over ranks, prefetch."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mt.batches import Batches, Position, token_batches
from mt.store import Split


def split(n: int = 300, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, (2, n))
    return Split(*([rng.integers(4, 100, k) for k in side] for side in lengths))


def take(batches: Batches, n: int) -> list[tuple[torch.Tensor, ...]]:
    return [next(batches) for _ in range(n)]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(torch.equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b)
    )


def test_a_position_saved_mid_epoch_resumes_with_the_same_batches():
    data = split()
    per_epoch = len(Batches(data, 200, 7, Position()).epoch_batches(0))
    going = Batches(data, 200, 7, Position())
    take(going, per_epoch // 2)  # mid-epoch
    saved = dataclasses.replace(going.position)
    expected = take(going, per_epoch)  # into the next epoch
    resumed = Batches(data, 200, 7, saved)
    assert same(take(resumed, per_epoch), expected)
    assert resumed.position == going.position
    assert going.position.epoch == 1 and 0 < going.position.batch < per_epoch


def test_two_ranks_share_an_epoch_each_batch_once_in_equal_parts():
    data = split()
    for epoch in (0, 1):
        everything = token_batches(
            *(np.array([len(x) for x in side]) for side in (data.src, data.tgt)), 200, 7, epoch
        )
        shares = [Batches(data, 200, 7, Position(), r, 2).epoch_batches(epoch) for r in (0, 1)]
        assert len(shares[0]) == len(shares[1]) == len(everything) // 2  # ranks step together
        flat = [b.tolist() for share in shares for b in share]
        assert flat == [b.tolist() for b in everything[: 2 * len(shares[0])]]  # each once
        assert shares[0][0].tolist() != shares[1][0].tolist()


def test_prefetch_yields_the_batches_of_no_prefetch_and_follows_a_moved_position():
    data = split()
    per_epoch = len(Batches(data, 200, 7, Position()).epoch_batches(0))
    ahead = Batches(data, 200, 7, Position(), prefetch=True)
    plain = Batches(data, 200, 7, Position(), prefetch=False)
    assert same(take(ahead, per_epoch + 3), take(plain, per_epoch + 3))
    ahead.position.batch = plain.position.batch = 0  # what was made ahead is not used
    assert same(take(ahead, 2), take(plain, 2))
    ahead.close()
