"""What the corpus a model was trained on says it can translate, read from its run folder's
data/ (`mt prepare`'s store and statistics, beside the checkpoints):

- the length it carries: the length CARRIED_PERCENTILE of its training sources are within,
  a statistic of the store (no decoding). A model turns a source much longer than those it
  was trained on into one short sentence, and a piece much shorter than its sentences (cut
  mid-clause) into a longer, made-up one. Not data.max_length, the filter's ceiling (the
  Tatoeba recipe trains up to 64 tokens, yet 98% of its sources have at most 17, and pieces
  of 64 come back at under 0.6 of the reference's words, docs/benchmarks.md).
  Without a store (a checkpoint away from its run, an imported Marian model): data.max_length
  (Marian's: its 512 positions).
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

# Chosen on Tatoeba valid sentences joined 2, 4, 8, 16 a line (scripts/bench_long.py --split
# valid; the 2,525-update Tatoeba model, 39.7 test BLEU): pieces of the 98th percentile (17
# tokens) score 29.6, 25.7, 24.2, 23.8 BLEU, the best of those tried (99th, 19 tokens: 29.5,
# 25.6, 23.8, 22.9; 95th, 14: 27.5, 24.7, 23.6, 23.3; 50th, 8: 16 to 18; 99.9th, 29: 27.0 down
# to 16.6), and leave single sentences as they were (41.55 one a line, 41.43 with no pieces;
# the 95th: 41.04). None comes within 2 of the sentences one by one (45 to 47): pieces cut
# exactly at the joins score 25 to 28, a piece that ends in a comma or starts with "and"
# being no sentence this model has seen.
CARRIED_PERCENTILE = 98
# Without a measured ratio: one target token per source token. A joint BPE between related
# languages is near it (English-Spanish Tatoeba: 1.02); a pair far from it (3 words of
# English for 1 of a compounding language) still stays above the guard's half of it.
DEFAULT_RATIO = 1.0


def carried_length(
    source_offsets: np.ndarray | None, max_length: int, percentile: float = CARRIED_PERCENTILE
) -> int:
    """The longest piece a model trained on sources whose ids start at `source_offsets`
    (None: not known) carries, at most `max_length` (data.max_length): the length
    `percentile` of them are within."""
    lengths = np.diff(source_offsets) if source_offsets is not None else []
    if not len(lengths):
        return max_length
    return min(max_length, int(np.percentile(lengths, percentile)))


def train_source_offsets(run_dir: Path) -> np.ndarray | None:
    """Where each training source's ids start in `run_dir`'s prepared store (None: no store)."""
    offsets = store_files(data_dir(run_dir), "train", "src")[1]
    return np.fromfile(offsets, np.int64) if offsets.is_file() else None


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
        carried = carried_length(train_source_offsets(run_dir), config.data.max_length)
        try:
            meta = (data_dir(run_dir) / META).read_text(encoding="utf-8")
            ratio = length_ratio(json.loads(meta)["stats"])
        except (OSError, ValueError, KeyError, TypeError):
            ratio = DEFAULT_RATIO
        return cls(carried, ratio)
