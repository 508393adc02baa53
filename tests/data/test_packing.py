"""Packed rows: every pair once, laid out where it belongs, and a model that computes on them
what it computes on the same sentences padded, without attention across sentences and
without a recompile from one batch to the next."""

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounter

import mt.model
from helpers.models import (
    PACKED_LENGTH,
    PACKED_ROWS,
    packed_batches,
    packed_corpus,
    packed_model,
    packed_tensors,
)
from mt.config import Config
from mt.config_checks import check_config
from mt.config_file import apply_override
from mt.data.batches import collate
from mt.data.packing import collate_packed, pack_rows, row_length
from mt.data.tokenizer import BOS, EOS, PAD
from mt.errors import ConfigError
from mt.training.loss import smoothed_loss


def test_every_pair_is_packed_once_in_rows_that_hold_it():
    split = packed_corpus(200)
    src, tgt = split.src, split.tgt
    plans = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed=1, epoch=0)
    seen = np.concatenate([plan.index for plan in plans])
    assert sorted(seen) == list(range(200))
    for plan in plans:
        assert (
            plan.row.min() >= 0 and plan.row.max() < PACKED_ROWS and (np.diff(plan.row) >= 0).all()
        )
        for cost in (src.lengths(), tgt.lengths()):  # a sentence and its EOS/BOS, on either side
            assert np.bincount(plan.row, cost[plan.index] + 1).max() <= PACKED_LENGTH
    again = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed=1, epoch=0)
    assert all((a.index == b.index).all() for a, b in zip(plans, again))  # a resume's epoch
    other = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed=1, epoch=1)
    assert not (np.concatenate([p.index for p in other]) == seen).all()


def test_a_packed_row_holds_each_sentence_with_its_own_positions_and_id():
    split = packed_corpus()
    src, tgt = split.src, split.tgt
    plan = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed=1, epoch=0)[0]
    batch = collate_packed(src, tgt, plan, PACKED_LENGTH, PACKED_ROWS)
    assert all(a.shape == (PACKED_ROWS, PACKED_LENGTH) for a in (*batch[:3], *batch.packed))
    for r in range(PACKED_ROWS):
        pairs = plan.index[plan.row == r]
        expected = {
            "src": [[*split.src[i], EOS] for i in pairs],
            "tgt_in": [[BOS, *split.tgt[i]] for i in pairs],
            "labels": [[*split.tgt[i], EOS] for i in pairs],
        }
        for name, sentences in expected.items():
            flat = [t for s in sentences for t in s]
            row = getattr(batch, name)[r]
            assert row[: len(flat)].tolist() == flat and (row[len(flat) :] == PAD).all()
            side = "src" if name == "src" else "tgt"
            doc = [j for j, s in enumerate(sentences) for _ in s] + [-1] * (
                PACKED_LENGTH - len(flat)
            )
            pos = [p for s in sentences for p in range(len(s))] + [0] * (PACKED_LENGTH - len(flat))
            assert getattr(batch.packed, f"{side}_doc")[r].tolist() == doc
            assert getattr(batch.packed, f"{side}_pos")[r].tolist() == pos


def test_rows_too_short_for_the_longest_sentences_are_refused():
    config = Config()
    config.data.max_length = 200
    apply_override(config, "train.pack_length=128")
    with pytest.raises(ConfigError, match=r"train\.pack_length: 128 is below data\.max_length"):
        check_config(config, "base.yaml", check_files=False)
    with pytest.raises(ConfigError, match=r"train\.pack_length: sentence pair 1 needs 20"):
        pack_rows(np.array([3, 19]), np.array([4, 2]), 16, 2, 0, 0)
    config.train.pack_length, config.train.max_tokens = 256, 200
    with pytest.raises(ConfigError, match=r"train\.max_tokens: 200 is less than one packed row"):
        row_length(config, "cuda")
    assert row_length(config, "cpu") == 0  # auto: padded batches off CUDA
    config.train.pack, config.train.pack_length, config.train.max_tokens = True, 0, 4096
    assert row_length(config, "cpu") == 256  # max_length + 1, up to a multiple of 128


@pytest.mark.parametrize("norm_first", [False, True])
def test_packed_rows_compute_what_padded_batches_compute(norm_first):
    split = packed_corpus()
    model = packed_model(norm_first=norm_first)
    src, tgt_in, tgt_out, _ = collate(split, np.arange(len(split))).map(torch.from_numpy)
    loss, nll = smoothed_loss(model(src, tgt_in), tgt_out, 0.1)
    loss.backward()
    padded = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    packed_loss = packed_nll = 0.0
    for batch in map(packed_tensors, packed_batches(split)):  # the last one has an empty row
        loss_, nll_ = smoothed_loss(model(batch.src, batch.tgt_in, batch.packed), batch.labels, 0.1)
        loss_.backward()
        packed_loss, packed_nll = packed_loss + loss_.item(), packed_nll + nll_.item()
    assert packed_loss == pytest.approx(loss.item(), rel=1e-6)
    assert packed_nll == pytest.approx(nll.item(), rel=1e-6)
    for (name, p), expected in zip(model.named_parameters(), padded):
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("flex", [False, True])
def test_attention_never_crosses_sentences(monkeypatch, flex):
    """Change one sentence of a packed row: no other token's output moves. FlexAttention runs
    here uncompiled and forward only (it has no backward on a CPU): what a GPU compiles."""
    monkeypatch.setattr(mt.model, "use_flex", lambda cfg, device_type, training: flex)
    batch = packed_batches(packed_corpus())[0]
    changed = batch._replace(src=batch.src.copy(), tgt_in=batch.tgt_in.copy())
    source, target = batch.packed.src_doc == 1, batch.packed.tgt_doc == 1  # sentence 1 of every row
    changed.src[source & (batch.src != EOS)] = 4
    changed.tgt_in[target & (batch.tgt_in != BOS)] = 5
    model = packed_model().eval()
    with torch.no_grad():
        before, after = (
            model(b.src, b.tgt_in, b.packed) for b in map(packed_tensors, (batch, changed))
        )
    others = torch.from_numpy(~target & (batch.packed.tgt_doc >= 0))
    torch.testing.assert_close(after[others], before[others], rtol=1e-5, atol=1e-5)
    assert (after[target] - before[target]).abs().amax(-1).min() > 1e-3


@pytest.mark.parametrize("flex", [False, True])
def test_packed_batches_of_one_run_are_compiled_once(monkeypatch, flex):
    """Every packed batch has one shape: the model is traced once for all of them (counted
    by a backend that only counts), training, and with FlexAttention forward (see above)."""
    monkeypatch.setattr(mt.model, "use_flex", lambda cfg, device_type, training: flex)
    model, counter = packed_model().train(not flex), CompileCounter()
    compiled = torch.compile(model, backend=counter)
    for batch in map(packed_tensors, packed_batches(packed_corpus(60))[:3]):
        with torch.set_grad_enabled(not flex):
            loss, _ = smoothed_loss(
                compiled(batch.src, batch.tgt_in, batch.packed), batch.labels, 0.1
            )
        if not flex:
            loss.backward()
    assert counter.frame_count == 1
