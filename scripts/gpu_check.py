"""Every GPU figure from one command, offline, on the Tatoeba files (none of this runs in CI):

    python scripts/gpu_check.py --all [--data ../shared/data] [--out gpu_check]

A short bf16 run of --config (base.yaml) on one GPU and, with two or more, the same under
torchrun on all of them: steady target tokens/s and model FLOP utilisation against the GPU's
peak (after the first WARMUP updates), the seconds compiling took, the seconds from the first
update to steady speed, the first 100 updates against steady, the attention path the model
took (flex or sdpa), graphs, graph breaks and recompiles (dynamo's counters), host syncs per
update (torch.cuda.set_sync_debug_mode over SYNC_UPDATES whole steady updates, every thread),
peak memory, and whether every rank ends with identical weights. With --all also: ours against
torch.nn.Transformer in bf16 on the same batches, --config trained for --minutes (3) to BLEU
on the Tatoeba test, and `mt evaluate` beam 5 and greedy sentences/s. One JSON record and a
Markdown table for docs/benchmarks.md, printed and written to --out (.json, .md); a part that
cannot run says why there. `--device cpu --quick` runs the same code on a CPU in about a
minute (a tiny model, a slice of the data): a check of the script, not a figure.

mt reads .jsonl.gz files with the `datasets` package: a GPU machine without it needs it
installed (`pip install datasets`, or the project's virtualenv carried along).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_train_speed, beside this

from mt.data.tokenizer import PAD

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
SYNC_UPDATES = 5  # steady updates whose host syncs are counted
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
    if batch.packed is not None:  # a pair is a (row, sentence) on both sides
        rows, length = batch.packed.src_doc.shape

        def count(doc):
            doc = np.asarray(doc)
            return np.bincount(
                (np.arange(rows)[:, None] * length + doc)[doc >= 0], None, rows * length
            )

        src, tgt = count(batch.packed.src_doc), count(batch.packed.tgt_doc)
        return src[src > 0], tgt[src > 0]
    return (np.asarray(batch.src) != PAD).sum(1), (np.asarray(batch.labels) != PAD).sum(1)


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

    from mt.config_file import load_config
    from mt.training.trainer import Trainer

    torch._dynamo.utils.counters.clear()
    trainer = Trainer(load_config(config_name, overrides))  # rehearses (compiles) the step
    model_cfg, cuda = trainer.config.model, trainer.device.type == "cuda"
    vocab = trainer.data.tgt_tokenizer.get_vocab_size()
    ends, tokens, flops, syncs = [], [], [], []

    update = trainer.updater

    def timed(batches, lr):
        """Each update, which ends with its numbers read by the host: the GPU is then done."""
        result = update(batches, lr)
        ends.append(time.perf_counter())
        src, tgt = (np.concatenate(x) for x in zip(*map(pair_lengths, batches)))
        tokens.append(int(tgt.sum()))
        flops.append(3 * float(forward_flops(model_cfg, vocab, src, tgt).sum()))
        if cuda and len(ends) in (WARMUP, WARMUP + SYNC_UPDATES):  # whole updates, from end
            syncs.append(len(caught))  # to end, with the loop around them
            torch.cuda.set_sync_debug_mode("warn" if len(ends) == WARMUP else "default")
        return result

    trainer.updater = timed
    began = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # every thread's warnings
        warnings.simplefilter("always")
        trainer.run()  # validates once at the end, after the timed updates
    step = trainer.update_plan  # rehearsed (and compiled) before `began`
    figures = speed(began, ends, tokens, flops)
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().float().cpu().numpy().tobytes())
    counters = torch._dynamo.utils.counters
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    figures |= {
        "device": device_name(trainer.device),
        "compile_s": step.seconds if step.compiled else 0.0,
        "attention": trainer.model.attention or "padded batches (bool masks)",
        "graphs": graphs,
        "graph_breaks": breaks,
        "recompiles": max(graphs - 1 - breaks, 0) if step.compiled else 0,
        "syncs_per_update": (syncs[1] - syncs[0]) / SYNC_UPDATES if len(syncs) == 2 else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated(trainer.device) / 2**30 if cuda else 0,
        "weights_sha256": digest.hexdigest(),
    }
    (out / f"rank-{trainer.ranks.rank}.json").write_text(json.dumps(figures))


def device_name(device) -> str:
    import torch

    from mt.device import cpu_info

    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_info()[0]


def summary(ranks: list[dict]) -> dict:
    """The run's figures from its ranks' (throughput summed, times and memory the largest)."""
    flops = sum(r["flops_per_s"] for r in ranks)
    peak = peak_flops(ranks[0]["device"])
    to_steady = [r["to_steady_s"] for r in ranks]
    syncs = [r["syncs_per_update"] for r in ranks]
    return {
        "gpus": len(ranks),
        "device": ranks[0]["device"],
        "tokens_per_s": round(sum(r["tokens_per_s"] for r in ranks)),
        "tflops_per_s": round(flops / 1e12, 1),
        "mfu": round(flops / (peak * len(ranks)), 3) if peak else "unknown peak for this device",
        "compile_s": round(max(r["compile_s"] for r in ranks), 1),
        "to_steady_s": None if None in to_steady else round(max(to_steady), 1),
        "first_100_of_steady": round(min(r["first_100"] for r in ranks), 2),
        "attention": ranks[0]["attention"],
        **{k: max(r[k] for r in ranks) for k in ("graphs", "graph_breaks", "recompiles")},
        "syncs_per_update": None if None in syncs else max(syncs),
        "peak_memory_gib": round(max(r["peak_memory_gib"] for r in ranks), 2),
        "identical_weights": len({r["weights_sha256"] for r in ranks}) == 1,
    }


def data_sets(data: Path) -> list[str]:
    return [
        "data.source=files",
        *(f"data.files.{s}={data / f'tatoeba_en_es.{s}.jsonl.gz'}" for s in SPLITS),
    ]


SPLITS = ("train", "valid", "test")


def check(gpus: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="mt-gpu-check-") as tmp:
        overrides = [
            f"run.dir={tmp}/run",
            f"run.device={args.device}",
            f"train.precision={'bf16' if args.device == 'cuda' else 'fp32'}",
            f"train.max_steps={args.steps + WARMUP}",
            "train.max_minutes=0",
            f"train.eval_every={10**9}",  # validation only at the end, of a few sentences
            "train.eval_sentences=100",
            f"train.save_every={10**9}",
            *data_sets(args.data),
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


def against_reference(args: argparse.Namespace) -> dict:
    """Ours and torch.nn.Transformer of the same shape on the same padded batches, bf16,
    alternating batch by batch (scripts/bench_train_speed.py's models and timer)."""
    import bench_train_speed as bench
    import torch

    from mt.model import Transformer

    count = 6 if args.quick else 43
    overrides = [f"run.dir={args.tmp}/bench", "data.source=files", *args.set]
    config, vocab, tensors = bench.setup(args.data, args.config, overrides, count)
    torch.manual_seed(0)
    models = {"ours": Transformer(config.model, vocab, vocab)}
    models["torch.nn.Transformer"] = bench.Reference(config.model, vocab)
    timer = bench.Timer(models, torch.device(args.device), torch.bfloat16)
    for i, batch in enumerate(tensors):
        for name in list(models)[:: 1 if i % 2 == 0 else -1]:
            timer.step(name, batch, timed=i >= 3)  # the first three warm up
    speed = timer.speed()
    return {
        "tokens_per_s": {k: round(v) for k, v in speed.items()},
        "ours_over_reference": round(speed["ours"] / speed["torch.nn.Transformer"], 2),
        "updates_each": count - 3,
    }


def bleu(args: argparse.Namespace) -> dict:
    """--config trained for --minutes (the cosine recipe of base.yaml's comment), then `mt
    evaluate` on the Tatoeba test, beam 5 and greedy: BLEU and sentences/s."""
    run = f"{args.tmp}/bleu"
    sets = [
        f"run.dir={run}",
        f"run.device={args.device}",
        *data_sets(args.data),
        "train.max_steps=0",
        f"train.max_minutes={args.minutes}",
        "train.schedule=cosine",
        "train.warmup_fraction=0.05",
        *args.set,
    ]
    mt = [sys.executable, "-m", "mt"]
    train = [*mt, "train", "--config", args.config, *(x for s in sets for x in ("--set", s))]
    subprocess.run(train, check=True)
    record: dict = {"minutes": args.minutes}
    for beam in (5, 1):
        command = [*mt, "evaluate", run, "--beam", str(beam), "--json"]
        command += ["--device", args.device]
        done = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
        key = "beam5" if beam == 5 else "greedy"
        record[key] = {
            "bleu": round(done["bleu"], 2),
            "sentences_per_s": round(done["sentences_per_s"], 1),
            "sentences": done["sentences"],
        }
    metrics = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]
    record["updates"] = max((m["step"] for m in metrics if "step" in m), default=0)
    return record


def quick_data(data: Path, tmp: Path) -> Path:
    """The first pairs of each split, for --quick: a tiny model learns nothing from more."""
    import gzip

    for split, count in zip(SPLITS, (3000, 60, 60)):
        with gzip.open(data / f"tatoeba_en_es.{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            lines = [line for _, line in zip(range(count), f)]
        with gzip.open(tmp / f"tatoeba_en_es.{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(lines)
    return tmp


def everything(args: argparse.Namespace) -> dict:
    """Every part of --all; a part that fails or cannot run says why in its place."""
    import torch

    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    parts = {
        "one_device": lambda: check(1, args),
        "all_gpus": lambda: check(gpus, args) if gpus > 1 else f"skipped: {gpus} GPUs",
        "ours_vs_torch_transformer_bf16": lambda: against_reference(args),
        "bleu": lambda: bleu(args),
    }
    record = {"config": args.config, "device": args.device, "quick": args.quick}
    for name, part in parts.items():
        try:
            record[name] = part()
        except Exception as e:  # a part that failed: its reason, and the next part
            record[name] = f"failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        print(json.dumps({name: record[name]}), flush=True)
    if args.device != "cuda":
        record["not_measured"] = "host syncs (CUDA only), MFU (no peak for a CPU), compile"
    return record


def table(record: dict) -> str:
    """The record as a Markdown table of figure | value, nested parts flattened."""
    rows = ["| figure | value |", "|---|---|"]

    def add(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{prefix}.{key}" if prefix else key, inner)
        else:
            rows.append(f"| {prefix} | {value} |")

    add("", record)
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="base.yaml (tiny.yaml with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="timed updates per run")
    parser.add_argument("--set", action="append", default=[], help="key=value, as mt train")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--all", action="store_true", help="every figure, not only speed")
    parser.add_argument("--quick", action="store_true", help="a check of this script")
    parser.add_argument("--minutes", type=float, default=None, help="--all's training budget")
    parser.add_argument("--out", type=Path, help="write OUT.json and OUT.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the folder a rank reports to
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker), args.config, args.set)
        return
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device; run this on a machine with GPUs (or --device cpu)")
    args.config = args.config or ("tiny.yaml" if args.quick else "base.yaml")
    args.steps = args.steps or (5 if args.quick else 200)
    args.minutes = args.minutes or (0.1 if args.quick else 3.0)
    with tempfile.TemporaryDirectory(prefix="mt-gpu-check-") as tmp:
        args.tmp = Path(tmp)
        if args.quick:
            args.data = quick_data(args.data, args.tmp)
            args.set = ["data.valid_size=0", "data.test_size=0", *args.set]
        if not args.all:
            print(json.dumps(check(1, args)), flush=True)
            return
        record = everything(args)
    print(table(record))
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(table(record) + "\n")


if __name__ == "__main__":
    main()
