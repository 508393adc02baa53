"""The training step as a GPU runs it, proven on the CPU: which attention every shipped config
takes on CUDA, and the model with its chunked loss compiled by a real backend over packed
batches, one graph for all of them, computing what the padded model computes eagerly."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.attention.flex_attention as flex_module
from torch._dynamo.testing import CompileCounterWithBackend

import mt.model
from helpers.models import packed_batches, packed_corpus, packed_tensors
from mt.config_file import load_config
from mt.data.batches import collate
from mt.packed_attention import FLEX_MIN_HEAD, flex_refusal, use_flex
from mt.training.loss import smoothed_loss

CONFIGS = sorted(p.name for p in (Path(__file__).parents[2] / "mt" / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_is_checked_for_flexattention_on_cuda(name, monkeypatch):
    model = load_config(name, ["data.files.train=configs/tiny.yaml"]).model  # any file
    why = flex_refusal(model, "cuda", training=True)
    head = model.d_model // model.heads
    if name == "tiny.yaml":  # 32 / 4: told at start, not found by a failing compile
        assert head < FLEX_MIN_HEAD and why.startswith("model.d_model / model.heads = 8")
    else:  # the GPU recipe and the CPU one, should it run on a GPU
        assert why == "" and head >= FLEX_MIN_HEAD
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert use_flex(model, "cuda", training=True) == (name != "tiny.yaml")
    assert not use_flex(model, "cpu", training=True)  # no backward on a CPU


def test_base_yaml_on_cuda_takes_flexattention(monkeypatch):
    model = load_config("base.yaml").model
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert use_flex(model, "cuda", training=True)
    model.attention_dropout = 0.1  # what base.yaml had: SDPA with dense masks
    assert "model.attention_dropout is 0.1" in flex_refusal(model, "cuda", training=True)
    assert use_flex(model, "cuda", training=False)  # no dropout when not training
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    assert not use_flex(load_config("base.yaml").model, "cuda", training=True)  # eager


def _padded_reference(model, split):
    """Loss, NLL and gradients of every sentence of `split` in one padded batch, eagerly."""
    src, tgt_in, tgt_out, _ = collate(split, np.arange(len(split))).map(torch.from_numpy)
    loss, nll = smoothed_loss(model(src, tgt_in), tgt_out, 0.1)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss.item(), nll.item(), grads


@pytest.mark.parametrize("flex", [False, True], ids=["sdpa", "flex"])
def test_compiled_training_step_is_one_graph_and_computes_the_padded_model(monkeypatch, flex):
    """aot_eager: dynamo's graph and AOTAutograd's forward and backward graphs, run by eager
    kernels. FlexAttention has no backward kernel on a CPU and torch refuses gradients there
    before tracing; lifting that guard runs its reference backward in the same graph, which
    proves the block masks, the graph and the gradients (the Triton kernel only a GPU can)."""
    torch._dynamo.reset()
    if flex:
        monkeypatch.setattr(flex_module, "_validate_device", lambda q, k, v: None)
    monkeypatch.setattr(
        mt.model, "use_flex", lambda cfg, device_type, training: torch.compiler.is_compiling()
    )
    if not flex:  # the rule as on CUDA with attention dropout or a small head: bool masks
        monkeypatch.setattr(mt.model, "use_flex", lambda cfg, device_type, training: False)
    torch.manual_seed(0)
    model = mt.model.Transformer(
        mt.model.ModelConfig(
            d_model=32, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0
        ),
        40,
        40,
    ).train()
    split = packed_corpus(11)
    loss, nll, grads = _padded_reference(model, split)
    counter = CompileCounterWithBackend("aot_eager")

    def step(batch):
        return smoothed_loss(model(batch.src, batch.tgt_in, batch.packed), batch.labels, 0.1)

    compiled = torch.compile(step, backend=counter, fullgraph=True, dynamic=False)
    packed_loss = packed_nll = 0.0
    batches = [packed_tensors(b) for b in packed_batches(split)]
    assert len(batches) == 3 and len({b.src.shape for b in batches}) == 1
    for batch in batches:
        loss_, nll_ = compiled(batch)
        loss_.backward()
        packed_loss, packed_nll = packed_loss + loss_.item(), packed_nll + nll_.item()
        assert model.attention == ("flex" if flex else "sdpa")  # the path the graph took
    assert counter.frame_count == 1  # traced once: no recompile for batches 2 and 3
    assert not torch._dynamo.utils.counters["graph_break"]  # and fullgraph: no break
    # float32 sums of the same terms in another order (rows, chunks, blocks): rounding of a
    # few ulps; gradients as small as 1e-6 are compared absolutely
    assert packed_loss == pytest.approx(loss, rel=1e-5)
    assert packed_nll == pytest.approx(nll, rel=1e-5)
    for (name, p), expected in zip(model.named_parameters(), grads):
        torch.testing.assert_close(p.grad, expected, rtol=1e-4, atol=1e-5, msg=name)
