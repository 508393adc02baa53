"""The batch source: exact resume from a saved position, sharding over ranks, prefetch."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import torch

from helpers.corpus import epoch_plan
from mt.data import batches
from mt.data.batches import Batches, Position, collate, pad_batch
from mt.data.store import Split, SplitWriter, open_split
from mt.data.tokenizer import BOS, EOS


def split(n: int = 300, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, (2, n))
    return Split(*([rng.integers(4, 100, k) for k in side] for side in lengths))


def take(batches: Batches, n: int) -> list[tuple[torch.Tensor, ...]]:
    """The next `n` batches, each as its tensors: src, tgt_in, labels and any packing."""
    return [(*batch[:3], *(batch.packed or ())) for batch in (next(batches) for _ in range(n))]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(torch.equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b)
    )


def test_a_position_saved_mid_epoch_resumes_with_the_same_batches():
    data = split()
    per_epoch = len(epoch_plan(Batches(data, 200, 7, Position()), 0))
    going = Batches(data, 200, 7, Position())
    take(going, per_epoch // 2)  # mid-epoch
    saved = dataclasses.replace(going.position)
    expected = take(going, per_epoch)  # into the next epoch
    resumed = Batches(data, 200, 7, saved)
    assert same(take(resumed, per_epoch), expected)
    assert resumed.position == going.position
    assert going.position.epoch == 1 and 0 < going.position.batch < per_epoch


def test_two_ranks_share_an_epoch_each_batch_once_in_equal_parts(monkeypatch):
    monkeypatch.setattr(batches, "MAXI", 1024)  # several maxi-batches, each shared on its own
    monkeypatch.setattr(batches, "BLOCK", 64)
    data = split(5000)
    for epoch in (0, 1):
        alone = epoch_plan(Batches(data, 200, 7, Position()), epoch)
        shares = [epoch_plan(Batches(data, 200, 7, Position(), r, 2), epoch) for r in (0, 1)]
        assert len(shares[0]) == len(shares[1]) >= len(alone) // 2 - 5  # ranks step together
        flat = np.concatenate([b for share in shares for b in share])
        assert len(set(flat.tolist())) == len(flat)  # each sentence once: each batch once
        assert {tuple(b) for share in shares for b in share} <= {tuple(b) for b in alone}
        assert len(flat) >= 0.95 * len(data)  # only a maxi-batch's odd batch is left over
        assert shares[0][0].tolist() != shares[1][0].tolist()


def test_an_epoch_is_every_sentence_once_and_batches_stay_within_budget(monkeypatch):
    monkeypatch.setattr(batches, "MAXI", 1024)
    monkeypatch.setattr(batches, "BLOCK", 64)
    data = split(5000)
    lengths = np.maximum(data.src.lengths(), data.tgt.lengths()) + 1
    for epoch in (0, 1):
        planned = epoch_plan(Batches(data, 200, 7, Position()), epoch)
        assert sorted(np.concatenate(planned).tolist()) == list(range(len(data)))
        assert all(len(b) * lengths[b].max() <= 200 for b in planned)
    assert planned[0].tolist() != epoch_plan(Batches(data, 200, 7, Position()), 0)[0].tolist()


def test_corpus_weights_draw_their_share_of_each_epoch(monkeypatch):
    monkeypatch.setattr(batches, "MAXI", 4096)
    data = split(8000)
    data.corpora = [(6000, 1.0), (2000, 3.0)]  # 1:3 against their sizes (3:1)
    for epoch in (0, 1):
        taken = np.concatenate(epoch_plan(Batches(data, 200, 7, Position()), epoch))
        second = np.count_nonzero(taken >= 6000)
        assert abs(second / len(taken) - 0.75) < 0.02
        assert len(np.unique(taken[taken < 6000])) == np.count_nonzero(taken < 6000)  # a sample
        assert len(np.unique(taken[taken >= 6000])) == 2000  # every pair of the small one


def test_a_store_on_disk_resumes_mid_epoch_with_the_same_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(batches, "MAXI", 512)
    monkeypatch.setattr(batches, "BLOCK", 32)
    data = split(3000)
    writer = SplitWriter(tmp_path, "train", np.dtype(np.uint16))
    writer.append(
        {s: (side.ids, side.lengths()) for s, side in zip(("src", "tgt"), (data.src, data.tgt))}
    )
    stored = open_split(tmp_path, "train", writer.close())
    assert isinstance(stored.src.ids, np.ndarray) and stored.src.ids.dtype == np.uint16
    assert all(np.array_equal(a, b) for a, b in zip(stored.tgt, data.tgt))  # a round trip
    per_epoch = len(epoch_plan(Batches(stored, 200, 7, Position()), 0))
    going = Batches(stored, 200, 7, Position())
    expected = Batches(data, 200, 7, Position(), prefetch=False)
    take(going, per_epoch // 2 + 1)  # mid-epoch, a few maxi-batches in
    saved = dataclasses.replace(going.position)
    assert same(take(Batches(stored, 200, 7, saved), per_epoch), take(going, per_epoch))
    assert same(
        take(expected, per_epoch + 3), take(Batches(stored, 200, 7, Position()), per_epoch + 3)
    )
    assert going.position.epoch == 1 and 0 < going.position.batch < per_epoch


def test_prefetch_yields_the_batches_of_no_prefetch_and_follows_a_moved_position():
    data = split()
    per_epoch = len(epoch_plan(Batches(data, 200, 7, Position()), 0))
    ahead = Batches(data, 200, 7, Position(), prefetch=True)
    plain = Batches(data, 200, 7, Position(), prefetch=False)
    assert same(take(ahead, per_epoch + 3), take(plain, per_epoch + 3))
    ahead.position.batch = plain.position.batch = 0  # what was made ahead is not used
    assert same(take(ahead, 2), take(plain, 2))
    ahead.close()


def test_the_next_maxi_batch_is_planned_in_the_prefetch_thread(monkeypatch):
    # planning a maxi-batch takes 30-100 ms at 65,536 sentences: the training thread waits
    # for it if it plans there
    monkeypatch.setattr(batches, "MAXI", 64)
    monkeypatch.setattr(batches, "BLOCK", 16)
    planned_in, plan = [], batches.token_batches
    monkeypatch.setattr(
        batches,
        "token_batches",
        lambda *a: planned_in.append(threading.current_thread().name) or plan(*a),
    )
    ahead = Batches(split(), 200, 7, Position())
    take(ahead, 40)  # past 4 maxi-batches of 64 sentences
    ahead.close()
    assert len(planned_in) >= 5
    assert all(name.startswith("batches") for name in planned_in[1:])  # all but the first


def test_collate_gathers_from_flat_arrays_what_padding_each_sentence_gives():
    """collate takes a batch's sentences from the store's flat arrays in one indexing; the
    arrays equal those of padding each sentence alone, in the batch's order."""
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 100, rng.integers(1, 9)) for _ in range(50)]
    tgt = [rng.integers(4, 100, rng.integers(1, 9)) for _ in range(50)]
    split = Split(src, tgt)
    for _ in range(20):
        index = rng.permutation(50)[: rng.integers(1, 20)]
        wanted = (
            pad_batch([src[i] for i in index], suffix=EOS),
            pad_batch([tgt[i] for i in index], prefix=BOS),
            pad_batch([tgt[i] for i in index], suffix=EOS),
        )
        for got, want in zip(collate(split, index), wanted):
            np.testing.assert_array_equal(got, want)
