"""Terminology constraints on the Tatoeba test: the first N pairs, each constrained to one word
of its reference (its longest, letters only), decoded by beam search with and without the
constraints, in one process, alternating free, constrained, free, constrained ... on the same
sentences and batch size: the share of outputs that contain their word, BLEU and chrF of both,
and decode seconds (medians) with their ratio. Prints one JSON record and a Markdown table.

    python scripts/bench_constraints.py runs/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz -n 500 --beam 5 --repeats 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from mt.data.corpus import read_pairs
from mt.decoding.engine import open_translator
from mt.decoding.evaluate import bleu_chrf


def longest_word(text: str) -> str:
    return max(re.findall(r"[^\W\d_]+", text), key=len, default="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    translator = open_translator(args.checkpoint, device="cpu", decode=[f"decode.beam={args.beam}"])
    pairs = read_pairs([args.pairs], translator.config.data, "--pairs")[: args.n]
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    terms = [[longest_word(r)] if longest_word(r) else [] for r in references]
    decode = translator.config.decode
    seconds: dict[str, list[float]] = {"free": [], "constrained": []}
    outputs: dict[str, list[str]] = {}
    for _ in range(args.repeats):
        for name, constraints in (("free", None), ("constrained", terms)):
            started = time.perf_counter()
            outputs[name] = translator.translate(sources, decode, constraints=constraints)
            seconds[name].append(time.perf_counter() - started)
            print(f"{name}: {seconds[name][-1]:.1f} s", file=sys.stderr, flush=True)
    met = sum(all(t in out for t in ts) for ts, out in zip(terms, outputs["constrained"]))
    free_met = sum(all(t in out for t in ts) for ts, out in zip(terms, outputs["free"]))
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    cpu = Path("/work/wt/cpu.txt")
    record = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["python", *sys.argv]),
        "machine": platform.machine(),
        "cpu": cpu.read_text().strip() if cpu.is_file() else platform.processor(),
        "threads": torch.get_num_threads(),
        "checkpoint": args.checkpoint,
        "sentences": len(sources),
        "beam": args.beam,
        "batch_tokens": decode.batch_tokens,
        "constrained_contain": met / len(sources),
        "free_contain": free_met / len(sources),
        "with_a_term": sum(bool(t) for t in terms),
        "free": bleu_chrf(outputs["free"], references),
        "constrained": bleu_chrf(outputs["constrained"], references),
        "seconds": seconds,
        "ratio": medians["constrained"] / medians["free"],
    }
    print(json.dumps(record, ensure_ascii=False))
    print("| search | outputs with their word | BLEU | chrF | seconds (median) |")
    print("|---|---|---|---|---|")
    for name, share in (("free", free_met), ("constrained", met)):
        score = record[name]
        print(
            f"| beam {args.beam}, {name} | {share / len(sources):.1%} | {score['bleu']:.2f} | "
            f"{score['chrf']:.2f} | {medians[name]:.1f} |"
        )
    print(f"constrained / free time: {record['ratio']:.2f}")


if __name__ == "__main__":
    main()
