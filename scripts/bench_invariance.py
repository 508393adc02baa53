"""Batch invariance: what it costs, and what bf16 decoding would gain and change on a CPU.

Decodes the first `--sentences` sources of `--pairs` in one call (the default batches),
greedy and beam 5, in rounds that alternate: float32 by this checkout (batch-invariant),
float32 by `--baseline` (a checkout whose batches mix lengths, e.g. the commit before
mt.row_linear; optional) and bf16 by this checkout. Then counts the translations bf16
changes against float32, and those of the first `--single` sources that differ alone and in
the batch, in each precision. Prints one JSON object; each way runs in a process of its own.

    python scripts/bench_invariance.py runs/A1/checkpoints/best \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz --baseline ../mt-before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def measure(checkpoint: str, pairs: str, sentences: int, precision: str, beam: int, single: int):
    """One way, in this process: sentences/s of the batched call, its translations, and
    those of the first `single` sources decoded alone."""
    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.engine import open_translator

    sources = [src for src, _ in read_pairs_jsonl(pairs, "en", "es")][:sentences]
    options = [f"decode.precision={precision}", f"decode.beam={beam}"]
    translator = open_translator(checkpoint, "torch", "cpu", decode=options)
    translator.translate(sources[:8])  # warm-up
    started = time.perf_counter()
    batched = translator.translate(sources)
    rate = len(sources) / (time.perf_counter() - started)
    alone = [translator.translate([text])[0] for text in sources[:single]]
    return {"sentences_per_s": rate, "batched": batched, "alone": alone}


def run(args, code: Path, precision: str, beam: int, single: int) -> dict:
    command = [sys.executable, __file__, args.checkpoint, "--pairs", args.pairs]
    command += ["--sentences", str(args.sentences), "--one", f"{precision},{beam},{single}"]
    env = {**os.environ, "PYTHONPATH": str(code)}
    found = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(found.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--single", type=int, default=100, help="sources decoded alone too")
    parser.add_argument("--baseline", type=Path, help="a checkout decoding as before")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: precision,beam,single
    args = parser.parse_args()
    if args.one:
        precision, beam, single = args.one.split(",")
        found = measure(
            args.checkpoint, args.pairs, args.sentences, precision, int(beam), int(single)
        )
        print(json.dumps(found))
        return
    ways = {"fp32": (HERE, "fp32"), "bf16": (HERE, "bf16")}
    if args.baseline:
        ways["fp32_baseline"] = (args.baseline, "fp32")
    results = {}
    for beam in (1, 5):
        rates: dict[str, list[float]] = {name: [] for name in ways}
        kept: dict[str, dict] = {}
        for round in range(args.rounds):  # alternating: the machine's load falls on each
            for name, (code, precision) in ways.items():
                found = run(args, code, precision, beam, args.single if round == 0 else 0)
                rates[name].append(found["sentences_per_s"])
                kept.setdefault(name, found)
        best = {name: max(r) for name, r in rates.items()}
        results[f"beam{beam}"] = {
            "sentences_per_s": rates,
            "bf16_over_fp32": best["bf16"] / best["fp32"],
            **(
                {"fp32_over_baseline": best["fp32"] / best["fp32_baseline"]}
                if args.baseline
                else {}
            ),
            "bf16_changes": sum(
                a != b for a, b in zip(kept["bf16"]["batched"], kept["fp32"]["batched"])
            ),
            "alone_differs": {
                name: sum(a != b for a, b in zip(found["alone"], found["batched"]))
                for name, found in kept.items()
            },
        }
    from mt.device import cpu_description

    print(json.dumps({"cpu": cpu_description(), "sentences": args.sentences, **results}))


if __name__ == "__main__":
    main()
