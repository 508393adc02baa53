"""Training speed of our Transformer against torch.nn.Transformer of the same shape.

Both models train on identical token batches (the Tatoeba training data, our bucketing),
alternating batch by batch in one process, so machine noise hits both alike, with ours again
with SDPA attention in every precision (the rule before `mt.model.explicit_attention`), to
check that rule on this machine. Prints one JSON object per precision: target tokens per
second for each model, the ratio ours / reference, and the CPU's vector and matrix flags.
Float32 always, and the precision `auto` picks where it pays (bf16 on a GPU with native bf16
or a CPU with AMX bf16, fp16 on older GPUs); or those --precision names.

    python scripts/bench_train_speed.py --data ../shared/data [--steps 40] [--device cpu]
        [--precision fp32 --precision bf16]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch import nn

from mt.config_file import load_config
from mt.data.batches import collate, token_batches
from mt.data.prepare import prepare
from mt.data.tokenizer import PAD
from mt.device import SPEED_FLAGS, cpu_amx_bf16, cpu_flags, precision_for
from mt.model import Transformer, sinusoids
from mt.training.loss import smoothed_loss


class Reference(nn.Module):
    """torch.nn.Transformer with the same embeddings, positions and tied output as ours."""

    def __init__(self, cfg, vocab: int):
        super().__init__()
        self.d = cfg.d_model
        self.embed = nn.Embedding(vocab, cfg.d_model, padding_idx=PAD)
        self.core = nn.Transformer(
            cfg.d_model,
            cfg.heads,
            cfg.encoder_layers,
            cfg.decoder_layers,
            cfg.d_ff,
            cfg.dropout,
            batch_first=True,
        )
        self.out = nn.Linear(cfg.d_model, vocab, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("pe", sinusoids(cfg.max_positions, cfg.d_model), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, src, tgt_in):
        def embed(x):
            return self.drop(self.embed(x) * math.sqrt(self.d) + self.pe[: x.size(1)])

        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device)
        h = self.core(
            embed(src),
            embed(tgt_in),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return self.out(h)


class SdpaAlways(nn.Module):
    """Our model with SDPA attention in every precision."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src, tgt_in):
        with mock.patch("mt.model.explicit_attention", lambda device, dtype: False):
            return self.model(src, tgt_in)


def setup(data: Path, config_name: str = "tatoeba_cpu.yaml", overrides=(), count: int = 40):
    """The recipe's config and its first `count` Tatoeba training batches, as tensors."""
    config = load_config(
        config_name,
        [
            f"data.files.train={data / 'tatoeba_en_es.train.jsonl.gz'}",
            f"data.files.valid={data / 'tatoeba_en_es.valid.jsonl.gz'}",
            f"data.files.test={data / 'tatoeba_en_es.test.jsonl.gz'}",
            "run.dir=runs/bench-data",
            *overrides,
        ],
    )
    prepared = prepare(config)
    split = prepared.splits["train"]
    src_len = np.fromiter(map(len, split.src), np.int64)
    tgt_len = np.fromiter(map(len, split.tgt), np.int64)
    batches = token_batches(src_len, tgt_len, config.train.max_tokens, 0, 0)
    tensors = [collate(split, b).map(torch.from_numpy) for b in batches[:count]]
    return config, prepared.src_tokenizer.get_vocab_size(), tensors


class Timer:
    """Trains models one batch at a time and keeps each one's target tokens and seconds."""

    def __init__(self, models: dict[str, nn.Module], device: torch.device, dtype=None):
        self.models, self.device, self.dtype = models, device, dtype
        self.optimizers = {
            name: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
            for name, m in models.items()
        }
        for model in models.values():
            model.to(device).train()
        self.tokens = dict.fromkeys(models, 0)
        self.seconds = dict.fromkeys(models, 0.0)

    def step(self, name: str, batch, timed: bool = True) -> None:
        src, tgt_in, tgt_out, _ = batch.map(lambda x: x.to(self.device))
        self._sync()
        start = time.perf_counter()
        with torch.autocast(
            self.device.type, self.dtype or torch.float32, enabled=self.dtype is not None
        ):
            loss, _ = smoothed_loss(self.models[name](src, tgt_in), tgt_out, 0.1)
        ntok = int((tgt_out != PAD).sum())
        (loss / ntok).backward()
        self.optimizers[name].step()
        self.optimizers[name].zero_grad(set_to_none=True)
        self._sync()
        if timed:
            self.tokens[name] += ntok
            self.seconds[name] += time.perf_counter() - start

    def speed(self) -> dict[str, float]:
        return {name: self.tokens[name] / self.seconds[name] for name in self.models}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def reference_speed(data: Path, steps: int = 20) -> float:
    """Target tokens/s of torch.nn.Transformer in the recipe's shape, on the CPU: how fast
    this machine is right now, for scaling figures measured on another."""
    config, vocab, tensors = setup(data, count=steps + 3)
    torch.manual_seed(0)
    timer = Timer({"reference": Reference(config.model, vocab)}, torch.device("cpu"))
    for i, batch in enumerate(tensors):
        timer.step("reference", batch, timed=i >= 3)  # the first three warm up
    return timer.speed()["reference"]


NAMES = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--config", default="tatoeba_cpu.yaml")
    parser.add_argument("--steps", type=int, default=150, help="timed updates per model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", action="append", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()

    config, vocab, tensors = setup(Path(args.data), args.config, args.overrides, args.steps + 3)
    device = torch.device(args.device)
    pays, _ = precision_for("auto", device)  # bf16 (fp16 on older GPUs) where it pays
    names = args.precision or ["fp32"] + ([NAMES[pays]] if pays else [])
    for name in names:
        speed(config, vocab, tensors, device, name)


def speed(config, vocab: int, tensors, device: torch.device, precision: str) -> None:
    dtype = {name: dtype for dtype, name in NAMES.items()}[precision]
    torch.manual_seed(0)
    ours = Transformer(config.model, vocab, vocab)
    timer = Timer(
        {
            "ours": ours,
            "ours, SDPA attention": SdpaAlways(copy.deepcopy(ours)),
            "torch.nn.Transformer": Reference(config.model, vocab),
        },
        device,
        dtype,
    )
    for name in timer.models:  # warm-up: allocator, kernels
        for batch in tensors[:3]:
            timer.step(name, batch, timed=False)
    # Alternate the models batch by batch (in both orders), so that the noise of a shared
    # machine falls on all alike.
    for i, batch in enumerate(tensors[3:]):
        for name in list(timer.models)[:: 1 if i % 2 == 0 else -1]:
            timer.step(name, batch)
    speed = timer.speed()
    cells = sum(b[0].numel() + b[2].numel() for b in tensors)
    pads = sum(int((b[0] == PAD).sum() + (b[2] == PAD).sum()) for b in tensors)
    flags = cpu_flags()
    print(
        json.dumps(
            {
                "device": str(device),
                "precision": str(dtype or "float32"),
                "cpu_flags": [f for f in SPEED_FLAGS if f in flags],
                "amx_bf16_usable": cpu_amx_bf16(),
                "shape": {
                    k: getattr(config.model, k)
                    for k in ("d_model", "heads", "encoder_layers", "decoder_layers", "d_ff")
                },
                "max_tokens": config.train.max_tokens,
                "updates_per_model": len(tensors) - 3,
                "tokens_per_s": speed,
                "ratio_ours_over_reference": speed["ours"] / speed["torch.nn.Transformer"],
                "padding": pads / cells,
                "threads": torch.get_num_threads(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
