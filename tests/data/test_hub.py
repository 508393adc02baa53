"""The Hugging Face Hub source (OPUS Books' schema) on a local stand-in: loaded, streamed,
held-out splits cut from train, an unreachable hub a one-line error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.corpus import (
    EMPTY_PAIRS,
    PAIRS,
    load_raw,
)
from mt.config_file import load_config
from mt.data import corpus as corpus_module
from mt.data.prepare import prepare
from mt.errors import ConfigError, MtError


@pytest.fixture
def hub_standin(tmp_path: Path) -> Path:
    """A local folder laid out like Helsinki-NLP/opus_books on the hub (config en-es)."""
    folder = tmp_path / "opus_books"
    (folder / "en-es").mkdir(parents=True)
    rows = [{"id": str(i), "translation": {"en": a, "es": b}} for i, (a, b) in enumerate(PAIRS)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "en-es" / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text(
        "---\n"
        "configs:\n"
        "- config_name: en-es\n"
        "  data_files:\n"
        "  - split: train\n"
        "    path: en-es/train-*\n"
        "---\n"
        "# A local stand-in for Helsinki-NLP/opus_books\n",
        encoding="utf-8",
    )
    return folder


def hub_config(name: str | Path, *overrides: str):
    return load_config(
        "tiny", ["data.source=hub", f"data.name={name}", "data.subset=en-es", *overrides]
    )


def test_hub_source_loads_the_opus_books_schema(hub_standin: Path):
    raw = load_raw(hub_config(hub_standin).data)
    assert list(raw) == ["train"]
    assert raw["train"] == PAIRS


def test_hub_source_streams_the_same_pairs(hub_standin: Path, monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 16)  # several chunks
    streamed_raw = load_raw(hub_config(hub_standin, "data.streaming=true").data)
    assert streamed_raw == {"train": PAIRS}


def test_hub_source_prepares_with_held_out_splits_cut_from_train(hub_standin: Path, tmp_path: Path):
    config = hub_config(
        hub_standin, f"run.dir={tmp_path / 'run'}", "data.valid_size=5", "data.test_size=6"
    )
    prepared = prepare(config)
    assert prepared.stats["pairs"]["valid"] == 5 and prepared.stats["pairs"]["test"] == 6
    assert prepared.stats["dropped"]["empty"] == EMPTY_PAIRS


def test_unreachable_hub_is_a_one_line_error_pointing_at_local_files():
    import datasets

    assert datasets.config.HF_HUB_OFFLINE  # conftest's offline mode: fail fast, no retries
    config = hub_config("nobody-at-all/no-such-dataset-xyz")
    with pytest.raises(MtError) as info:
        load_raw(config.data)
    message = str(info.value)
    assert not isinstance(info.value, ConfigError)  # not a usage error: exit status 1
    assert "\n" not in message
    assert "nobody-at-all/no-such-dataset-xyz" in message
    assert "data.source: files" in message and "data.files.train" in message
