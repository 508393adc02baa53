"""Decoding with CUDA graphs against without: sentences/s of greedy and beam 5, fp32 and what
`decode.precision: auto` picks, in one process, alternating the two plans round after round on
the same sentences (medians reported), with the share of sentences decoded to the same tokens.

"graphs": the GPU's plan (`mt.decoding.search.plan_for`: static cache in buffers shaped by
bucket, one CUDA graph per bucket and cache read length, replayed); "eager": the same search
with the static cache stepped eagerly (no graphs, no buckets). On a machine without CUDA the
first is the bucketed cache stepped eagerly, which only exercises this script. Prints one JSON
record and a Markdown table.

    python scripts/bench_graphs.py RUN --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch

import mt.decoding.translate
from mt import checkpoint
from mt.data.corpus import read_pairs_jsonl
from mt.decoding.graphs import graphs_for
from mt.decoding.pieces import source_pieces
from mt.decoding.search import Plan
from mt.decoding.translate import translate_ids
from mt.device import cpu_info, precision_for
from mt.model import max_sentence_tokens


def plans(device: torch.device) -> dict[str, Plan]:
    cuda = device.type == "cuda"
    return {
        "graphs": Plan(check_every=8, static=True, buckets=True, graph=cuda),
        "eager": Plan(check_every=8, static=True),
    }


def timed(model, ids, cfg, device: torch.device, plan: Plan) -> tuple[float, list]:
    """Seconds to decode `ids` by `plan` (translate_ids' batching), and the best tokens."""
    mt.decoding.translate.plan_for = lambda _: plan  # translate_ids asks plan_for for its plan
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    found = translate_ids(model, ids, cfg, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started, [hyps[0].tokens if hyps else [] for hyps in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sentences", type=int, default=0, help="the first N (0: all)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    loaded = checkpoint.load(args.checkpoint, device)
    pairs = read_pairs_jsonl(args.pairs, "en", "es")[: args.sentences or None]
    ids = source_pieces(
        loaded.src_tokenizer, [s for s, _ in pairs], max_sentence_tokens(loaded.model.cfg)
    ).ids
    rows = []
    for beam in (1, 5):
        for precision in ("fp32", "auto"):
            cfg = dataclasses.replace(loaded.config.decode, beam=beam, nbest=1, precision=precision)
            seconds: dict[str, list[float]] = {name: [] for name in plans(device)}
            outputs, captured = {}, graphs_for(loaded.model).captures
            for plan in plans(device).values():  # warm-up: captures, autotuning
                timed(loaded.model, ids[:64], cfg, device, plan)
            for _ in range(args.rounds):
                for name, plan in plans(device).items():
                    took, outputs[name] = timed(loaded.model, ids, cfg, device, plan)
                    seconds[name].append(took)
            speed = {name: len(ids) / statistics.median(s) for name, s in seconds.items()}
            rows.append(
                {
                    "search": "greedy" if beam == 1 else f"beam {beam}",
                    "precision": precision_for(precision, device)[1].split(",")[0],
                    "sentences": len(ids),
                    "graphs_sentences_per_s": speed["graphs"],
                    "eager_sentences_per_s": speed["eager"],
                    "graphs_over_eager": speed["graphs"] / speed["eager"],
                    "captures": graphs_for(loaded.model).captures - captured,  # warm-up's too
                    "same_tokens": statistics.mean(
                        a == b for a, b in zip(outputs["graphs"], outputs["eager"])
                    ),
                }
            )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_info()[0]
    print(json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1))
    print(
        "\n| search | precision | sentences | graphs sent/s | eager sent/s | ratio | same", end=""
    )
    print(" | captures |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['search']} | {r['precision']} | {r['sentences']:,} | "
            f"{r['graphs_sentences_per_s']:,.1f} | {r['eager_sentences_per_s']:,.1f} | "
            f"{r['graphs_over_eager']:.2f}x | {r['same_tokens']:.1%} | {r['captures']} |"
        )


if __name__ == "__main__":
    main()
