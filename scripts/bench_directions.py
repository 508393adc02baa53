"""Both directions, two models against one (issue 44): an English→Spanish and a
Spanish→English model, each trained on the Tatoeba recipe, against one model of both
directions (tatoeba_cpu_both.yaml) trained with their budgets together.

  quality  BLEU and chrF, beam 5, of each direction of each: the Tatoeba test and FLORES-200
           devtest, each read in the direction decoded (`mt evaluate --pairs`)
  serving  `mt serve FORWARD BACKWARD` against `mt serve BOTH`, in turns (--rounds): peak RSS
           (/usr/bin/time -v), RSS once ready, and sentences/s under --clients clients that
           send Tatoeba test sentences one a request, English→Spanish and Spanish→English in
           turn, for --seconds

    python scripts/bench_directions.py runs/tatoeba_cpu runs/tatoeba_cpu_es_en \
        runs/tatoeba_cpu_both [--only quality,serving]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import re
import shlex
import statistics
import sys
from pathlib import Path

from bench_serve import load
from benchkit import FLORES, TATOEBA, bleu, machine, report, server_pid, serving

SETUPS = ("two models", "one model")
DIRECTIONS = (("en", "es"), ("es", "en"))


def quality(args: argparse.Namespace) -> list[dict]:
    """Each direction of each setup on each test set: BLEU and chrF, beam 5."""
    rows = []
    for source, target in DIRECTIONS:
        models = {
            "two models": (args.forward if target == "es" else args.backward, ()),
            "one model": (args.both, ("--set", f"decode.target_language={target}")),
        }
        for name, file in (("Tatoeba test", TATOEBA.format("test")), ("FLORES devtest", FLORES)):
            for setup, (model, extra) in models.items():
                found = bleu(Path(model), args.data / file, *extra)
                rows.append(
                    {"direction": f"{source}→{target}", "set": name, "setup": setup, **found}
                )
                print(json.dumps(rows[-1], ensure_ascii=False), file=sys.stderr, flush=True)
    return rows


def requests(data: Path) -> list[dict]:
    """/translate bodies: the Tatoeba test's sentences, English→Spanish and back in turn."""
    with gzip.open(data / TATOEBA.format("test"), "rt", encoding="utf-8") as f:
        pairs = [json.loads(line) for line in f]
    return [
        {"q": pair[source], "source": source, "target": target}
        for pair in pairs
        for source, target in DIRECTIONS
    ]


def serving_round(models: list[str], bodies: list[dict], args: argparse.Namespace) -> dict:
    """One server of `models` under load: its throughput, RSS once ready, peak RSS."""
    log = args.log_dir / f"serve-{len(models)}.log"
    options = ("--device", "cpu", "--set", "decode.beam=5")
    with serving(models, *options, log=log, wrap=("/usr/bin/time", "-v")) as address:
        ready = rss_kib(server_pid(serving.process.pid))
        found = load(address, bodies, args.clients, args.seconds, 1_000_000)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text())
    return {**found, "ready_mib": ready / 1024, "peak_mib": int(peak.group(1)) / 1024}


def rss_kib(pid: int) -> int:
    """VmRSS of process `pid`."""
    return int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1))


def serving_rounds(args: argparse.Namespace) -> dict:
    """Both setups in turns, --rounds times: each one's rounds."""
    bodies = requests(args.data)
    setups = {"two models": [args.forward, args.backward], "one model": [args.both]}
    rounds: dict[str, list[dict]] = {setup: [] for setup in SETUPS}
    for _ in range(args.rounds):
        for setup in SETUPS:
            rounds[setup].append(serving_round(setups[setup], bodies, args))
            print(json.dumps({setup: rounds[setup][-1]}), file=sys.stderr, flush=True)
    return rounds


def render(r: dict) -> list[str]:
    lines = [
        "## Both directions: two models against one (issue 44)",
        "",
        f"Two models: `{r['forward']}` (en→es) and `{r['backward']}` (es→en); one model: "
        f"`{r['both']}` (both directions, `data.both_directions`). Machine: {r['machine']}. "
        f"Command: `{r['command']}`.",
        "",
    ]
    if "quality" in r:
        lines += ["| direction | test set | two models: BLEU (chrF) | one model: BLEU (chrF) |"]
        lines += ["|---|---|---:|---:|"]
        cells: dict[tuple[str, str], dict[str, str]] = {}
        for row in r["quality"]:
            cell = f"{row['bleu']:.2f} ({row['chrf']:.2f})"
            cells.setdefault((row["direction"], row["set"]), {})[row["setup"]] = cell
        for (direction, name), by in cells.items():
            lines.append(f"| {direction} | {name} | {by['two models']} | {by['one model']} |")
        lines.append("")
    if "serving" in r:
        lines += [
            f"`mt serve`, beam 5, CPU, {r['clients']} clients sending Tatoeba test sentences "
            f"one a request, en→es and es→en in turn, for {r['seconds']:.0f} s; the two "
            f"setups in turns, {r['rounds']} round(s) (medians; RSS from /proc once ready, peak "
            "RSS from `/usr/bin/time -v`).",
            "",
            "| setup | sentences/s | p50 latency | RSS ready | peak RSS |",
            "|---|---:|---:|---:|---:|",
        ]
        for setup in SETUPS:
            rounds = r["serving"][setup]
            median = {k: statistics.median(x[k] for x in rounds) for k in rounds[0] if k in KEYS}
            lines.append(
                f"| {setup} | {median['sentences_per_s']:.1f} | {median['p50_ms']:.0f} ms | "
                f"{median['ready_mib']:.0f} MiB | {median['peak_mib']:.0f} MiB |"
            )
        lines.append("")
    return lines


KEYS = ("sentences_per_s", "p50_ms", "ready_mib", "peak_mib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("forward", help="the English→Spanish run")
    parser.add_argument("backward", help="the Spanish→English run")
    parser.add_argument("both", help="the run of both directions")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--only", default="quality,serving")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--log-dir", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": f"{datetime.date.today().isoformat()}, {machine()}",
        "command": shlex.join(["python", *sys.argv]),
        **{k: getattr(args, k) for k in ("forward", "backward", "both", "clients", "rounds")},
        "seconds": args.seconds,
    }
    steps = args.only.split(",")
    if "quality" in steps:
        result["quality"] = quality(args)
    if "serving" in steps:
        result["serving"] = serving_rounds(args)
    report(result, render)


if __name__ == "__main__":
    main()
