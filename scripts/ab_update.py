"""Ways of making a CPU update cheaper, each measured alone against the current code: the
recipe's updates (scripts/profile_update.py builds them) in variants that alternate update by
update in one process (in both orders), so that a machine shared with other work slows all
alike. Prints one JSON object: target tokens/s of each variant after its warm-up, the ratio
to the first, that ratio in each quarter of the run (its spread) and their median, and each
variant's warm-up time (compiling, for a compiled one).

    python scripts/ab_update.py --data ../shared/data --variants base,compiled [--updates 60]

Variants: base (the trainer's update today), packed (train.pack: true), foreach (AdamW's
multi-tensor step, not the fused one), threads1 (one thread), compiled (torch.compile of the
loss, dynamic shapes), explicit (attention by matmuls and softmax, not SDPA's fused kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import torch
from profile_update import LR, recipe, training_batches, updater_for

from mt.device import cpu_description

VARIANTS = ("base", "packed", "foreach", "threads1", "compiled", "explicit")
THREADS = torch.get_num_threads()


@dataclass
class Variant:
    update: Callable  # batch -> Update
    batches: list
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    warmup_s: float = 0.0


def build(name: str, config, prepared, vocab: int, count: int) -> Variant:
    """A variant by name; each has its own model, from the same seed."""
    if name == "packed":  # rows of train.pack_length tokens, attended by SDPA with masks
        config = replace(config, train=replace(config.train, pack=True))
    batches = training_batches(config, prepared, count)
    updater = updater_for(config, vocab, None)
    if name in ("base", "packed"):
        return Variant(lambda b: updater([b], LR), batches)
    if name == "foreach":  # AdamW's multi-tensor loop instead of its fused CPU kernel
        for group in updater.optimizer.param_groups:
            group["fused"], group["foreach"] = False, True
        return Variant(lambda b: updater([b], LR), batches)
    if name == "threads1":  # one thread of torch's: the other core left to the rest

        def one_thread(b):
            torch.set_num_threads(1)
            try:
                return updater([b], LR)
            finally:
                torch.set_num_threads(THREADS)

        return Variant(one_thread, batches)
    if name == "explicit":  # attention as matmuls and softmax in every precision

        def explicit(b):
            with mock.patch("mt.model.explicit_attention", lambda device, dtype: True):
                return updater([b], LR)

        return Variant(explicit, batches)
    if name == "compiled":  # shapes symbolic (dynamic=True), not a graph for each
        updater.loss = torch.compile(updater.loss, dynamic=True)
        return Variant(lambda b: updater([b], LR), batches)
    raise SystemExit(f"unknown variant {name}: {', '.join(VARIANTS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--config", default="tatoeba_cpu.yaml")
    parser.add_argument("--variants", default="base,compiled")
    parser.add_argument("--updates", type=int, default=60, help="timed updates per variant")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates per variant")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    config, prepared = recipe(Path(args.data), args.config, args.overrides)
    vocab = prepared.src_tokenizer.get_vocab_size()
    names = args.variants.split(",")
    count = args.warmup + args.updates
    variants = {n: build(n, config, prepared, vocab, count) for n in names}
    load = os.getloadavg()
    for v in variants.values():
        start = time.perf_counter()
        for batch in v.batches[: args.warmup]:
            v.update(batch)
        v.warmup_s = time.perf_counter() - start
    for i in range(args.warmup, count):
        for name in names if i % 2 == 0 else names[::-1]:
            v = variants[name]
            start = time.perf_counter()
            done = v.update(v.batches[i])
            v.seconds.append(time.perf_counter() - start)
            v.tokens.append(done.tokens)

    def rate(v: Variant, part=slice(None)) -> float:
        return sum(v.tokens[part]) / sum(v.seconds[part])

    first = variants[names[0]]
    quarter = max(1, args.updates // 4)
    parts = [slice(q, q + quarter) for q in range(0, args.updates - quarter + 1, quarter)]
    print(
        json.dumps(
            {
                "cpu": cpu_description(),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "threads": torch.get_num_threads(),
                "load_average": [load, os.getloadavg()],
                "updates": args.updates,
                "variants": {
                    name: {
                        "target_tokens_per_s": rate(v),
                        "ratio": rate(v) / rate(first),
                        "quarters": (q := [rate(v, p) / rate(first, p) for p in parts]),
                        "median_of_quarters": statistics.median(q),
                        "warmup_s": v.warmup_s,
                        "seconds": [round(x, 3) for x in v.seconds],
                    }
                    for name, v in variants.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
