"""What a training run tells as it goes: `<run.dir>/metrics.jsonl` (one JSON object a line,
`"kind"` train, valid, horizon or health, each with the `step` it is about; this module is
its one writer and reader), the window of updates a "train" record sums, and for the person
watching a progress bar on a terminal, a plain line now and then off one. Files are rank 0's
alone."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..errors import ConfigError, InputError, MachineError
from ..files import atomic_write_text, why
from ..messages import say
from ..run_folder import METRICS

FILE = METRICS


def append(run_dir: Path, record: dict[str, Any]) -> None:
    path = run_dir / FILE
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:  # a full disk between two saves: the checkpoints stay as they were
        raise MachineError(f"{path}: cannot write: {why(e)}") from None


def forget_after(run_dir: Path, step: int) -> None:
    """Forget records logged after `step`: they are about to be redone. A half-written last
    line (a crash) counts as after all."""
    path = run_dir / FILE
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _step(line) <= step]
        if kept != lines:
            atomic_write_text(path, "".join(kept))


def _step(line: str) -> float:
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of RUN_DIR/metrics.jsonl, without a partial last line (still being written)."""
    path = run_dir / FILE
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run folder")
    if not path.is_file():
        raise ConfigError(f"{path}: no metrics file; has the run started training?")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise InputError(f"{path}:{number}: not a JSON line") from None
            say(f"mt: warning: {path}:{number}: a partial last line, skipped")
    return [r for r in records if isinstance(r, dict)]


class Window:
    """The updates that counted since the last "train" record, summed for the next one."""

    SUMS = ("loss", "nll", "tokens", "padded", "cells")  # fields of an `update.Update`

    def __init__(self) -> None:
        self.sums = dict.fromkeys(self.SUMS, 0.0)
        self.updates, self.seconds = 0, 0.0  # a resumed run's first window may be short

    def add(self, update: Any, seconds: float) -> None:
        """Sum an `update.Update` that took `seconds` into the window."""
        for key in self.SUMS:
            self.sums[key] += getattr(update, key)
        self.updates += 1
        self.seconds += seconds

    @property
    def nll(self) -> float:
        """The mean training NLL of the window's updates."""
        return self.sums["nll"] / max(self.updates, 1)

    def close(self, lr: float, world: int) -> dict[str, float]:
        """The window's fields of a "train" record (`lr`: its last update's; `world`: ranks,
        each training on as many tokens), then a new window begins."""
        sums, nll = self.sums, self.nll
        record = {
            "loss": sums["loss"] / max(self.updates, 1),
            "nll": nll,
            "ppl": math.exp(min(nll, 50)),
            "lr": lr,
            "tokens_per_s": sums["tokens"] * world / max(self.seconds, 1e-9),
            "padding": sums["padded"] / max(sums["cells"], 1),
        }
        self.__init__()  # a new window
        return record


class Progress:
    """What a session of a run shows and logs: its records, its log window, its bar."""

    def __init__(self, run_dir: Path, main: bool, budget: float, step: int, total: int) -> None:
        self.run_dir, self.main, self.budget = run_dir, main, budget  # budget: minutes
        self.window = Window()
        self.bar = tqdm(
            total=total or None,
            initial=step,
            unit="step",
            desc="train",
            disable=not main or not sys.stderr.isatty(),
            dynamic_ncols=True,
        )

    def log(self, record: dict[str, Any]) -> None:
        if self.main:
            append(self.run_dir, record)

    def counted(self, update: Any, seconds: float) -> None:
        """An update that counted (an `update.Update`): into the window, a step on the bar."""
        self.window.add(update, seconds)
        self.bar.update()

    def train(self, record: dict[str, Any]) -> None:
        """Log a "train" record; show it on the bar, or off a terminal in a plain line."""
        self.log(record)
        loss, lr, speed = f"{record['loss']:.3f}", f"{record['lr']:.2e}", record["tokens_per_s"]
        if self.bar.disable and self.main:
            of = f"/{record['horizon']}" if record["horizon"] else ""
            say(
                f"step {record['step']}{of}: loss {loss}, lr {lr}, {speed:,.0f} target "
                f"tokens/s, {self.minutes(record['elapsed_s'])}"
            )
        time = self.minutes(record["elapsed_s"])
        self.bar.set_postfix(loss=loss, lr=lr, tok_s=f"{speed:,.0f}", time=time, refresh=False)

    def horizon(self, record: dict[str, Any]) -> None:
        """Log a new horizon, the bar's new end."""
        self.bar.total = record["horizon"]
        self.log(record)

    def minutes(self, elapsed: float) -> str:
        """Training time so far, and of the budget."""
        return f"{elapsed / 60:.1f}" + (f"/{self.budget:g} min" if self.budget else " min")
