"""Where one CPU update of the recipe model spends its time, and how near a matrix product's
speed it runs.

Builds the recipe's model (tatoeba_cpu.yaml: d_model 256, 3 + 3 layers, its joint
vocabulary), its batches (the Tatoeba training data, the trainer's `Batches`) and its update (the
trainer's `Updater`: loss, backward pass, clipping, fused AdamW), then per precision:

- the update's speed: target tokens/s and the FLOP/s of its matrix products (counted from the
  batch shapes, padding included), in blocks that alternate with large matrix products
  (`torch.mm`, the same threads) so that a machine shared with other work slows both alike;
- a profile of further updates (torch.profiler), warm-up updates excluded: operators by self
  time, and that time in categories (matrix products, attention, element-wise kernels, layer
  norms, dropout, the loss, the optimiser step, ...); what is left of the wall time is Python
  and the framework between operators (the autograd engine, the dispatcher, the profiler's
  own cost, which it inflates).

Prints one JSON object per precision, then a markdown table of each. bf16 where the CPU has
no bf16 instructions (no avx512_bf16, no AMX) is emulated, tens of times slower than fp32:
there fp32 alone is profiled unless bf16 is asked for (`--precision bf16`, with few updates:
`--bf16-steps`).

    python scripts/profile_update.py --data ../shared/data [--steps 20] [--threads 2]
        [--precision fp32 --precision bf16] [--set train.pack=true]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import mt.model
import mt.training.loss
from mt.config_file import load_config
from mt.data.batches import Batches, Position
from mt.data.packing import row_length
from mt.data.prepare import prepare
from mt.device import DTYPES, cpu_bf16_emulated, cpu_description
from mt.model import Transformer
from mt.training.ranks import Ranks
from mt.training.update import Optimiser, Updater

LR = 5e-4  # a constant rate: the schedule costs nothing
MATMULS = {"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
COPIES = {"aten::to", "aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous"}
VIEWS = {
    "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::transpose", "aten::permute",
    "aten::t", "aten::expand", "aten::unflatten", "aten::flatten", "aten::as_strided",
    "aten::squeeze", "aten::unsqueeze", "aten::select", "aten::slice", "aten::alias",
    "aten::detach", "aten::_unsafe_view", "aten::empty", "aten::empty_like",
    "aten::empty_strided", "aten::split", "aten::unbind", "aten::chunk", "aten::narrow",
    "aten::resize_", "aten::lift_fresh", "aten::zeros", "aten::new_zeros", "aten::new_empty",
    "aten::unsafe_split", "aten::expand_as", "aten::view_as", "aten::result_type",
}  # fmt: skip


def recipe(data: Path, config_name: str, overrides: list[str]):
    """The recipe's config and its prepared data (cached under runs/bench-data)."""
    files = {s: data / f"tatoeba_en_es.{s}.jsonl.gz" for s in ("train", "valid", "test")}
    config = load_config(
        config_name,
        [*(f"data.files.{s}={f}" for s, f in files.items()), "run.dir=runs/bench-data", *overrides],
    )
    return config, prepare(config)


def training_batches(config, prepared, count: int, seed: int = 0) -> list:
    """The first `count` batches of an epoch as the trainer makes them, padded or packed as
    train.pack chooses on a CPU."""
    batches = Batches(
        prepared.splits["train"],
        config.train.max_tokens,
        seed,
        Position(),
        prefetch=False,
        pack_length=row_length(config, "cpu"),
    )
    made = [next(batches) for _ in range(count)]
    batches.close()
    return made


def updater_for(config, vocab: int, dtype, compiled: bool = False, seed: int = 0) -> Updater:
    """A fresh recipe model and the trainer's update of it, on the CPU."""
    torch.manual_seed(seed)
    model = Transformer(config.model, vocab, vocab, joint=config.tokenizer.joint)
    ranks = Ranks("cpu")
    optimiser = Optimiser(model, config.train, ranks.device)
    return Updater(model, model, optimiser, config.train, ranks, dtype, compiled)


def update_flops(cfg, vocab: int, batch) -> int:
    """FLOPs of the matrix products of one update on `batch` (forward, and twice that
    backward), counted on its padded shapes: what the kernels compute, padding included."""
    (b, s), t = batch.src.shape, batch.tgt_in.size(1)
    d, f = cfg.d_model, cfg.d_ff
    encoder = b * s * 2 * (3 * d * d + d * d + 2 * d * f) + 4 * b * s * s * d
    decoder = b * t * 2 * (3 * d * d + 3 * d * d + 2 * d * f) + b * s * 2 * 2 * d * d
    decoder += 4 * b * t * t * d + 4 * b * t * s * d  # self- and cross-attention
    out = b * t * 2 * d * vocab
    return 3 * (cfg.encoder_layers * encoder + cfg.decoder_layers * decoder + out)


def matmul_rate(m: int, k: int, n: int, dtype: torch.dtype, seconds: float) -> float:
    """FLOP/s of (m x k) @ (k x n) in `dtype`, products repeated for about `seconds`."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)  # untimed: the kernel's first call
    done, start = 0, time.perf_counter()
    while not done or time.perf_counter() - start < seconds:
        torch.mm(a, b)
        done += 1
    return 2 * m * k * n * done / (time.perf_counter() - start)


@contextmanager
def labelled():
    """What op names alone do not tell, labelled for the profile: dropout's masks, the loss,
    clipping (the optimiser's step and zero_grad label themselves)."""
    saved = mt.model.Dropout.forward, mt.training.loss.smoothed_loss, torch.nn.utils.clip_grad_norm_

    def label(name, fn):
        def run(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)

        return run

    mt.model.Dropout.forward = label("dropout", saved[0])
    mt.training.loss.smoothed_loss = label("loss", saved[1])
    torch.nn.utils.clip_grad_norm_ = label("clip_grad_norm", saved[2])
    try:
        yield
    finally:
        mt.model.Dropout.forward, mt.training.loss.smoothed_loss = saved[:2]
        torch.nn.utils.clip_grad_norm_ = saved[2]


def category(names: list[str]) -> str:
    """The category of an operator's self time, from its name and its callers' (`names`,
    innermost first): labels and autograd nodes say the part of the update, op names the
    kind of kernel."""
    own = names[0]

    def any_has(*parts: str) -> bool:
        return any(p in name for name in names for p in parts)

    if any_has("Optimizer.", "clip_grad_norm"):
        return "optimiser step (clipping, fused AdamW, zero_grad)"
    if any_has("loss", "SmoothedLoss"):
        return "loss (log-softmax over the vocabulary, its gradient)"
    if any_has("dropout", "MulBackward0"):
        return "dropout (masks; backward: x * mask, and the embeddings' scaling)"
    if any_has("layer_norm", "LayerNorm"):
        return "layer norm"
    if any_has("embedding", "Embedding"):
        return "embedding lookups and their gradient"
    if own in COPIES:
        return "copies and casts"
    if any_has("scaled_dot_product", "ScaledDotProduct", "softmax", "Softmax"):
        return "attention kernels (SDPA; softmax where explicit)"
    if any(n in MATMULS or "mmBackward" in n or "MmBackward" in n for n in names):
        return "matrix products (mm, addmm, bmm, linear; bias gradients)"
    if own in VIEWS:
        return "views and allocations"
    return "element-wise and other kernels"


class Profile:
    """Self time of the operators of profiled updates, by operator and by category."""

    def __init__(self) -> None:
        self.by_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])  # self us, calls
        self.by_category: dict[str, float] = defaultdict(float)  # self us
        self.updates, self.wall, self.unprofiled = 0, 0.0, 0.0

    def update(self, updater: Updater, batch) -> None:
        """One update on `batch` without the profiler, timed, then one with it: the same
        shapes under the same load."""
        start = time.perf_counter()
        updater([batch], LR)
        self.unprofiled += time.perf_counter() - start
        with labelled(), profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            updater([batch], LR)
            self.wall += time.perf_counter() - start
        self.updates += 1
        for event in prof.events():
            if not event.name.startswith("aten::"):
                continue  # labels, autograd nodes: their self time is Python and the engine
            self.by_op[event.name][0] += event.self_cpu_time_total
            self.by_op[event.name][1] += 1
            names, parent = [event.name], event.cpu_parent
            while parent is not None:
                names.append(parent.name)
                parent = parent.cpu_parent
            self.by_category[category(names)] += event.self_cpu_time_total

    def record(self) -> dict:
        n, ms = self.updates, 1e3 / self.updates
        op_s = sum(us for us, _ in self.by_op.values()) / 1e6
        top = sorted(self.by_op.items(), key=lambda item: -item[1][0])[:15]
        ranked = sorted(self.by_category.items(), key=lambda kv: -kv[1])
        return {
            "updates": n,
            "wall_ms_per_update": self.wall * ms,
            "unprofiled_ms_per_update": self.unprofiled * ms,
            "op_calls_per_update": sum(c for _, c in self.by_op.values()) / n,
            "categories_ms_per_update": {
                **{k: us / 1e6 * ms for k, us in ranked},
                OVERHEAD: (self.wall - op_s) * ms,
            },
            "top_ops": [
                {"op": name, "self_ms_per_update": us / 1e6 * ms, "calls_per_update": c / n}
                for name, (us, c) in top
            ],
        }


OVERHEAD = "Python and the framework between operators (wall minus operators)"
SHAPES = ((2048, 256, 1024), (4096, 4096, 4096))  # the recipe's feed-forward, a large one


def measure(config, vocab: int, batches: list, precision: str, args) -> dict:
    """Timed updates in blocks alternating with matrix products in fp32 and bf16 (where
    `args.matmuls`), each timed update followed by a profiled one on the same batch."""
    dtype = DTYPES[precision]
    steps = args.steps if dtype is None else args.bf16_steps
    warm, timed = batches[:2], batches[2 : 2 + steps]
    updater = updater_for(config, vocab, dtype)
    for batch in warm:  # untimed: allocations, the kernels' first calls
        updater([batch], LR)
    seconds, tokens, flops, padded, cells = 0.0, 0, 0, 0, 0
    mm: dict[str, list[float]] = defaultdict(list)
    profiled = Profile()
    for block in (timed[i :: args.rounds] for i in range(args.rounds)):
        for batch in block:
            start = time.perf_counter()
            done = updater([batch], LR)
            seconds += time.perf_counter() - start
            tokens += done.tokens
            flops += update_flops(config.model, vocab, batch)
            padded, cells = padded + done.padded, cells + done.cells
            profiled.update(updater, batch)
        for mm_dtype in (torch.float32, torch.bfloat16) if args.matmuls else ():
            for shape in SHAPES:
                if mm_dtype == torch.float32 or shape == SHAPES[0] or args.native_bf16:
                    # (an emulated bf16 product of 4096^3 takes minutes)
                    name = f"{dtype_label(mm_dtype)} {'x'.join(map(str, shape))}"
                    mm[name].append(matmul_rate(*shape, mm_dtype, args.mm_seconds))
    rate = flops / seconds
    return {
        "precision": precision,
        "threads": torch.get_num_threads(),
        "timed_updates": len(timed),
        "target_tokens_per_s": tokens / seconds,
        "update_gflops": rate / 1e9,
        "matmul_gflops": {k: statistics.median(v) / 1e9 for k, v in mm.items()},
        "update_over_matmul": {k: rate / statistics.median(v) for k, v in mm.items()},
        "padding": padded / cells,
        "profile": profiled.record(),
    }


def dtype_label(dtype: torch.dtype) -> str:
    return "fp32" if dtype == torch.float32 else "bf16"


def table(record: dict) -> str:
    """The record as markdown: the speed line, the categories, the top operators."""
    p = record["profile"]
    wall_ms = p["wall_ms_per_update"]
    mm = ", ".join(
        f"{k}: {v:.1f} GFLOP/s (update at {record['update_over_matmul'][k]:.0%})"
        for k, v in record["matmul_gflops"].items()
    )
    lines = [
        f"**{record['precision']}**, {record['threads']} threads: "
        f"{record['target_tokens_per_s']:,.0f} target tokens/s, matrix products of the update "
        f"at {record['update_gflops']:.1f} GFLOP/s; torch.mm in the same run: {mm}. "
        f"Profiled: {wall_ms:.0f} ms an update ({p['unprofiled_ms_per_update']:.0f} ms "
        f"unprofiled, same batches), {p['op_calls_per_update']:.0f} operator calls.",
        "",
        "| where the time goes | ms an update | share |",
        "| --- | ---: | ---: |",
    ]
    for name, ms in p["categories_ms_per_update"].items():
        lines.append(f"| {name} | {ms:.1f} | {ms / wall_ms:.1%} |")
    lines += [
        "",
        "| operator (self time) | ms an update | calls | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    for op in p["top_ops"]:
        ms = op["self_ms_per_update"]
        lines.append(
            f"| `{op['op']}` | {ms:.1f} | {op['calls_per_update']:.0f} | {ms / wall_ms:.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--config", default="tatoeba_cpu.yaml")
    parser.add_argument("--steps", type=int, default=20, help="fp32 updates timed, and profiled")
    parser.add_argument("--bf16-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="blocks of updates and products")
    parser.add_argument("--mm-seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--precision", action="append", choices=("fp32", "bf16"))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    flags = cpu_description()
    args.native_bf16 = not cpu_bf16_emulated()
    config, prepared = recipe(Path(args.data), args.config, args.overrides)
    vocab = prepared.src_tokenizer.get_vocab_size()
    batches = training_batches(config, prepared, 2 + args.steps)
    records = []
    precisions = args.precision or ["fp32", *(["bf16"] if args.native_bf16 else [])]
    for i, precision in enumerate(precisions):
        args.matmuls = i == 0  # the products once, beside the first precision's updates
        record = {"cpu": flags, "date": time.strftime("%Y-%m-%d %H:%M")}
        record |= measure(config, vocab, batches, precision, args)
        if i:  # the first precision's products, measured in this run
            mm = records[0]["matmul_gflops"]
            record["matmul_gflops"] = mm
            record["update_over_matmul"] = {k: record["update_gflops"] / v for k, v in mm.items()}
        record["load_average"] = os.getloadavg()
        print(json.dumps(record), flush=True)
        records.append(record)
    for record in records:
        print("\n" + table(record))


if __name__ == "__main__":
    main()
