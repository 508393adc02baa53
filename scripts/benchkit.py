"""What the benchmark scripts share: the machine line every record states, `mt` run as a
command, the Tatoeba files (cut to a few pairs for a smoke run), a recipe trained and
evaluated, the options and record of the training experiments, and `mt serve` in a process of
its own. A script run from scripts/ imports it as `benchkit`."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import http.client
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MT = str(Path(sys.executable).parent / "mt")
TATOEBA = "tatoeba_en_es.{}.jsonl.gz"
FLORES = "flores200_devtest_en_es.jsonl.gz"


def machine() -> str:
    """The machine as every benchmark states it: the CPU (model, speed flags, cores, from
    mt.device), its memory, Linux, Python and torch."""
    import torch

    from mt.device import cpu_description

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu_description()}, {memory:.0f} GiB, Linux {platform.release()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )


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
    """A result with what says where and how it was measured: the machine line (date, then
    `machine()`), the command, the config, budget and limit."""
    today = datetime.date.today().isoformat()
    return {
        "machine": f"{today}, {machine()}",
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


@contextmanager
def serving(
    model: str | list[str], *options: str, log: Path | None = None, wrap: tuple[str, ...] = ()
) -> Iterator[str]:
    """`mt serve MODEL...` on a free port of 127.0.0.1, once ready: its address. On leaving, it
    is stopped with SIGTERM; the exit status and the seconds it took go to `serving.stopped`,
    the process is `serving.process`. `wrap`: a command it runs under (/usr/bin/time -v, whose
    report then ends the log)."""
    models = [model] if isinstance(model, str) else model
    with open(log or os.devnull, "w") as err:
        process = subprocess.Popen(
            [*wrap, MT, "serve", *models, "--port", "0", *options],
            stderr=subprocess.PIPE,
            text=True,
        )
        serving.process = process
        line = process.stderr.readline()
        if "listening on http://127.0.0.1:" not in line:
            raise SystemExit(f"mt serve did not start: {line}{process.stderr.read()}")
        address = line.rsplit("http://", 1)[1].strip().rstrip("/")
        # the log goes on to a file (or nowhere), so that a full pipe never blocks the server
        copier = threading.Thread(target=lambda: err.writelines(process.stderr), daemon=True)
        copier.start()
        try:
            while health(address) is None:
                if process.poll() is not None:
                    raise SystemExit(f"mt serve exited with {process.returncode}")
                time.sleep(0.2)
            yield address
        finally:
            os.kill(server_pid(process.pid) if wrap else process.pid, signal.SIGTERM)
            started = time.perf_counter()
            code = process.wait(30)
            serving.stopped = {"exit": code, "seconds": time.perf_counter() - started}
            copier.join(5)


def server_pid(wrapper: int) -> int:
    """The pid of the `mt serve` that `serving(..., wrap=...)` runs under process `wrapper`
    (SIGTERM goes to it: /usr/bin/time would die of it and leave the server running)."""
    return int(Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()[0])


def health(address: str) -> dict | None:
    """/health's answer once the model is ready, else None."""
    try:
        connection = http.client.HTTPConnection(address, timeout=10)
        connection.request("GET", "/health")
        response = connection.getresponse()
        body = response.read()
        return json.loads(body) if response.status == 200 else None
    except OSError:
        return None
