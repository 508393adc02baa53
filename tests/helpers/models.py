"""Tiny models and their toy corpus, packed batches, and the search helpers: a random model,
a trained one, a batch of mixed lengths, and a counter of host syncs."""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from mt.config import ModelConfig
from mt.data.batch import Batch
from mt.data.packing import collate_packed, pack_rows
from mt.data.store import Split
from mt.data.tokenizer import BOS, EOS, PAD
from mt.model import Transformer

VOCAB = 24


def tiny_cfg(**overrides) -> ModelConfig:
    settings = dict(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0)
    return ModelConfig(**{**settings, **overrides})


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_cfg(**overrides), VOCAB, VOCAB).eval()


def pad(seqs: list[list[int]]) -> torch.Tensor:
    """Right-pad token lists into a (B, max length) batch."""
    width = max(map(len, seqs))
    return torch.tensor([seq + [PAD] * (width - len(seq)) for seq in seqs])


def random_batch(lengths: list[int], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return pad([torch.randint(4, VOCAB, (n,), generator=gen).tolist() for n in lengths])


def tiny_corpus() -> tuple[list[list[int]], list[list[int]]]:
    """32 pairs of a toy translation: the target is the source reversed, each word mapped."""
    gen = torch.Generator().manual_seed(1)
    mapping = torch.randperm(VOCAB - 4, generator=gen) + 4
    sources, targets = [], []
    for _ in range(32):
        length = int(torch.randint(2, 9, (), generator=gen))
        words = torch.randint(4, VOCAB, (length,), generator=gen)
        sources.append([*words.tolist(), EOS])
        targets.append(mapping[words - 4].flip(0).tolist())
    return sources, targets


@functools.cache
def trained_model() -> tuple[Transformer, list[list[int]], list[list[int]], float]:
    """A tiny model fitted to `tiny_corpus` (for test_model and test_decode), and its last loss."""
    sources, targets = tiny_corpus()
    src = pad(sources)
    tgt_in, tgt_out = pad([[BOS, *t] for t in targets]), pad([[*t, EOS] for t in targets])
    model = tiny_model(seed=0).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = F.cross_entropy(
            model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), sources, targets, loss.item()


PACKED_VOCAB, PACKED_LENGTH, PACKED_ROWS = 40, 16, 3


def packed_corpus(pairs: int = 23, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    side = [
        rng.integers(4, PACKED_VOCAB, rng.integers(1, 12)).astype(np.int32)
        for _ in range(2 * pairs)
    ]
    return Split(side[:pairs], side[pairs:])


def packed_batches(split: Split, seed: int = 1, epoch: int = 0) -> list[Batch]:
    src, tgt = split.src, split.tgt
    plans = pack_rows(src.lengths(), tgt.lengths(), PACKED_LENGTH, PACKED_ROWS, seed, epoch)
    return [collate_packed(src, tgt, plan, PACKED_LENGTH, PACKED_ROWS) for plan in plans]


def packed_tensors(batch: Batch) -> Batch:
    return batch.map(torch.from_numpy)


def packed_model(**overrides) -> Transformer:
    settings = dict(d_model=16, heads=2, encoder_layers=2, decoder_layers=2, d_ff=32, dropout=0.0)
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**settings, **overrides}), PACKED_VOCAB, PACKED_VOCAB)


def random_model():
    """Untrained: it hardly ever chooses EOS, so its outputs run to the length limit."""
    return tiny_model(seed=3)


def mixed_batch():
    return random_batch([9, 3, 6, 5, 8, 2], seed=4)


def trained():
    """The model fitted to `tiny_corpus`, its sources as a batch, its targets."""
    model, sources, targets, _ = trained_model()
    return model, pad(sources), targets


class HostSyncs(TorchDispatchMode):
    """Counts the operations that make the host wait for a GPU (those that
    torch.cuda.set_sync_debug_mode reports), on any device: reading a value, a shape that
    depends on values (nonzero, boolean masks, repeat_interleave without its size)."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.reads = {"_local_scalar_dense", "is_nonzero", "equal", "nonzero", "masked_select"}
        self.reads |= {"unique_consecutive", "_unique2", "unique_dim"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        masks = name in ("index", "index_put", "index_put_") and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        )
        sized = (
            func is torch.ops.aten.repeat_interleave.Tensor and kwargs.get("output_size") is None
        )
        self.count += name in self.reads or masks or sized
        return func(*args, **kwargs)


@torch.no_grad()
def teacher_forced_logprobs(model, src: torch.Tensor, outputs: list[list[int]]) -> list[float]:
    """log p(output, EOS | src) of each output, by one full forward pass; src (S,) may be padded."""
    tgt_in, tgt_out = pad([[BOS, *out] for out in outputs]), pad([[*out, EOS] for out in outputs])
    logits = model(src[src != PAD].expand(len(outputs), -1), tgt_in)
    logprobs = logits.log_softmax(-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    return logprobs.masked_fill(tgt_out == PAD, 0.0).sum(1).tolist()
