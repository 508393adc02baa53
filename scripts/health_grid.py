"""The health checks on a grid of small runs on the Tatoeba files: healthy ones (sizes, depths,
learning rates, warm-ups, pre- and post-norm) must run to their end (exit 0), deep post-norm
ones warmed up too briefly for their rate must stop with exit 3 before a third of their
updates, and one that collapses late (after its learning rate peaks) must stop at all. Each run
is `mt train --config tiny.yaml` with its settings, checks on; prints a Markdown table (the one
in docs/benchmarks.md, "Health checks") and one JSON line per run, with how far its validation
NLL rose above its best after the warm-up (scripts/health_replay.py: the runaway margin of
`diverged` is measured against it).

    python scripts/health_grid.py --data ../shared/data [--steps 300] [--jobs 2] [--out DIR]
        [--only NAME,NAME] [--data-from RUN]

--out keeps each run's folder (its metrics.jsonl is the history the checks judged); --only runs
the configurations named, or whose name has one of these; --data-from starts each run from the
prepared data of a run of the grid (no setting of the grid changes a data or tokenizer key, so
each would prepare the same: `mt train` checks that the data fits its config, else prepares).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from health_replay import IN_A_ROW, replay

RUNS, STOPS_EARLY, STOPS = "exit 0", "exit 3 before a third", "exit 3"


def net(d_model=32, layers=2, lr=0.0, warmup=0, pre=False, more=()) -> list[str]:
    """Settings of a model `d_model` wide (feed-forward twice that), `layers` deep each side,
    trained at `lr` after `warmup` updates (0: tiny.yaml's)."""
    return [
        f"model.d_model={d_model}", f"model.d_ff={2 * d_model}",
        f"model.encoder_layers={layers}", f"model.decoder_layers={layers}",
        f"model.norm_first={str(pre).lower()}",
        *([f"train.lr={lr}"] if lr else []),
        *([f"train.warmup_steps={warmup}"] if warmup else []),
        *more,
    ]  # fmt: skip


# name, what is expected, settings on top of tiny.yaml (d_model 32, 2+2 layers, d_ff 64,
# post-norm, inverse_sqrt to lr 3e-3 after 10 updates)
GRID = [
    ("tiny", RUNS, net()),
    ("tiny pre-norm", RUNS, net(pre=True)),
    ("d32 1+1 lr 1e-2", RUNS, net(32, 1, lr=0.01)),
    ("d64 2+2 lr 1e-3 wu 50", RUNS, net(64, 2, lr=0.001, warmup=50)),
    ("d64 4+4 pre lr 3e-3", RUNS, net(64, 4, pre=True)),
    ("d64 4+4 post lr 1e-3 wu 100", RUNS, net(64, 4, lr=0.001, warmup=100)),
    ("d128 3+3 post lr 1e-3 wu 50", RUNS, net(128, 3, lr=0.001, warmup=50)),
    ("d128 3+3 pre lr 5e-3 wu 50", RUNS, net(128, 3, lr=0.005, warmup=50, pre=True)),
    ("d128 2+2 post lr 5e-4", RUNS, net(128, 2, lr=0.0005)),
    ("d64 6+6 pre lr 5e-3", RUNS, net(64, 6, lr=0.005, pre=True)),
    ("d64 6+6 post lr 5e-3 wu 100", STOPS, net(64, 6, lr=0.005, warmup=100)),
    ("d64 2+2 pre cosine wu 10%", RUNS, net(64, 2, pre=True, more=(
        "train.schedule=cosine", "train.warmup_fraction=0.1"))),
    ("d32 2+2 lr 3e-3 wu 150", RUNS, net(warmup=150)),
    ("d128 4+4 pre lr 1e-3 wu 100", RUNS, net(128, 4, lr=0.001, warmup=100, pre=True)),
    ("d64 6+6 post lr 1e-3 wu 200", RUNS, net(64, 6, lr=0.001, warmup=200)),
    ("tiny no smoothing no dropout", RUNS, net(more=("train.label_smoothing=0",
                                                     "model.dropout=0"))),
    ("d64 6+6 post lr 5e-3 wu 10", STOPS_EARLY, net(64, 6, lr=0.005)),
    ("d64 8+8 post lr 1e-2 wu 5", STOPS_EARLY, net(64, 8, lr=0.01, warmup=5)),
    ("d128 6+6 post lr 5e-3 wu 10", STOPS_EARLY, net(128, 6, lr=0.005)),
]  # fmt: skip


def run(
    name: str,
    expected: str,
    settings: list[str],
    data: Path,
    steps: int,
    root: Path,
    prepared: Path | None,
):
    folder = root / name.replace(" ", "_")
    if prepared and not (folder / "data").exists():
        shutil.copytree(prepared / "data", folder / "data")
        shutil.copy2(prepared / "tokenizer.json", folder)
    common = [
        f"data.files.train={data / 'tatoeba_en_es.train.jsonl.gz'}",
        f"data.files.valid={data / 'tatoeba_en_es.valid.jsonl.gz'}",
        f"run.dir={folder}", f"train.max_steps={steps}", "train.eval_every=25",
        "train.eval_sentences=100", "train.eval_examples=0", "train.save_every=1000",
    ]  # fmt: skip
    args = [sys.executable, "-m", "mt", "train", "--config", "tiny.yaml", "--restart"]
    for item in [*common, *settings]:
        args += ["--set", item]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    records = [json.loads(line) for line in (folder / "metrics.jsonl").open()]
    valid = [r for r in records if r["kind"] == "valid"]
    health = [r for r in records if r["kind"] == "health"]
    last = valid[-1] if valid else {}
    return {
        "name": name,
        "expected": expected,
        "exit": done.returncode,
        "step": max((r["step"] for r in records if "step" in r), default=0),
        "check": health[0]["check"] if health else "",
        "nll": last.get("nll"),
        "gap": last["nll_shuffled"] - last["nll"] if last else None,
        "least_gap": min((abs(r["nll_shuffled"] - r["nll"]) for r in valid), default=None),
        "bleu": last.get("bleu"),
        **{key: value for key, value in replay(folder).items() if key.startswith("rise_")},
        "error": done.stderr.strip().splitlines()[-1] if done.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="the configurations whose name has one of these")
    parser.add_argument("--data-from", type=Path, help="a run whose prepared data each starts from")
    parser.add_argument("--out", type=Path, help="keep the runs' folders here")
    args = parser.parse_args()
    parts = args.only.split(",")
    exact = {name for name, *_ in GRID} & set(parts)  # a whole name: that one alone
    grid = [g for g in GRID if g[0] in exact or any(p in g[0] for p in parts if p not in exact)]
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(args.jobs) as pool:
        root = args.out.resolve() if args.out else Path(scratch)
        common = args.data.resolve(), args.steps, root, args.data_from
        jobs = [pool.submit(run, *g, *common) for g in grid]
        results = [job.result() for job in jobs]
    gap = "source gap: least size, last"
    rise = f"valid NLL over its best, {'/'.join(map(str, IN_A_ROW))} in a row"
    print(f"| run | expected | exit | stopped at | check | valid NLL | {gap} | BLEU | {rise} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        gap = f"{r['least_gap']:.1e}, {r['gap']:.4f}" if r["gap"] is not None else "-"
        nll = f"{r['nll']:.3f}" if r["nll"] is not None else "-"
        bleu = f"{r['bleu']:.2f}" if r["bleu"] is not None else "-"
        rise = " / ".join(f"{r[f'rise_{n}']:+.3f}" for n in IN_A_ROW)
        print(
            f"| {r['name']} | {r['expected']} | {r['exit']} | {r['step']} | {r['check'] or '-'} "
            f"| {nll} | {gap} | {bleu} | {rise} |"
        )
    for r in results:
        print(json.dumps(r))
    sys.exit(int(not all(as_expected(r, args.steps) for r in results)))


def as_expected(result: dict, steps: int) -> bool:
    if result["expected"] == RUNS:
        return result["exit"] == 0 and result["step"] == steps
    early = result["expected"] == STOPS_EARLY
    return result["exit"] == 3 and (not early or result["step"] < steps / 3)


if __name__ == "__main__":
    main()
