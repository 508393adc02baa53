"""`mt score` against `mt translate --beam 1` on the same pairs, both at their default batch
size, as a person runs them: each command end to end (the model loaded, every pair read,
every line printed), in turns, so that both see the same load. Prints one JSON object.

Scoring reads each target with teacher forcing in one forward pass a batch; greedy search
runs the decoder once per output token, so scoring should cost no more than translating.
With `--reference DIR` (another checkout of mt, e.g. one from before `mt score` batched by
the device's size), its `mt score` is timed once too.

    python scripts/bench_score.py RUN --pairs ../shared/data/tatoeba_en_es.test.jsonl.gz
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MT = [sys.executable, "-m", "mt"]


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, list[str]]:
    """Seconds `command` took (run in `cwd`: `python -m mt` imports the mt found there
    first), and its stdout's lines; a failure stops the benchmark."""
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=cwd)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(command)}")
    print(f"{seconds:.1f} s: {shlex.join(command)}", file=sys.stderr, flush=True)
    return seconds, done.stdout.splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="run folder or checkpoint")
    parser.add_argument("--pairs", required=True, help="test pairs (.jsonl.gz with en, es)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each command")
    parser.add_argument("--reference", type=Path, help="another mt checkout: its score, once")
    args = parser.parse_args()

    from mt.data.corpus import read_pairs_jsonl
    from mt.device import cpu_description

    pairs = read_pairs_jsonl(args.pairs, "en", "es")
    with tempfile.TemporaryDirectory(prefix="bench-score-") as tmp:
        sources = Path(tmp) / "sources.txt"
        sources.write_text("".join(src + "\n" for src, _ in pairs), encoding="utf-8")
        model, pairs_file = (str(Path(p).resolve()) for p in (args.model, args.pairs))
        score = [*MT, "score", model, "--pairs", pairs_file, "--device", "cpu"]
        translate = [*MT, "translate", "--checkpoint", model, "--file", str(sources)]
        translate += ["--beam", "1", "--device", "cpu"]
        times: dict[str, list[float]] = {"score": [], "translate": []}
        loads = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            seconds, scored = timed(score)
            times["score"].append(seconds)
            seconds, translated = timed(translate)
            times["translate"].append(seconds)
            loads.append(os.getloadavg()[0])
        reference = None
        if args.reference:
            reference = timed(score, args.reference.resolve())[0]
    # greedy outputs about as long as the references: the translate time is a fair one
    words = sum(len(line.split()) for line in translated) / sum(len(t.split()) for _, t in pairs)
    median = {name: statistics.median(found) for name, found in times.items()}
    result = {
        "model": args.model,
        "pairs": len(pairs),
        "scored_lines": len(scored),
        "seconds": times,
        "median_s": median,
        "score_over_translate": median["score"] / median["translate"],
        "reference_score_s": reference,
        "output_words_over_reference_words": words,
        "load_1min": loads,
        "cpu": cpu_description(),
        "command": shlex.join(["python", "scripts/bench_score.py", *sys.argv[1:]]),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
