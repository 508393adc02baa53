"""The run folder's layout: the one place its names are spelled.

    <run.dir>/config.yaml        the resolved config (mt prepare, mt train)
    <run.dir>/data/              the prepared corpus cache, its splits as JSONL
    <run.dir>/checkpoints/       step folders and the `best` and `last` links (mt.checkpoint)
    <run.dir>/metrics.jsonl      the training and validation records (mt.metrics)
    <run.dir>/init.json          where a fine-tuned run started from (mt.finetune)
    <run.dir>/training.png       mt plot's picture

The tokenizer files' names depend on the config: `tokenizer.tokenizer_files` names them.
"""

from __future__ import annotations

from pathlib import Path

CONFIG = "config.yaml"
DATA = "data"
CHECKPOINTS = "checkpoints"
BEST, LAST = "best", "last"  # links in CHECKPOINTS
METRICS = "metrics.jsonl"
INIT = "init.json"
PLOT = "training.png"


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def data_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / DATA
