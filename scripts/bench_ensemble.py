"""An ensemble of two recipe runs against each alone and against checkpoint averaging: the
20-minute CPU recipe (configs/tatoeba_cpu.yaml) trained twice from scratch, run.seed 1234 and
another, then BLEU with beam 5 on the Tatoeba test of each run alone, of the two decoded as one
ensemble (`mt evaluate A --checkpoint B`), and of `mt average` of the first run's last
checkpoints. Prints a Markdown table with the machine line, then one JSON record.

Two 20-minute trainings and four decodings of the test set: about an hour on a quiet 2-core
CPU. A smoke run of its plumbing (tiny model, 200 pairs, well under a minute of training):

    python scripts/bench_ensemble.py --data ../shared/data [--out runs/bench/ensemble]
    python scripts/bench_ensemble.py --config tiny.yaml --minutes 0.2 --limit 200 --out /tmp/e
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

MT = str(Path(sys.executable).parent / "mt")
TATOEBA = "tatoeba_en_es.{}.jsonl.gz"
FLORES = "flores200_devtest_en_es.jsonl.gz"


def mt(*args: str, log: Path | None = None) -> str:
    """Run `mt ARGS` (its stderr to `log`, else passed on); its stdout, or exit naming it."""
    print("$ mt", shlex.join(args), file=sys.stderr, flush=True)
    with open(log, "w") if log else contextlib.nullcontext() as err:  # None: ours
        found = subprocess.run([MT, *args], stdout=subprocess.PIPE, stderr=err, text=True)
    if found.returncode != 0:
        where = f"; see {log}" if log else ""
        raise SystemExit(f"failed ({found.returncode}): mt {shlex.join(args)}{where}")
    return found.stdout


def cut(file: Path, out: Path, limit: int) -> Path:
    """`file` (gzip JSON Lines), or its first `limit` lines written to `out` (limit > 0)."""
    if not limit:
        return file
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(file, "rt", encoding="utf-8") as f:
        out.write_text("".join(line for _, line in zip(range(limit), f)), encoding="utf-8")
    return out


def tatoeba(data: Path, work: Path, limit: int) -> dict[str, Path]:
    """The Tatoeba train, valid and test files (each cut to `limit` pairs if given)."""
    return {
        split: cut(data / TATOEBA.format(split), work / "data" / f"{split}.jsonl", limit)
        for split in ("train", "valid", "test")
    }


def train(
    run_dir: Path, config: str, minutes: float, files: dict[str, object], *overrides: str
) -> str:
    """`mt prepare` (outside the budget), then `mt train` of `config` into `run_dir` from
    scratch for `minutes`, on `files` (split: a path, or a list as data.files takes it), with
    --set `overrides`; the training command."""
    common = ["--config", config, "--set", f"run.dir={run_dir}"]
    for split, value in files.items():
        common += ["--set", f"data.files.{split}={value}"]
    for override in overrides:
        common += ["--set", override]
    mt("prepare", *common)
    args = ["train", *common, "--set", f"train.max_minutes={minutes}", "--restart"]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    mt(*args, log=run_dir.parent / f"{run_dir.name}.log")
    return "mt " + shlex.join(args)


def bleu(checkpoint: Path, pairs: Path, *extra: str) -> dict:
    """`mt evaluate CHECKPOINT --pairs PAIRS --beam 5 --json EXTRA`: its BLEU, chrF and
    command."""
    args = ["evaluate", str(checkpoint), "--pairs", str(pairs), "--beam", "5", "--json", *extra]
    result = json.loads(mt(*args).strip().splitlines()[-1])
    return {"bleu": result["bleu"], "chrf": result["chrf"], "command": "mt " + shlex.join(args)}


def record(args: argparse.Namespace, **fields: object) -> dict:
    """A result with what says where and how it was measured: the machine line (date, CPU
    model, speed flags and cores, torch), the command, the config, budget and limit."""
    import torch

    from mt.device import cpu_description

    today = datetime.date.today().isoformat()
    return {
        "machine": f"{today}, {cpu_description()}, torch {torch.__version__}",
        "command": shlex.join(["python", *sys.argv]),
        "config": args.config,
        "minutes": args.minutes,
        "limit": args.limit,
        "overrides": args.overrides,
        **fields,
    }


def budget(r: dict) -> str:
    """A training's budget as the record gives it: minutes, or the --set values given."""
    given = ", ".join(f"`{o}`" for o in r["overrides"])
    return (
        given if not r["minutes"] else f"{r['minutes']:g} minutes" + (f", {given}" if given else "")
    )


def options(doc: str, out: str) -> argparse.ArgumentParser:
    """The options both experiments take, for a script of docstring `doc` writing to `out`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--config", default="tatoeba_cpu.yaml")
    parser.add_argument("--minutes", type=float, default=20.0, help="train.max_minutes")
    parser.add_argument("--limit", type=int, default=0, help="pairs of each file (0: all)")
    parser.add_argument(
        "--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
        help="for every training, e.g. train.max_steps=1051 with --minutes 0 (a fixed compute)",
    )  # fmt: skip
    return parser


def report(result: dict, render: Callable[[dict], list[str]]) -> None:
    """The Markdown section, then the JSON record as the last line (scripts/bench.py's)."""
    print("\n".join(render(result)))
    print(json.dumps(result, ensure_ascii=False))


def run(args: argparse.Namespace) -> dict:
    work = args.out.resolve()
    files = tatoeba(args.data.resolve(), work, args.limit)
    runs = {seed: work / f"seed-{seed}" for seed in args.seeds}
    commands = [
        train(folder, args.config, args.minutes, files, f"run.seed={seed}", *args.overrides)
        for seed, folder in runs.items()
    ]
    first, second = runs.values()
    averaged = work / "average.safetensors"
    mt("average", str(first), "--last", str(args.average_last), "--out", str(averaged))
    rows = {f"run.seed {seed}": bleu(folder, files["test"]) for seed, folder in runs.items()}
    rows["ensemble of the two"] = bleu(first, files["test"], "--checkpoint", str(second))
    rows[f"average of run.seed {args.seeds[0]}'s last {args.average_last}"] = bleu(
        averaged, files["test"]
    )
    return record(args, training=commands, rows=rows)


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    lines = [
        "## An ensemble of two recipe runs against each alone and averaging (issue 36)",
        "",
        f"`{r['config']}` trained twice from scratch ({budget(r)}), other "
        "`run.seed`s; BLEU and chrF with beam 5 on the Tatoeba test"
        + (f" (its first {r['limit']} pairs, trained on {r['limit']})" if r["limit"] else "")
        + f". Machine: {r['machine']}. Command: `{r['command']}`.",
        "",
        "| model | BLEU | chrF |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {x['bleu']:.2f} | {x['chrf']:.2f} |" for name, x in r["rows"].items()]
    return [*lines, ""]


def main() -> None:
    parser = options(__doc__, "runs/bench/ensemble")
    parser.add_argument("--seeds", type=int, nargs=2, default=[1234, 4321])
    parser.add_argument("--average-last", type=int, default=3)
    report(run(parser.parse_args()), render)


if __name__ == "__main__":
    main()
