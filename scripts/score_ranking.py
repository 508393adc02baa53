"""Does `mt score` prefer a reference to a wrong translation? For each test pair, the model's
score of its reference against that of another pair's reference (a seeded derangement: no
pair keeps its own), both length-normalised as beam search ranks and as total log-probability.
Prints one JSON object with the machine it ran on; `make bench`'s step `score`
(`python scripts/bench.py --only score`) renders it.

    python scripts/score_ranking.py runs/tatoeba_cpu \
        --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from benchkit import machine


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    return [
        "## `mt score`: a reference against another pair's",
        "",
        f"`{r['checkpoint']}` on {r['pairs']:,} Tatoeba test pairs, each scored with its own "
        "reference and with another pair's (a seeded derangement; "
        f"{r['identical_references']} identical references). Machine: {r['machine']}. "
        "Command: `python scripts/score_ranking.py runs/bench/tatoeba_cpu --pairs "
        "../shared/data/tatoeba_en_es.test.jsonl.gz`.",
        "",
        "| ranked by | reference first |",
        "|---|---:|",
        f"| length-normalised score | {r['reference_ranked_first_score']:.1%} |",
        f"| total log-probability | {r['reference_ranked_first_logprob']:.1%} |",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--pairs", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from mt.data.corpus import read_pairs_jsonl
    from mt.decoding.engine import open_translator

    translator = open_translator(args.checkpoint, "torch", "cpu")
    pairs = read_pairs_jsonl(args.pairs, "en", "es")
    cycle = np.random.default_rng(args.seed).permutation(len(pairs))
    other = np.empty_like(cycle)  # each pair takes the reference of the one before it in a
    other[cycle] = np.roll(cycle, 1)  # random cycle: never its own
    swapped = [(src, pairs[j][1]) for (src, _), j in zip(pairs, other.tolist())]
    scored = [translator.score(p) for p in (pairs, swapped)]
    same = sum(a == b for (_, a), (_, b) in zip(pairs, swapped))  # identical references
    result = {
        "checkpoint": str(translator.path),
        "pairs": len(pairs),
        "identical_references": same,
        "reference_ranked_first_score": float(
            np.mean([r.score > w.score for r, w in zip(*scored)])
        ),
        "reference_ranked_first_logprob": float(
            np.mean([r.logprob > w.logprob for r, w in zip(*scored)])
        ),
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
