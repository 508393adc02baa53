"""What a training run tells as it goes: a progress bar on a terminal, a plain line now and
then off one, and its records in metrics.jsonl. Files are rank 0's alone."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import metrics


def say(message: str) -> None:
    """A line for the person watching, on stderr, without breaking the progress bar."""
    tqdm.write(message, file=sys.stderr)


class Progress:
    def __init__(self, run_dir: Path, main: bool, budget: float, step: int, total: int) -> None:
        self.run_dir, self.main, self.budget = run_dir, main, budget  # budget: minutes
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
            metrics.append(self.run_dir, record)

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
