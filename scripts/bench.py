"""`make bench`: run every benchmark and rewrite docs/benchmarks.md.

This is the runner; the page is written by scripts/bench_report.py.

Steps (each saves its result in runs/bench/results.json, so a step can be re-run alone with
--only and the page rebuilt from what is there):

  prepare  `mt prepare --rebuild` on the Tatoeba files: wall time and the data summary
  scale    `mt prepare` on 1M, 5M and 20M aligned pairs and 20 updates of `mt train` on each
           store: time, peak RSS and anonymous memory, bytes a pair (scripts/bench_prepare.py)
  speed    ours vs torch.nn.Transformer, training tokens/s on identical batches (one process)
  recipe   the 20-minute CPU recipe (configs/tatoeba_cpu.yaml) trained from scratch: the
           budget is its horizon, fitted on this machine as it runs
  fitted   the same recipe with its horizon fitted by hand: train.max_steps = the updates the
           recipe made, no time limit; test BLEU of both, side by side
  budget   BLEU against budget: the recipe with 5, 10 and 40 minutes (20 is `recipe`)
  quality  BLEU/chrF, greedy and beam 5, Tatoeba test and FLORES-200 devtest, peak memory
  decode   decoding speed, batched vs one sentence at a time, greedy and beam 5
  export   mt (PyTorch) vs its CTranslate2 export, float32 and int8: speed, BLEU, memory, size
  hf       mt vs its --format hf export in transformers and its CT2 export: BLEU, sentences/s
           and outputs equal to mt's, greedy and beam 5 (scripts/bench_hf.py)
  serve    mt serve under 64 concurrent clients for 60 s against mt translate in one batch
  text     paragraphs of 4 Tatoeba test sentences against the sentences one a line: BLEU and
           time (scripts/bench_text.py), and the sentence splitters (scripts/bench_splitter.py)
  langid   language identifiers on Tatoeba and FLORES (those installed), and
           data.filter_language on a corrupted Tatoeba train file (scripts/bench_langid.py)
  long     real text: joined sentences, the longest line, spans, whole split, FLORES
           (scripts/bench_long.py)
  markup   inline tags carried into translations: per text node, placeholders, alignment,
           anchors (scripts/bench_markup.py)
  score    `mt score` of each test pair's reference against another pair's: how often the
           reference ranks first (scripts/score_ranking.py; not in the default steps)
  abuse    `mt serve` under each class of hostile request: answer, time, memory, /health
           (scripts/bench_abuse.py; not in the default steps)
  ensemble two recipe runs of other seeds: BLEU of each, of their ensemble and of mt average
           (scripts/bench_ensemble.py; two 20-minute trainings: not in the default steps)
  backtranslation  half of Tatoeba parallel, the other half's Spanish back-translated by
           beam and by sampling (tagged): three forward runs, Tatoeba and FLORES BLEU
           (scripts/bench_backtranslation.py; four trainings: not in the default steps)

    python scripts/bench.py --data ../shared/data [--only speed,decode] [--minutes 20]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_prepare import run as run_scale
from bench_report import DOC, kept, plot_budget, render
from benchkit import machine

from mt.training.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "runs" / "bench" / "results.json"
RUN = ROOT / "runs" / "bench" / "tatoeba_cpu"
PY = sys.executable
MT = str(Path(sys.executable).parent / "mt")


def run(args: list[str], log: Path | None = None) -> tuple[str, float]:
    """Run a command; return its stdout and its peak resident memory in GiB."""
    print("$", shlex.join(args), file=sys.stderr, flush=True)
    with open(log, "w") if log else open(os.devnull, "w") as err:
        process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        out = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(
            f"failed ({os.waitstatus_to_exitcode(status)}): {shlex.join(args)}"
            + (f"; see {log}" if log else "")
        )
    return out, usage.ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def data_overrides(data: Path) -> list[str]:
    return [
        arg
        for split in ("train", "valid", "test")
        for arg in ("--set", f"data.files.{split}={data / f'tatoeba_en_es.{split}.jsonl.gz'}")
    ]


def step_prepare(data: Path, results: dict) -> None:
    args = [
        MT,
        "prepare",
        "--config",
        "tatoeba_cpu.yaml",
        *data_overrides(data),
        "--set",
        f"run.dir={RUN.parent / 'prepare'}",
        "--rebuild",
        "--json",
    ]
    started = time.perf_counter()
    out, peak = run(args)
    stats = last_json(out)
    results["prepare"] = {
        "seconds": time.perf_counter() - started,
        "peak_gib": peak,
        "pairs": stats["pairs"],
        "dropped": stats["dropped"],
        "round_trip": stats["round_trip"],
    }


def step_scale(data: Path, results: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="mt-bench-prepare-") as work:  # never the repo
        results["scale"] = run_scale(data, [1_000_000, 5_000_000, 20_000_000], 20, Path(work))


def step_speed(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_train_speed.py", "--data", str(data)])
    # one line per precision: float32 first, then bf16 (or fp16) where it pays on this machine
    fp32, *reduced = [json.loads(line) for line in out.strip().splitlines()]
    results["speed"] = {**fp32, "matmul_gflops": matmul_gflops(), "reduced": reduced}


def matmul_gflops() -> float:
    """fp32 GFLOP/s of a (2048 x 1024) @ (1024 x 1024) product: the machine's raw speed."""
    import torch

    a, b = torch.randn(2048, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(30):
        a @ b
    return 30 * 2 * 2048 * 1024 * 1024 / (time.perf_counter() - started) / 1e9


def train_recipe(data: Path, run_dir: Path, *overrides: str) -> dict:
    """Train the CPU recipe into `run_dir` from scratch; what it did and what it scores."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    common = [*data_overrides(data), "--set", f"run.dir={run_dir}"]
    run([MT, "prepare", "--config", "tatoeba_cpu.yaml", *common])  # not part of the budget
    args = [MT, "train", "--config", "tatoeba_cpu.yaml", *common, *overrides, "--restart"]
    started = time.perf_counter()
    _, peak = run(args, log=run_dir.parent / f"{run_dir.name}.log")
    wall = time.perf_counter() - started
    metrics = read_metrics(run_dir)
    train = [m for m in metrics if m["kind"] == "train"]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())["train"]
    test, _ = run([MT, "evaluate", str(run_dir), "--pairs",
                   str(data / "tatoeba_en_es.test.jsonl.gz"), "--beam", "5", "--json"])  # fmt: skip
    return {
        "command": shlex.join(["mt", *args[1:]])
        .replace(str(data), "$DATA")
        .replace(str(ROOT) + "/", ""),
        "wall_s": wall,
        "train_s": max(m["elapsed_s"] for m in metrics),
        "budget_s": config["max_minutes"] * 60,
        "peak_gib": peak,
        "valid": [
            {k: m[k] for k in ("step", "elapsed_s", "bleu", "loss")}
            for m in metrics
            if m["kind"] == "valid"
        ],
        "horizons": [(m["step"], m["horizon"]) for m in metrics if m["kind"] == "horizon"],
        "steps": max((m["step"] for m in metrics), default=0),
        "last_lr": train[-1]["lr"] if train else None,
        "min_lr": config["min_lr"],
        "tokens_per_s": sum(m["tokens_per_s"] for m in train[1:]) / max(len(train) - 1, 1),
        "padding": sum(m["padding"] for m in train) / max(len(train), 1),
        "test_bleu5": last_json(test)["bleu"],
    }


def step_recipe(data: Path, results: dict, minutes: float) -> None:
    # log a line an update: the last update's rate is then in the metrics
    results["recipe"] = train_recipe(
        data, RUN, "--set", f"train.max_minutes={minutes}", "--set", "train.log_every=1"
    )


def step_fitted(data: Path, results: dict) -> None:
    steps = results["recipe"]["steps"]
    results["fitted"] = train_recipe(
        data, RUN.parent / "fitted", "--set", f"train.max_steps={steps}",
        "--set", "train.max_minutes=0", "--set", "train.log_every=1",
    )  # fmt: skip


def step_budget(data: Path, results: dict) -> None:
    budget = results.setdefault("budget", {})
    for minutes in (5, 10, 40):
        budget[str(minutes)] = train_recipe(
            data, RUN.parent / f"budget-{minutes}", "--set", f"train.max_minutes={minutes}",
            "--set", "train.log_every=1",
        )  # fmt: skip
        RESULTS.write_text(json.dumps(results, indent=2))


def step_quality(data: Path, results: dict) -> None:
    rows = []
    for name, file in (
        ("Tatoeba test", "tatoeba_en_es.test.jsonl.gz"),
        ("FLORES-200 devtest", "flores200_devtest_en_es.jsonl.gz"),
    ):
        for beam in (1, 5):
            out, peak = run(
                [
                    MT,
                    "evaluate",
                    str(RUN),
                    "--pairs",
                    str(data / file),
                    "--beam",
                    str(beam),
                    "--json",
                    "--device",
                    "cpu",
                ]
            )
            result = last_json(out)
            rows.append(
                {
                    "set": name,
                    "beam": beam,
                    "peak_gib": peak,
                    **{
                        k: result[k]
                        for k in (
                            "bleu",
                            "chrf",
                            "bleu_signature",
                            "chrf_signature",
                            "sentences",
                            "seconds",
                        )
                    },
                }
            )
    results["quality"] = rows


def step_decode(data: Path, results: dict) -> None:
    out, _ = run(
        [
            PY,
            "scripts/bench_decode.py",
            str(RUN),
            "--pairs",
            str(data / "tatoeba_en_es.test.jsonl.gz"),
            "--data",
            str(data),
        ]
    )
    results["decode"] = last_json(out)


def step_export(data: Path, results: dict) -> None:
    out, _ = run(
        [
            PY,
            "scripts/bench_export.py",
            str(RUN),
            "--pairs",
            str(data / "tatoeba_en_es.test.jsonl.gz"),
        ]
    )
    results["export"] = last_json(out)


def on_test_pairs(data: Path, script: str, *extra: str) -> dict:
    """The JSON line of `script` run on the recipe model and the Tatoeba test pairs."""
    pairs = str(data / "tatoeba_en_es.test.jsonl.gz")
    out, _ = run([PY, script, str(RUN), "--pairs", pairs, *extra])
    return last_json(out)


def step_langid(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_langid.py", "--data", str(data)])
    results["langid"] = last_json(out)


def step_hf(data: Path, results: dict) -> None:
    results["hf"] = on_test_pairs(data, "scripts/bench_hf.py", "--repeats", "3")


def step_serve(data: Path, results: dict) -> None:
    results["serve"] = on_test_pairs(data, "scripts/bench_serve.py")


def step_text(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_text.py", str(RUN), "--data", str(data)])
    results["text"] = last_json(out)
    out, _ = run([PY, "scripts/bench_splitter.py", "--data", str(data), "--json"])
    results["splitter"] = last_json(out)


def step_long(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_long.py", str(RUN), "--data", str(data)])
    results["long"] = last_json(out)


def step_markup(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_markup.py", "--checkpoint", str(RUN), "--data", str(data)])
    results["markup"] = last_json(out)


def step_score(data: Path, results: dict) -> None:
    results["score"] = on_test_pairs(data, "scripts/score_ranking.py")


def step_abuse(data: Path, results: dict) -> None:
    out, _ = run([PY, "scripts/bench_abuse.py", str(RUN)])
    results["abuse"] = last_json(out)


def step_script(data: Path, results: dict, name: str, minutes: float) -> None:
    """scripts/bench_NAME.py at `minutes` a training, in runs/bench/NAME: its JSON record."""
    out, _ = run([PY, f"scripts/bench_{name}.py", "--data", str(data),
                  "--minutes", str(minutes), "--out", str(RUN.parent / name)])  # fmt: skip
    results[name] = last_json(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument(
        "--only",
        default="prepare,scale,speed,recipe,fitted,quality,decode,budget,export,serve,langid,markup,hf,long",
    )
    parser.add_argument("--minutes", type=float, default=20.0)
    args = parser.parse_args()
    data = args.data.resolve()
    if not (data / "tatoeba_en_es.train.jsonl.gz").is_file():
        raise SystemExit(f"{data}: the Tatoeba files are not there (set DATA=...)")
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    steps = {
        "prepare": lambda: step_prepare(data, results),
        "scale": lambda: step_scale(data, results),
        "speed": lambda: step_speed(data, results),
        "recipe": lambda: step_recipe(data, results, args.minutes),
        "fitted": lambda: step_fitted(data, results),
        "budget": lambda: step_budget(data, results),
        "quality": lambda: step_quality(data, results),
        "decode": lambda: step_decode(data, results),
        "export": lambda: step_export(data, results),
        "hf": lambda: step_hf(data, results),
        "serve": lambda: step_serve(data, results),
        "text": lambda: step_text(data, results),
        "langid": lambda: step_langid(data, results),
        "markup": lambda: step_markup(data, results),
        "long": lambda: step_long(data, results),
        "score": lambda: step_score(data, results),
        "abuse": lambda: step_abuse(data, results),
        "ensemble": lambda: step_script(data, results, "ensemble", args.minutes),
        "backtranslation": lambda: step_script(data, results, "backtranslation", args.minutes),
    }
    for name in filter(None, args.only.split(",")):  # --only "" re-renders the page
        steps[name]()
        results["date"] = datetime.date.today().isoformat()
        results["machine"] = machine()
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2))
        DOC.write_text(render(results) + kept())
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(results) + kept())
    plot_budget(results)
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
