"""`<run.dir>/metrics.jsonl`: one JSON object a line, `"kind"` train, valid or horizon, each
with the `step` it is about. The one writer and reader of that file."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError, MtError
from .files import atomic_write_text, why
from .layout import METRICS

FILE = METRICS


def append(run_dir: Path, record: dict[str, Any]) -> None:
    path = run_dir / FILE
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:  # a full disk between two saves: the checkpoints stay as they were
        raise MtError(f"{path}: cannot write: {why(e)}") from None


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
                raise ConfigError(f"{path}:{number}: not a JSON line") from None
            print(f"mt: warning: {path}:{number}: a partial last line, skipped", file=sys.stderr)
    return [r for r in records if isinstance(r, dict)]
