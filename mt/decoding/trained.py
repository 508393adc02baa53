"""What the corpus a model was trained on says it can translate, read from its run folder's
data/ (`mt prepare`'s store and statistics, beside the checkpoints):

- the length it carries: a model turns a source much longer than those it was trained on
  into one short sentence. Not data.max_length, the filter's ceiling (the Tatoeba recipe
  trains up to 64 tokens, yet 99% of its sources have at most 19 and pieces of 64 come back
  at a third of their length, docs/benchmarks.md): the length CARRIED_PERCENTILE of its
  training sources are within. Without a store (a checkpoint away from its run, an imported
  Marian model): data.max_length (Marian's: its 512 positions).
- its length ratio: target tokens per source token of train, the coverage guard's measure
  (mt.decoding.coverage); without statistics, DEFAULT_RATIO.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import Config, DecodeConfig
from ..run_folder import META, data_dir, store_files

CARRIED_PERCENTILE = 99
# Without a measured ratio: one target token per source token. A joint BPE between related
# languages is near it (English-Spanish Tatoeba: 1.02); a pair far from it (3 words of
# English for 1 of a compounding language) still stays above the guard's half of it.
DEFAULT_RATIO = 1.0


def carried_length(source_offsets: np.ndarray | None, max_length: int) -> int:
    """The longest piece a model trained on sources whose ids start at `source_offsets`
    (None: not known) carries, at most `max_length` (data.max_length)."""
    lengths = np.diff(source_offsets) if source_offsets is not None else []
    if not len(lengths):
        return max_length
    return min(max_length, int(np.percentile(lengths, CARRIED_PERCENTILE)))


def carried_pieces(decode: DecodeConfig, carried: int) -> DecodeConfig:
    """`decode` with pieces of `carried` tokens unless decode.piece_tokens sets them."""
    return dataclasses.replace(decode, piece_tokens=decode.piece_tokens or carried)


def length_ratio(stats: dict) -> float:
    """Target tokens per source token of the training split, from `mt prepare`'s statistics."""
    tokens = stats["tokens"]["train"]
    return tokens["tgt"] / max(tokens["src"], 1)


@dataclass(frozen=True)
class Trained:
    """The length a model carries, in source tokens, and its target/source length ratio."""

    carried: int
    ratio: float

    @classmethod
    def of(cls, run_dir: Path, config: Config) -> Trained:
        """What `run_dir`'s prepared data says of the model of `config`; the defaults where
        it is not there."""
        data = data_dir(run_dir)
        offsets = store_files(data, "train", "src")[1]
        known = np.fromfile(offsets, np.int64) if offsets.is_file() else None
        carried = carried_length(known, config.data.max_length)
        try:
            ratio = length_ratio(json.loads((data / META).read_text(encoding="utf-8"))["stats"])
        except (OSError, ValueError, KeyError, TypeError):
            ratio = DEFAULT_RATIO
        return cls(carried, ratio)
