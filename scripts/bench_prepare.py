"""`mt prepare` on corpora of 100k, 1M and 5M pairs, and 20 updates of `mt train` on the
largest: wall time and peak memory (a `make bench` step, `scripts/bench.py --only scale`).

The corpus is aligned plain text, corpus.en and corpus.es, each line two random Tatoeba train
pairs joined (~17 tokens a side), every line a distinct (pair, pair) draw; it is generated
into a temporary folder (never the repository), the smaller corpora being the first lines of
the largest. Memory is the peak over the run of the summed proportional set size (PSS: a
page shared by k processes counts 1/k to each) of the command and every process under it,
sampled every 0.2 s from /proc; time to the first update is when `step 1` appears in the log.

    python scripts/bench_prepare.py --data ../shared/data [--sizes 100000,1000000,5000000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MT = str(Path(sys.executable).parent / "mt")
CONFIG = "tatoeba_cpu.yaml"


def make_corpus(data: Path, folder: Path, size: int, seed: int = 0) -> None:
    """corpus.en and corpus.es of `size` lines: two distinct random Tatoeba pairs a line."""
    with gzip.open(data / "tatoeba_en_es.train.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    n = len(rows)
    draws = np.random.default_rng(seed).choice(n * n, size, replace=False)
    first, second = np.divmod(draws, n)
    for lang in ("en", "es"):
        with open(folder / f"corpus.{lang}", "w", encoding="utf-8") as out:
            side = [" ".join(row[lang].split()) for row in rows]
            for start in range(0, size, 100_000):
                pairs = zip(
                    first[start : start + 100_000].tolist(),
                    second[start : start + 100_000].tolist(),
                )
                out.write("".join(f"{side[a]} {side[b]}\n" for a, b in pairs))


def head(folder: Path, size: int, into: Path) -> None:
    into.mkdir(exist_ok=True)
    for lang in ("en", "es"):
        with open(folder / f"corpus.{lang}", "rb") as f, open(into / f"corpus.{lang}", "wb") as out:
            for _, line in zip(range(size), f):
                out.write(line)


def tree_pss(root: int) -> int:
    """Bytes of PSS of `root` and all its descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
    tree, total, grown = {root}, 0, True
    while grown:
        found = {pid for pid, parent in parents.items() if parent in tree}
        grown, tree = not found <= tree, tree | found
    for pid in tree:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    return total


def measure(args: list[str], log: Path, marker: str = "") -> dict:
    """Run a command: its wall time, CPU seconds, peak PSS of its process tree (GiB) and,
    with `marker` (a regular expression), the seconds until a line of its stderr matches."""
    print("$", shlex.join(args), file=sys.stderr, flush=True)
    start, cpu = time.monotonic(), cpu_seconds()
    with open(log, "w") as err:
        process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    peak, first = [0], [None]

    def sample() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], tree_pss(process.pid))
            text = log.read_text(errors="replace") if marker and first[0] is None else ""
            if text and re.search(marker, text, re.MULTILINE):
                first[0] = time.monotonic() - start
            time.sleep(0.2)

    watcher = threading.Thread(target=sample)
    watcher.start()
    out = process.stdout.read()
    process.wait()
    watcher.join()
    if process.returncode != 0:
        raise SystemExit(f"failed ({process.returncode}): {shlex.join(args)}; see {log}")
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": cpu_seconds() - cpu,
        "peak_gib": peak[0] / 2**30,
        "first_s": first[0],
        "out": out,
    }


def cpu_seconds() -> float:
    """User and system time of this process's children that have ended (the command's tree:
    a process's time counts to its parent when it is waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def data_sets(folder: Path) -> list[str]:
    entry = f"{{en: {folder / 'corpus.en'}, es: {folder / 'corpus.es'}}}"
    sets = [f"data.files.train=[{entry}]", "data.files.valid=null", "data.files.test=null"]
    return [a for s in sets for a in ("--set", s)]


def run(data: Path, sizes: list[int], updates: int, work: Path) -> dict:
    results: dict = {"sizes": {}, "uptime": os.getloadavg()}
    make_corpus(data, work, max(sizes))
    for size in sizes:
        folder = work / f"c{size}"
        head(work, size, folder)
        run_dir = work / f"run{size}"
        args = [
            MT,
            "prepare",
            "--config",
            CONFIG,
            *data_sets(folder),
            "--set",
            f"run.dir={run_dir}",
        ]
        got = measure([*args, "--rebuild", "--json"], work / f"prepare{size}.log")
        stats = json.loads(got.pop("out").strip().splitlines()[-1])
        disk = sum(p.stat().st_size for p in (run_dir / "data").iterdir())
        results["sizes"][str(size)] = {
            **got,
            "pairs_per_s": size / got["wall_s"],
            "pairs": stats["pairs"],
            "tokens": stats["tokens"]["train"],
            "store_bytes": disk,
            "corpus_bytes": sum((folder / f"corpus.{x}").stat().st_size for x in ("en", "es")),
        }
        print(json.dumps({size: results["sizes"][str(size)]}), file=sys.stderr)
    if updates:  # 0: prepare alone
        results["train"] = train(work, max(sizes), updates)
    results["uptime_after"] = os.getloadavg()
    return results


def train(work: Path, size: int, updates: int) -> dict:
    """`updates` updates of `mt train` (fp32) on the store of `size` pairs."""
    args = [MT, "train", "--config", CONFIG, *data_sets(work / f"c{size}")]
    args += ["--set", f"run.dir={work / f'run{size}'}", "--set", f"train.max_steps={updates}"]
    args += ["--set", "train.max_minutes=0", "--set", "train.precision=fp32"]
    args += ["--set", "train.log_every=1", "--set", "train.save_every=100000"]
    got = measure(args, work / "train.log", marker=r"^step 1[/:]")  # step 1/20: or step 1:
    got.pop("out")
    return {**got, "updates": updates, "pairs": size}


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    if not r:
        return []
    rows = [
        f"| {int(size):,} | {s['pairs']['train']:,} | {s['wall_s']:.0f} | "
        f"{s['pairs_per_s']:,.0f} | {s.get('cpu_s', float('nan')):.0f} | {s['peak_gib']:.2f} | "
        f"{s['store_bytes'] / 2**20:,.0f} |"
        for size, s in sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
    ]
    largest = max(r["sizes"], key=int)
    big, scale = r["sizes"][largest], 100_000_000 / int(largest)
    # the scan keeps 17 bytes a pair; finding first occurrences sorts 16 more
    hashes_gib = 100_000_000 * 34 / 2**30
    trained = []
    if "train" in r:
        t = r["train"]
        trained = [
            f"`mt train` (fp32) on the {t['pairs']:,}-pair store, {t['updates']} updates: peak "
            f"{t['peak_gib']:.2f} GiB, first update {t['first_s']:.0f} s after the start, "
            f"{t['wall_s']:.0f} s in all ({t['cpu_s']:.0f} CPU seconds). The store is "
            "memory-mapped: pages are read as batches touch them, and an epoch is planned a "
            "maxi-batch (65,536 sentences) at a time.",
            "",
        ]
    return [
        "## Corpora of any size: `mt prepare` into a memory-mapped store",
        "",
        "Aligned text corpus.en/corpus.es, each line two random Tatoeba train pairs joined "
        f"(~{big['tokens']['src'] / big['pairs']['train']:.0f} tokens a side), "
        f"`mt prepare --config {CONFIG}` (vocabulary 8,000, valid and test cut from train by "
        "source hash), end to end: reading, normalising, dedup, the split, tokenizer "
        "training on a sample of 1,000,000 pairs, encoding in one process per core, writing "
        "the store. Peak memory: the summed PSS of the command and its worker processes. "
        "CPU seconds: user and system time of the whole tree; on a machine shared with other "
        "jobs, wall time / (CPU seconds / cores) is the share of the cores it got. "
        "Load average before: "
        f"{' '.join(f'{x:.2f}' for x in r['uptime'])}; after: "
        f"{' '.join(f'{x:.2f}' for x in r['uptime_after'])}.",
        "",
        "| pairs in the corpus | training pairs kept | seconds | pairs/s | CPU seconds "
        "| peak GiB | store MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        *trained,
        f"100M pairs, extrapolated linearly from {int(largest):,}: "
        f"{big['wall_s'] * scale / 3600:.1f} hours, a store of "
        f"{big['store_bytes'] * scale / 2**30:.1f} GiB (and the corpus itself, "
        f"{big['corpus_bytes'] * scale / 2**30:.0f} GiB here); memory grows by the scan's "
        f"~34 bytes a pair at its peak ({hashes_gib:.1f} GiB at 100M) above the flat "
        f"{r['sizes'][min(r['sizes'], key=int)]['peak_gib']:.1f} GiB of tokenizer training "
        "and the workers; training's memory does not grow with the corpus beyond the page "
        "cache.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--sizes", default="100000,1000000,5000000")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="mt-bench-prepare-") as work:
        results = run(args.data.resolve(), sizes, args.updates, Path(work))
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
