"""A check to run by hand on a machine with GPUs (none in CI): a short bf16 run of a config on
one GPU and, with two or more, the same under torchrun on all of them. Prints per run: target
tokens/s, model FLOP utilisation against the GPU's peak, peak memory, and whether every rank
ends with identical weights.

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
from pathlib import Path

# Dense bf16 peak (FLOP/s, no sparsity) by a substring of torch.cuda.get_device_name().
PEAK_BF16 = {
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,  # SXM
    "A100": 312e12,
    "L40S": 362e12,
    "RTX 4090": 165e12,
}
WARMUP = 10  # updates left out of the timing (allocator warm-up, kernel selection)


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


def worker(out: Path, config_name: str, overrides: list[str]) -> None:
    """One rank (under torchrun, or alone): train, time, write its figures to out/rank-R.json."""
    import torch

    from mt.config import load_config
    from mt.model import PAD
    from mt.train import Trainer

    trainer = Trainer(load_config(config_name, overrides))
    model_cfg = trainer.config.model
    vocab = trainer.data.tgt_tokenizer.get_vocab_size()
    counted = {"updates": 0, "flops": 0.0, "tokens": 0, "start": 0.0, "end": 0.0}

    def timed(update, batches):
        """After each update, which ends with losses copied to the host: the GPU is done."""
        counted["updates"] += 1
        if counted["updates"] == WARMUP:  # the timing starts after the warm-up updates
            torch.cuda.synchronize()
            counted["start"] = time.perf_counter()
        elif counted["updates"] > WARMUP:
            counted["end"] = time.perf_counter()
            for src, _, tgt_out in batches:  # lengths with EOS (source) and BOS/EOS (target)
                src_len, tgt_len = ((x != PAD).sum(1).numpy() for x in (src, tgt_out))
                counted["flops"] += 3 * float(
                    forward_flops(model_cfg, vocab, src_len, tgt_len).sum()
                )
                counted["tokens"] += int(tgt_len.sum())

    trainer.on_update.append(timed)
    trainer.run()  # validates once at the end, after the timed updates
    seconds = counted["end"] - counted["start"]
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
    figures = {
        "device": torch.cuda.get_device_name(trainer.device),
        "tokens_per_s": counted["tokens"] / seconds,
        "flops_per_s": counted["flops"] / seconds,
        "peak_memory_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30,
        "weights_sha256": digest.hexdigest(),
    }
    (out / f"rank-{trainer.ranks.rank}.json").write_text(json.dumps(figures))


def summary(ranks: list[dict]) -> dict:
    """The run's figures from its ranks' (throughput summed, memory the largest)."""
    flops = sum(r["flops_per_s"] for r in ranks)
    peak = peak_flops(ranks[0]["device"])
    return {
        "gpus": len(ranks),
        "device": ranks[0]["device"],
        "tokens_per_s": round(sum(r["tokens_per_s"] for r in ranks)),
        "tflops_per_s": round(flops / 1e12, 1),
        "mfu": round(flops / (peak * len(ranks)), 3) if peak else "unknown peak for this GPU",
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
