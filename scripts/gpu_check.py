"""A check to run by hand on a machine with GPUs (none in CI): a short bf16 run of a config on
one GPU and, with two or more, the same under torchrun on all of them. Prints per run: the
steady target tokens/s and model FLOP utilisation against the GPU's peak (after the first
WARMUP updates; a packed run compiles before its first update), the seconds compiling took,
the seconds from the first update to steady speed and the speed of the first 100 updates
against the steady one, the host syncs of one steady update (torch.cuda.set_sync_debug_mode),
peak memory, and whether every rank ends with identical weights.

    python scripts/gpu_check.py [--config base.yaml] [--steps 200] [--set key=value ...]

Each run trains in a fresh temporary run folder; data comes as the config says (base.yaml:
the Hugging Face Hub, or --set data.source=files --set data.files.train=...).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from mt.packing import PackedBatch
from mt.tokenizer import PAD

# Dense bf16 peak (FLOP/s, no sparsity) by a substring of torch.cuda.get_device_name().
PEAK_BF16 = {
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,  # SXM
    "A100": 312e12,
    "L40S": 362e12,
    "RTX 4090": 165e12,
}
WARMUP = 10  # updates left out of the steady timing (allocator warm-up, kernel selection)
WINDOW = 10  # updates whose speed says when the run has reached its steady speed
STEADY = 0.9  # of the steady speed: a window this fast has reached it


def peak_flops(device_name: str) -> float | None:
    return next((peak for key, peak in PEAK_BF16.items() if key in device_name), None)


def forward_flops(cfg, tgt_vocab: int, src_len, tgt_len):
    """Matmul FLOPs (2 per multiply-add) of one teacher-forced forward pass of a pair with
    `src_len` source and `tgt_len` target tokens; numpy arrays give one count per pair.

    Counted per token, encoder and decoder apart, as the model computes them: projections,
    attention scores and their weighted sum (causal self-attention counted in full, as the
    kernels and PaLM's MFU count it), the feed-forward network and the output projection.
    Training costs 3 times this (the backward pass twice the forward)."""
    d, f = cfg.d_model, cfg.d_ff
    s, t = src_len, tgt_len
    encoder = s * (2 * 4 * d * d + 2 * 2 * s * d + 2 * 2 * d * f)  # qkv+out, QK+AV, FFN
    self_attn = t * (2 * 4 * d * d + 2 * 2 * t * d)
    cross_attn = t * (2 * 2 * d * d + 2 * 2 * s * d) + s * 2 * 2 * d * d  # q+out; kv of memory
    decoder = self_attn + cross_attn + t * 2 * 2 * d * f
    return cfg.encoder_layers * encoder + cfg.decoder_layers * decoder + t * 2 * d * tgt_vocab


def pair_lengths(batch) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of every pair of a batch (with its EOS, and its BOS or EOS),
    padded or packed: what `forward_flops` counts, padding and other sentences apart."""
    if isinstance(batch, PackedBatch):  # a pair is a (row, sentence) on both sides
        rows, length = batch.src_doc.shape

        def count(doc):
            doc = np.asarray(doc)
            return np.bincount(
                (np.arange(rows)[:, None] * length + doc)[doc >= 0], None, rows * length
            )

        src, tgt = count(batch.src_doc), count(batch.tgt_doc)
        return src[src > 0], tgt[src > 0]
    src, _, tgt_out = batch
    return (np.asarray(src) != PAD).sum(1), (np.asarray(tgt_out) != PAD).sum(1)


def speed(start: float, ends, tokens, flops) -> dict:
    """Figures of a run's timeline: it started its first update at `start`, ended update i
    at ends[i] (seconds) having trained tokens[i] target tokens and flops[i] FLOPs. Steady:
    after WARMUP updates; reached: at the end of the first WINDOW updates at STEADY of it."""
    ends, tokens, flops = (np.asarray(x, np.float64) for x in (ends, tokens, flops))
    seconds = ends[-1] - ends[WARMUP - 1]
    steady = tokens[WARMUP:].sum() / seconds
    began = np.concatenate(([start], ends[:-1]))
    window = np.convolve(tokens, np.ones(WINDOW), "valid") / (
        ends[WINDOW - 1 :] - began[: 1 - WINDOW or None]
    )
    reached = np.flatnonzero(window >= STEADY * steady)
    first = min(100, len(ends))
    return {
        "tokens_per_s": steady,
        "flops_per_s": flops[WARMUP:].sum() / seconds,
        "to_steady_s": float(ends[WINDOW - 1 + reached[0]] - start) if len(reached) else None,
        "first_100": tokens[:first].sum() / (ends[first - 1] - start) / steady,
    }


def worker(out: Path, config_name: str, overrides: list[str]) -> None:
    """One rank (under torchrun, or alone): train, time, write its figures to out/rank-R.json."""
    import torch

    from mt.config import load_config
    from mt.train import Trainer

    trainer = Trainer(load_config(config_name, overrides))
    model_cfg = trainer.config.model
    vocab = trainer.data.tgt_tokenizer.get_vocab_size()
    ends, tokens, flops = [], [], []

    def timed(update, batches):
        """After each update, which ends with losses copied to the host: the GPU is done."""
        ends.append(time.perf_counter())
        src, tgt = (np.concatenate(x) for x in zip(*map(pair_lengths, batches)))
        tokens.append(int(tgt.sum()))
        flops.append(3 * float(forward_flops(model_cfg, vocab, src, tgt).sum()))
        if len(ends) in (WARMUP, WARMUP + 1):  # the syncs of one update and the loop around it
            torch.cuda.set_sync_debug_mode("warn" if len(ends) == WARMUP else "default")

    trainer.on_update.append(timed)
    began = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.run()  # validates once at the end, after the timed updates
    updater = trainer.updater  # the first update began after its rehearsal (and compile)
    figures = speed(began + updater.rehearsal_s, ends, tokens, flops)
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
    figures |= {
        "device": torch.cuda.get_device_name(trainer.device),
        "compile_s": updater.rehearsal_s if updater.compiled else 0.0,
        "syncs_per_update": sum("synchroniz" in str(w.message) for w in caught),
        "peak_memory_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30,
        "weights_sha256": digest.hexdigest(),
    }
    (out / f"rank-{trainer.ranks.rank}.json").write_text(json.dumps(figures))


def summary(ranks: list[dict]) -> dict:
    """The run's figures from its ranks' (throughput summed, times and memory the largest)."""
    flops = sum(r["flops_per_s"] for r in ranks)
    peak = peak_flops(ranks[0]["device"])
    to_steady = [r["to_steady_s"] for r in ranks]
    return {
        "gpus": len(ranks),
        "device": ranks[0]["device"],
        "tokens_per_s": round(sum(r["tokens_per_s"] for r in ranks)),
        "tflops_per_s": round(flops / 1e12, 1),
        "mfu": round(flops / (peak * len(ranks)), 3) if peak else "unknown peak for this GPU",
        "compile_s": round(max(r["compile_s"] for r in ranks), 1),
        "to_steady_s": None if None in to_steady else round(max(to_steady), 1),
        "first_100_of_steady": round(min(r["first_100"] for r in ranks), 2),
        "syncs_per_update": max(r["syncs_per_update"] for r in ranks),
        "peak_memory_gib": round(max(r["peak_memory_gib"] for r in ranks), 2),
        "identical_weights": len({r["weights_sha256"] for r in ranks}) == 1,
    }


def check(gpus: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="mt-gpu-check-") as tmp:
        overrides = [
            f"run.dir={tmp}/run",
            "run.device=cuda",
            "train.precision=bf16",
            f"train.max_steps={args.steps + WARMUP}",
            f"train.eval_every={10**9}",  # validation only at the end, of a few sentences
            "train.eval_sentences=100",
            f"train.save_every={10**9}",
            *args.set,
        ]
        me = [str(Path(__file__).resolve()), "--worker", tmp, "--config", args.config]
        me += [x for o in overrides for x in ("--set", o)]
        if gpus == 1:
            command = [sys.executable, *me]
        else:
            command = [sys.executable, "-m", "torch.distributed.run"]
            command += ["--nproc_per_node", str(gpus), "--master-port", "29561", *me]
        subprocess.run(command, check=True, env=dict(os.environ, OMP_NUM_THREADS="4"))
        return summary([json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank-*.json"))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="base.yaml")
    parser.add_argument("--steps", type=int, default=200, help="timed updates per run")
    parser.add_argument("--set", action="append", default=[], help="key=value, as mt train")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the folder a rank reports to
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker), args.config, args.set)
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device; run this on a machine with GPUs")
    counts = [1] + ([torch.cuda.device_count()] if torch.cuda.device_count() > 1 else [])
    for gpus in counts:
        print(json.dumps(check(gpus, args)), flush=True)


if __name__ == "__main__":
    main()
