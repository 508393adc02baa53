"""The Transformer: masks, the incremental decoder, parity with torch.nn.Transformer, learning."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import VOCAB, pad, random_batch, tiny_cfg, tiny_model, trained_model
from mt.data.tokenizer import PAD
from mt.decoding.search import greedy
from mt.model import Dropout, Transformer


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_drops_p_and_rescales_the_rest(p):
    drop = Dropout(p).train()
    x = torch.rand(1000, 1000).add_(1.0).requires_grad_()  # no zeros of its own
    torch.manual_seed(0)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 2e-3  # binomial sd 5e-4
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.sum().backward()  # the gradient goes through the same mask and scale
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    torch.manual_seed(0)  # the generator alone decides the mask: resuming repeats it
    assert torch.equal(drop(x), y)
    assert not torch.equal(drop(x), y)
    assert torch.equal(drop.eval()(x), x)


@torch.no_grad()
def test_decoder_is_causal():
    model = tiny_model()
    src, tgt = random_batch([7, 5], seed=1), random_batch([6, 6], seed=2)
    changed = tgt.clone()
    changed[:, 3] = (tgt[:, 3] - 4 + 1) % (VOCAB - 4) + 4  # another real token
    before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, :3], before[:, :3], atol=1e-6, rtol=0)
    assert (after[:, 3:] - before[:, 3:]).abs().amax(-1).min() > 1e-4  # every later position


@torch.no_grad()
def test_padding_changes_nothing():
    model = tiny_model()
    src, tgt = random_batch([7, 4, 5], seed=1), random_batch([6, 3, 5], seed=2)
    logits = model(src, tgt)
    padded = model(F.pad(src, (0, 3), value=PAD), F.pad(tgt, (0, 2), value=PAD))
    torch.testing.assert_close(padded[:, : tgt.size(1)], logits, atol=1e-5, rtol=0)
    for i in range(len(src)):  # each sentence alone, without any padding
        s, t = src[i][src[i] != PAD], tgt[i][tgt[i] != PAD]
        alone = model(s[None], t[None])[0]
        torch.testing.assert_close(logits[i, : len(t)], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
@torch.no_grad()
def test_step_by_step_decoding_matches_full_pass(norm_first, activation):
    model = tiny_model(norm_first=norm_first, activation=activation)
    src, tgt = random_batch([7, 4, 5], seed=1), random_batch([6, 6, 6], seed=2)
    state = model.start_decoding(*model.encode(src), max_len=6)
    steps = [model.decode_step(tgt[:, t], state) for t in range(3)]
    torch.testing.assert_close(torch.stack(steps, 1), model(src, tgt)[:, :3], atol=1e-5, rtol=0)
    index = torch.tensor([2, 0, 0])  # reorder, repeat a row and drop one, as beam search does
    state.select(index, index)
    steps = [model.decode_step(tgt[index, t], state) for t in range(3, 6)]
    expected = model(src[index], tgt[index])[:, 3:]
    torch.testing.assert_close(torch.stack(steps, 1), expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="max_len"):
        model.decode_step(tgt[index, 0], state)


# the fp32 reference is SDPA's; reduced precisions are held to their rounding (8 bits of bf16)
PATH_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 0.1, torch.float16: 0.02}


@pytest.mark.parametrize("dtype", PATH_TOLERANCE)
@pytest.mark.parametrize("explicit", [False, True])
@torch.no_grad()
def test_attention_paths_agree(monkeypatch, dtype, explicit):
    """Explicit attention and SDPA, in every precision, give the float32 SDPA result: with
    padding masks, the causal mask, and step by step from the cache."""
    model = tiny_model()
    src, tgt = random_batch([7, 4, 5], seed=1), random_batch([6, 6, 6], seed=2)
    monkeypatch.setattr("mt.model.explicit_attention", lambda device, dtype: False)
    expected = model(src, tgt)
    monkeypatch.setattr("mt.model.explicit_attention", lambda device, dtype: explicit)
    with torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        full = model(src, tgt).float()
        state = model.start_decoding(*model.encode(src), max_len=6)
        steps = torch.stack([model.decode_step(tgt[:, t], state) for t in range(6)], 1).float()
    tolerance = PATH_TOLERANCE[dtype]
    torch.testing.assert_close(full, expected, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(steps, expected, atol=tolerance, rtol=tolerance)


@torch.no_grad()
def test_beams_decode_as_copies_of_their_source():
    """Rows sharing one cached source (beams) give what copies of that source give, through
    reordering rows within sources and dropping a source."""
    model = tiny_model(norm_first=True)
    src, tgt = random_batch([7, 4, 5], seed=1), random_batch([6] * 6, seed=2)
    source_of = torch.tensor([0, 0, 1, 1, 2, 2])  # two beams per source
    state = model.start_decoding(*model.encode(src), max_len=6, rows_per_source=2)
    steps = [model.decode_step(tgt[:, t], state) for t in range(3)]
    rows = torch.tensor([5, 4, 1, 1])  # beams of source 2 swapped, source 0's second beam
    state.select(rows, torch.tensor([2, 0]))  # twice, source 1 dropped
    steps = [torch.stack(steps, 1)[rows]]
    steps += [model.decode_step(tgt[rows, t], state).unsqueeze(1) for t in range(3, 6)]
    expected = model(src[source_of[rows]], tgt[rows])
    torch.testing.assert_close(torch.cat(steps, 1), expected, atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore::UserWarning")  # nn.Transformer's notes on its fast paths
@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
@torch.no_grad()
def test_matches_torch_transformer(norm_first, activation):
    """nn.Transformer with our weights, between our embeddings and output projection, gives
    our logits. The paper's post-norm stacks end without a final LayerNorm; pre-norm's have one,
    as nn.Transformer's always do."""
    model = tiny_model(norm_first=norm_first, activation=activation)
    for param in model.parameters():  # biases start at 0 and LayerNorms at 1: make them count
        if param.dim() == 1:
            param.add_(0.1 * torch.randn_like(param))
    ref = nn.Transformer(
        32, 4, 2, 2, 64, 0.0, activation, batch_first=True, norm_first=norm_first
    ).eval()
    if norm_first:
        ref.encoder.norm.load_state_dict(model.encoder_norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder_norm.state_dict())
    else:
        ref.encoder.norm = ref.decoder.norm = nn.Identity()
    for ours, theirs in zip(
        [*model.encoder, *model.decoder], [*ref.encoder.layers, *ref.decoder.layers]
    ):
        copies = [
            (theirs.self_attn.in_proj_weight, [ours.self_attn.qkv.weight]),
            (theirs.self_attn.in_proj_bias, [ours.self_attn.qkv.bias]),
            (theirs.self_attn.out_proj.weight, [ours.self_attn.out.weight]),
            (theirs.self_attn.out_proj.bias, [ours.self_attn.out.bias]),
            (theirs.linear1.weight, [ours.ff[0].weight]),
            (theirs.linear1.bias, [ours.ff[0].bias]),
            (theirs.linear2.weight, [ours.ff[2].weight]),
            (theirs.linear2.bias, [ours.ff[2].bias]),
        ]
        if hasattr(theirs, "multihead_attn"):  # a decoder layer: cross-attention, fused q|k|v
            cross, mha = ours.cross_attn, theirs.multihead_attn
            copies += [
                (mha.in_proj_weight, [cross.q.weight, cross.kv.weight]),
                (mha.in_proj_bias, [cross.q.bias, cross.kv.bias]),
                (mha.out_proj.weight, [cross.out.weight]),
                (mha.out_proj.bias, [cross.out.bias]),
            ]
        for j, norm in enumerate(ours.norms, 1):
            getattr(theirs, f"norm{j}").load_state_dict(norm.state_dict())
        for param, sources in copies:
            param.copy_(torch.cat(sources))
    src, tgt = random_batch([7, 4, 5], seed=1), random_batch([6, 6, 6], seed=2)
    src_pad = src == PAD
    hidden = ref(
        model.embed(model.src_embed, src),
        model.embed(model.tgt_embed, tgt),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt.size(1)),
        src_key_padding_mask=src_pad,
        memory_key_padding_mask=src_pad,
        tgt_is_causal=True,
    )
    torch.testing.assert_close(model.out(hidden), model(src, tgt), atol=1e-5, rtol=0)


def test_learns_a_tiny_corpus():
    model, sources, targets, loss = trained_model()
    assert loss < 0.05
    assert greedy(model, pad(sources), max_len=12) == targets


def test_embedding_sharing():
    def tables(model):
        return model.src_embed.weight, model.tgt_embed.weight, model.out.weight

    src, tgt, out = tables(Transformer(tiny_cfg(), VOCAB, VOCAB))  # joint vocabulary
    assert src is tgt is out
    assert (src[PAD] == 0).all()
    src, tgt, out = tables(Transformer(tiny_cfg(), 30, VOCAB))
    assert tgt is out and src is not tgt
    src, tgt, out = tables(Transformer(tiny_cfg(), VOCAB, VOCAB, joint=False))
    assert tgt is out and src is not tgt
    src, tgt, out = tables(Transformer(tiny_cfg(share_embeddings=False), VOCAB, VOCAB))
    assert len({id(src), id(tgt), id(out)}) == 3

    def size(model: Transformer) -> int:
        return sum(p.numel() for p in model.parameters())  # a shared matrix counts once

    shared = size(Transformer(tiny_cfg(), VOCAB, VOCAB))
    assert size(Transformer(tiny_cfg(share_embeddings=False), VOCAB, VOCAB)) == (
        shared + 2 * VOCAB * 32
    )
    with pytest.raises(ValueError, match="joint"):
        Transformer(tiny_cfg(), 30, VOCAB, joint=True)


@torch.no_grad()
def test_attention_weights():
    model = tiny_model()
    src, tgt = random_batch([7, 4], seed=1), random_batch([5, 5], seed=2)
    layers = model.attention_weights(src, tgt)
    assert len(layers) == 2
    for self_w, cross_w in layers:
        assert self_w.shape == (2, 4, 5, 5) and cross_w.shape == (2, 4, 5, 7)
        torch.testing.assert_close(self_w.sum(-1), torch.ones(2, 4, 5))
        assert (self_w.triu(1) == 0).all()  # no weight on later positions
        assert (cross_w[1, :, :, 4:] == 0).all()  # nor on source padding
    # the explicit path was left, and it computes what SDPA does
    attns = [module for module in model.modules() if hasattr(module, "need_weights")]
    assert not any(attn.need_weights for attn in attns)
    fast = model(src, tgt)
    for attn in attns:
        attn.need_weights = True
    torch.testing.assert_close(model(src, tgt), fast, atol=1e-5, rtol=0)


def test_sequences_longer_than_max_positions_are_refused():
    model = tiny_model(max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        model(random_batch([9], seed=1), random_batch([3], seed=2))
