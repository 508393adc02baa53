"""The command-line tests' fixtures: a tiny trained run, one a test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import tiny_config
from mt.training.trainer import train


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained for a few updates, with three step checkpoints."""
    tmp = tmp_path_factory.mktemp("decode")
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    run = tmp / "run"
    train(
        tiny_config(
            corpus,
            run,
            "train.max_steps=30",
            "train.save_every=10",
            "train.eval_every=10",
            "train.keep_last=3",
            "train.lr=0.01",
        )
    )
    return run
