"""Training runs and the command line: a tiny run's config, its weights and metrics, the
installed `mt` in a subprocess, a hook after each update, sacreBLEU's own paired tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from helpers.corpus import HELD_OUT, PAIRS, write_jsonl
from mt import checkpoint
from mt.config import Config
from mt.config_file import load_config
from mt.training.trainer import Trainer, train


def mt_executable() -> str:
    found = Path(sys.executable).parent / "mt"
    if found.is_file():
        return str(found)
    which = shutil.which("mt")
    if which is None:
        pytest.skip("the mt console script is not installed")
    return which


def run_mt(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run the installed `mt` console script in a subprocess."""
    return subprocess.run(
        [mt_executable(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=dict(os.environ),
    )


def tiny_config(corpus: Path, run_dir: Path, *overrides: str) -> Config:
    return load_config(
        "tiny.yaml",
        [
            f"data.files.train={corpus}",
            f"run.dir={run_dir}",
            f"data.valid_size={HELD_OUT}",
            f"data.test_size={HELD_OUT}",
            "train.max_tokens=200",
            "train.eval_sentences=4",
            "train.eval_examples=0",
            *overrides,
        ],
    )


def tiny_trained(tmp: Path, *overrides: str) -> Path:
    """A tiny model trained 60 updates on the hand-written corpus, in `tmp`: its last
    checkpoint (the best is an early one, which says nothing yet)."""
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    train(tiny_config(corpus, tmp / "run", "train.max_steps=60", "train.lr=0.01", *overrides))
    return tmp / "run" / "checkpoints" / "last"


def weights(run_dir: Path, name: str = "last") -> dict[str, torch.Tensor]:
    state, _ = checkpoint.load_weights(run_dir / "checkpoints" / name / checkpoint.WEIGHTS)
    return state


def metric_lines(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def long_sentence(tokenizer, tokens: int) -> str:
    """Clauses joined by commas into one sentence of more than `tokens` tokens."""
    clauses = ["the museum opens on sundays", "the coffee is hot", "we like music"]
    text, i = "", 0
    while len(tokenizer.encode(text, add_special_tokens=False).ids) <= tokens:
        text += ("" if not text else ", ") + clauses[i % len(clauses)]
        i += 1
    return text[0].upper() + text[1:] + "."


def sacrebleu_paired(ref: Path, hyps: list[Path], test: str) -> list[dict[str, tuple]]:
    """`sacrebleu REF -i HYP... --paired-TEST -m bleu chrf` on its command line, read from its
    LaTeX table (its JSON output fails on numpy floats in 2.6.0): per system, per metric
    (BLEU, chrF2), (score, mean, ci, p-value or None), to 4 decimals."""
    import re

    command = [sys.executable, "-m", "sacrebleu", str(ref), "-i", *map(str, hyps)]
    command += [f"--paired-{test}", "-m", "bleu", "chrf", "-w", "4", "--no-color", "-f", "latex"]
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    found = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    cell = r"([\d.]+)(?: \(([\d.]+) ± ([\d.]+)\))?(?: \(p = ([\d.]+)\)\*?)?"
    rows = [line for line in found.stdout.splitlines() if line.rstrip().endswith("\\\\")][1:]
    table = []
    for line in rows:
        cells = [c.strip() for c in line.rstrip(" \\").split("&")[1:]]
        values = [re.fullmatch(cell, c).groups() for c in cells]
        table.append(
            {
                metric: tuple(None if v is None else float(v) for v in groups)
                for metric, groups in zip(("BLEU", "chrF2"), values)
            }
        )
    return table


def after_each_update(trainer: Trainer, hook: Callable) -> None:
    """Calls hook(update, batches) after each of the trainer's optimiser updates."""
    update = trainer.updater

    def updated(batches, lr):
        result = update(batches, lr)
        hook(result, batches)
        return result

    trainer.updater = updated
