"""How the memory of `mt prepare` and `mt train` grows with the corpus: `mt prepare` on corpora
of 1M, 5M and 20M pairs, and 20 updates of `mt train` (fp32, health checks on) on each store;
wall time, peak RSS and anonymous memory apart, bytes a pair, extrapolated to 100M pairs (a
`make bench` step, `scripts/bench.py --only scale`).

The corpus is aligned plain text, corpus.en and corpus.es, each line two random Tatoeba train
pairs joined (~17 tokens a side), every line a distinct (pair, pair) draw; it is generated
into `--work` (a temporary folder by default, never the repository), the smaller corpora
being the first lines of the largest. Peak RSS is `/usr/bin/time -v`'s maximum resident set
size (the largest single process: the parent and each forked worker apart, file pages that
are mapped included); anonymous memory is RssAnon from /proc/PID/status, sampled every 0.5 s,
of the main process (the tree's largest sum too): what the process holds, not the pages of
the files it reads or writes. Time to the first update is when `step 1` appears in the log.

    python scripts/bench_prepare.py --data ../shared/data [--sizes 1000000,5000000,20000000]
        [--work DIR] [--base OLD_CHECKOUT --ratio-size 200000 --repeats 3]

With `--base` (a checkout of another commit, with its own .venv), `mt prepare` of the new and
the old code alternate `--repeats` times on the first `--ratio-size` pairs: the median pairs/s
of each and their ratio, a comparison that load on a shared machine does not skew.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from benchkit import machine

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "tatoeba_cpu.yaml"
TIME = "/usr/bin/time"


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
    """The first `size` lines of the corpus in `folder`, into `into` (kept where present)."""
    into.mkdir(exist_ok=True)
    for lang in ("en", "es"):
        if (into / f"corpus.{lang}").is_file():
            continue
        with open(folder / f"corpus.{lang}", "rb") as f, open(into / f"corpus.{lang}", "wb") as out:
            for _, line in zip(range(size), f):
                out.write(line)


def status_kib(pid: int) -> dict[str, int]:
    """RssAnon and RssFile (KiB) of a process; {} once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return {
                k: int(v.split()[0])
                for k, v in (line.split(":", 1) for line in f)
                if k in ("RssAnon", "RssFile")
            }
    except (OSError, ValueError):
        return {}


def descendants(root: int) -> list[int]:
    """`root` and every process under it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
    tree, grown = {root}, True
    while grown:
        found = {pid for pid, parent in parents.items() if parent in tree}
        grown, tree = not found <= tree, tree | found
    return sorted(tree)


def measure(args: list[str], log: Path, marker: str = "", cwd: Path = ROOT) -> dict:
    """Run a command under `/usr/bin/time -v`: its wall time, CPU seconds, peak RSS, the peak
    anonymous memory of its main process and of its whole tree (MiB), and, with `marker` (a
    regular expression), the seconds until a line of its stderr matches."""
    print("$", shlex.join(args), file=sys.stderr, flush=True)
    start, cpu = time.monotonic(), cpu_seconds()
    with open(log, "w") as err:
        process = subprocess.Popen(
            [TIME, "-v", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True
        )
    peak = {"main_anon": 0, "main_file": 0, "tree_anon": 0}
    first: list[float | None] = [None]

    def sample() -> None:
        while process.poll() is None:
            tree = descendants(process.pid)[1:]  # not /usr/bin/time itself
            got = [status_kib(pid) for pid in tree]
            if got and got[0]:
                peak["main_anon"] = max(peak["main_anon"], got[0]["RssAnon"])
                peak["main_file"] = max(peak["main_file"], got[0]["RssFile"])
            peak["tree_anon"] = max(peak["tree_anon"], sum(g.get("RssAnon", 0) for g in got))
            text = log.read_text(errors="replace") if marker and first[0] is None else ""
            if text and re.search(marker, text, re.MULTILINE):
                first[0] = time.monotonic() - start
            time.sleep(0.5)

    watcher = threading.Thread(target=sample)
    watcher.start()
    out = process.stdout.read()
    process.wait()
    watcher.join()
    if process.returncode != 0:
        raise SystemExit(f"failed ({process.returncode}): {shlex.join(args)}; see {log}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text())
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": cpu_seconds() - cpu,
        "peak_rss_mib": int(rss.group(1)) / 1024,
        **{f"peak_{k}_mib": v / 1024 for k, v in peak.items()},
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


def mt(code: Path, *args: str) -> list[str]:
    """The command `mt ARGS` of the checkout `code` (its own .venv, its own package first)."""
    python = sys.executable if code == ROOT else str(code / ".venv" / "bin" / "python")
    return ["env", f"PYTHONPATH={code}", python, "-m", "mt", *args]


def prepare(code: Path, corpus: Path, size: int, run_dir: Path, log: Path) -> dict:
    """`mt prepare --rebuild` of `corpus` into `run_dir`, measured."""
    args = mt(
        code, "prepare", "--config", CONFIG, *data_sets(corpus), "--set", f"run.dir={run_dir}"
    )
    got = measure([*args, "--rebuild", "--json"], log, cwd=code)
    stats = json.loads(got.pop("out").strip().splitlines()[-1])
    return {
        **got,
        "pairs_per_s": size / got["wall_s"],
        "pairs": stats["pairs"],
        "tokens": stats["tokens"]["train"],
        "store_bytes": sum(p.stat().st_size for p in (run_dir / "data").iterdir()),
        "corpus_bytes": sum((corpus / f"corpus.{x}").stat().st_size for x in ("en", "es")),
    }


def run(
    data: Path,
    sizes: list[int],
    updates: int,
    work: Path,
    results: dict | None = None,
    save: Callable[[dict], None] | None = None,
) -> dict:
    """Prepare, then train `updates` updates (0: none), at each size; into `results` (those of
    an earlier call, whose sizes are kept), given to `save` after each size."""
    results = results or {"sizes": {}}
    results["uptime"], results["machine"] = os.getloadavg(), machine()
    if not (work / "corpus.en").is_file():
        make_corpus(data, work, max(sizes))
    for size in sizes:
        folder, run_dir = work / f"c{size}", work / f"run{size}"
        head(work, size, folder)
        got = {"prepare": prepare(ROOT, folder, size, run_dir, work / f"prepare{size}.log")}
        if updates:
            got["train"] = train(folder, run_dir, updates, work / f"train{size}.log")
        results["sizes"][str(size)] = got
        print(json.dumps({size: got}), file=sys.stderr, flush=True)
        if save:
            save(results)
    results["uptime_after"] = os.getloadavg()
    return results


def train(corpus: Path, run_dir: Path, updates: int, log: Path, code: Path = ROOT) -> dict:
    """`updates` updates of `mt train` (fp32, health checks on) on the store in `run_dir`, by
    the checkout `code`."""
    args = mt(code, "train", "--config", CONFIG, *data_sets(corpus), "--set", f"run.dir={run_dir}")
    args += ["--set", f"train.max_steps={updates}", "--set", "train.max_minutes=0"]
    args += ["--set", "train.precision=fp32", "--set", "train.health_checks=true"]
    args += ["--set", "train.log_every=1", "--set", "train.save_every=100000", "--restart"]
    got = measure(args, log, marker=r"^step 1[/:]", cwd=code)  # step 1/20: or step 1:
    got.pop("out")
    return {**got, "updates": updates}


def compare(base: Path, work: Path, size: int, repeats: int) -> dict:
    """pairs/s of `mt prepare` on the first `size` pairs, this code and `base` alternating."""
    folder = work / f"c{size}"
    head(work, size, folder)
    rates: dict[str, list[float]] = {"new": [], "base": []}
    for i in range(repeats):
        for name, code in (("new", ROOT), ("base", base))[:: 1 if i % 2 == 0 else -1]:
            log = work / f"compare-{name}-{i}.log"
            got = prepare(code, folder, size, work / f"compare-{name}", log)
            rates[name].append(got["pairs_per_s"])
    medians = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "pairs": size,
        "base": str(base),
        "rates": rates,
        "medians": medians,
        "ratio": medians["new"] / medians["base"],
    }


def per_pair(r: dict, command: str, key: str) -> tuple[float, float]:
    """Bytes a pair that `key` of `command` grows by from the smallest size to the largest,
    and its value extrapolated linearly to 100M pairs (MiB)."""
    sizes = sorted(r["sizes"], key=int)
    lo, hi = (r["sizes"][n][command][key] * 2**20 for n in (sizes[0], sizes[-1]))
    slope = (hi - lo) / (int(sizes[-1]) - int(sizes[0]))
    return slope, (hi + slope * (100_000_000 - int(sizes[-1]))) / 2**20


def render(r: dict) -> list[str]:
    """The section of docs/benchmarks.md."""
    if not r or not r.get("sizes"):
        return []
    sizes = sorted(r["sizes"], key=int)
    rows = []
    for size in sizes:
        p, t = r["sizes"][size]["prepare"], r["sizes"][size].get("train")
        trained = (
            f"{t['peak_rss_mib']:,.0f} | {t['peak_main_anon_mib']:,.0f} | {t['first_s']:.0f} |"
            if t
            else "| | |"
        )
        rows.append(
            f"| {int(size):,} | {p['pairs']['train']:,} | {p['wall_s']:,.0f} | "
            f"{p['pairs_per_s']:,.0f} | {p['peak_rss_mib']:,.0f} | "
            f"{p['peak_main_anon_mib']:,.0f} | {p['peak_tree_anon_mib']:,.0f} | "
            f"{p['store_bytes'] / 2**20:,.0f} | {trained}"
        )
    big = r["sizes"][sizes[-1]]["prepare"]
    lines = [
        "## Corpora of any size: memory against the number of pairs",
        "",
        f"`python scripts/bench_prepare.py --data ../shared/data --sizes "
        f"{','.join(sizes)}`, on {r.get('machine', machine())}, load average "
        f"{' '.join(f'{x:.1f}' for x in r['uptime'])} before, "
        f"{' '.join(f'{x:.1f}' for x in r['uptime_after'])} after (wall times and pairs/s "
        "depend on it, memory does not). The corpus: aligned "
        "text corpus.en/corpus.es, each line two random Tatoeba train pairs joined "
        f"(~{big['tokens']['src'] / big['pairs']['train']:.0f} tokens a side); `mt prepare "
        f"--config {CONFIG} --rebuild` end to end (vocabulary 8,000, a tokenizer sample of "
        "1,000,000 pairs, valid and test cut from train by source hash, 2 encoding workers), "
        "then `mt train` for 20 updates on its store (fp32, health checks on, "
        "`train.max_minutes=0`). Peak RSS: `/usr/bin/time -v` (the largest single process, "
        "mapped file pages included); anonymous: the peak RssAnon of the main process, "
        "sampled every 0.5 s from /proc/PID/status (the tree's: its processes summed).",
        "",
        "| pairs | training pairs | prepare s | pairs/s | prepare peak RSS MiB "
        "| prepare anon MiB | tree anon MiB | store MiB | train peak RSS MiB | train anon MiB "
        "| first update s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    if len(sizes) > 1:
        slopes = {
            (command, key): per_pair(r, command, key)
            for command in ("prepare", "train")
            for key in ("peak_rss_mib", "peak_main_anon_mib")
            if all("train" in r["sizes"][n] or command == "prepare" for n in sizes)
        }
        said = [
            f"`mt {command}` {'peak RSS' if key == 'peak_rss_mib' else 'anonymous memory'} "
            f"grows {slope:.1f} bytes a pair ({slope:.1f} MB a million pairs), ~{at:,.0f} MiB "
            "at 100M pairs"
            for (command, key), (slope, at) in slopes.items()
        ]
        scale = 100_000_000 / int(sizes[-1])
        lines += [
            f"From {int(sizes[0]):,} to {int(sizes[-1]):,} pairs, extrapolated linearly: "
            + "; ".join(said)
            + f". A 100M-pair store would take {big['store_bytes'] * scale / 2**30:.1f} GiB "
            f"on disk (the corpus {big['corpus_bytes'] * scale / 2**30:.0f} GiB of text).",
            "",
        ]
    if "compare" in r:
        c = r["compare"]
        lines += [
            f"Speed against the previous code ({c['base']}), `mt prepare` of the first "
            f"{c['pairs']:,} pairs, the two alternating {len(c['rates']['new'])} times: median "
            f"{c['medians']['new']:,.0f} pairs/s against {c['medians']['base']:,.0f}, a ratio "
            f"of **{c['ratio']:.2f}**.",
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--sizes", default="1000000,5000000,20000000")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument(
        "--work", type=Path, help="the corpora and stores (kept); default: temporary"
    )
    parser.add_argument("--base", type=Path, help="an older checkout to compare pairs/s with")
    parser.add_argument("--ratio-size", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="the results as JSON (those there are kept)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = json.loads(args.out.read_text()) if args.out and args.out.is_file() else None
    with tempfile.TemporaryDirectory(prefix="mt-bench-prepare-") as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        save = (lambda r: args.out.write_text(json.dumps(r, indent=2))) if args.out else None
        results = run(args.data.resolve(), sizes, args.updates, work.resolve(), results, save)
        if args.base:
            results["compare"] = compare(args.base.resolve(), work, args.ratio_size, args.repeats)
    if save:
        save(results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
