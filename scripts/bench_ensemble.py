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

from benchkit import bleu, budget, mt, options, record, report, tatoeba, train


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
