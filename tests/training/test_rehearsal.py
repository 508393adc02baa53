"""The rehearsed first update: compiled or not, it leaves no trace; a compiler that fails
leaves a warning and an uncompiled step; the largest batch that fits, from measurements."""

import pytest
import torch

from helpers.models import packed_batches, packed_corpus, packed_model, packed_tensors
from mt.errors import DoesNotFit
from mt.training.loss import smoothed_loss
from mt.training.rehearsal import Rehearsal, compiles, fitting_rows, on_every_rank, rehearse


def test_compiled_by_default_on_cuda_with_packed_batches_only():
    assert compiles("auto", "cuda", packed=True)
    assert not compiles("auto", "cuda", packed=False)  # a new shape every batch: recompiles
    assert not compiles("auto", "cpu", packed=True)
    assert compiles(True, "cpu", packed=False) and not compiles(False, "cuda", packed=True)


def test_a_failing_compiler_leaves_a_warning_and_an_uncompiled_step(monkeypatch):
    model = packed_model(dropout=0.3)  # draws from the generator: the rehearsal must give back
    batch = packed_tensors(packed_batches(packed_corpus())[0])

    def forward(b):
        return smoothed_loss(model(b.src, b.tgt_in, b.packed), b.labels, 0.1)

    def broken(gm, inputs):
        raise RuntimeError("no C++ compiler on this machine")

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=broken))
    said = []
    before = torch.get_rng_state()
    rehearsal = rehearse(forward, batch, model, True, 48, said.append)
    assert rehearsal.forward is forward and not rehearsal.compiled
    assert len(said) == 1 and said[0].startswith("warning: compiling the training step failed")
    assert "no C++ compiler on this machine" in said[0] and "\n" not in said[0]
    assert all(p.grad is None for p in model.parameters())  # no trace of the rehearsal
    assert torch.equal(torch.get_rng_state(), before)


def test_the_largest_batch_that_fits_is_on_the_line_through_two_measurements():
    # 1 GiB fixed (weights, workspace) and 10 MiB a row; 3 GiB of budget: 204 rows
    gib, mib = 2**30, 2**20
    measured = [(128, gib + 128 * 10 * mib), (64, gib + 64 * 10 * mib)]
    assert fitting_rows(measured, 3 * gib, rows=256) == 204
    assert fitting_rows(measured, 100 * gib, rows=256) == 255  # 256 did not fit
    assert fitting_rows(measured[1:], 3 * gib, rows=256) == 64  # one point: what fitted
    assert fitting_rows([], 3 * gib, rows=256) == 0


def test_one_process_raises_its_own_rehearsal_failure_as_it_is():
    def too_big():
        raise DoesNotFit("train.max_tokens: a batch of 48 tokens does not fit this GPU")

    with pytest.raises(DoesNotFit, match=r"^train\.max_tokens: a batch of 48 tokens"):
        on_every_rank(too_big, world=1)
    done = Rehearsal(forward=print, compiled=False, seconds=0.0, peak_bytes=0)
    assert on_every_rank(lambda: done, world=1) is done


def test_a_block_mask_that_fails_leaves_a_warning_and_dense_masks(monkeypatch):
    """FlexAttention's block masks, where they cannot be made (injected here: FlexAttention
    allowed on the CPU, and create_block_mask raising), cost the run its compiled step, not
    the run: it trains uncompiled, by dense masks, and says so in one line."""
    import mt.packed_attention

    model = packed_model()
    batch = packed_tensors(packed_batches(packed_corpus())[0])

    def forward(b):
        return smoothed_loss(model(b.src, b.tgt_in, b.packed), b.labels, 0.1)

    def broken(*args, **kwargs):
        raise RuntimeError("injected: no block mask")

    monkeypatch.setattr(mt.packed_attention, "flex_refusal", lambda *args, **kwargs: "")
    monkeypatch.setattr(mt.packed_attention, "create_block_mask", broken)
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend="eager"))
    said = []
    rehearsal = rehearse(forward, batch, model, True, 48, said.append)
    assert rehearsal.forward is forward and not rehearsal.compiled
    assert len(said) == 1 and "injected: no block mask" in said[0] and "\n" not in said[0]
    assert all(p.grad is None for p in model.parameters())
