"""Fine-tuning's rehearsal of the old data: a seeded sample of `train.init`'s own training
corpus mixed into the new one (`train.old_share`), so that fine-tuning forgets less of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from ..config import Config, DataConfig
from .corpus import Corpus, Pair, load_raw
from .scan import clean, dedup, keyed_hashes, source_key


@dataclass
class Base:
    """What a fine-tuned run takes from train.init (`finetune.base`): its tokenizers, and its
    data config where train.old_share mixes some of its corpus back."""

    tokenizers: tuple[Tokenizer, Tokenizer]
    data: DataConfig


def old_corpus(
    old: DataConfig, config: Config, new: int, cut: dict, held: dict[str, list[Pair]]
) -> Corpus:
    """Pairs of train.init's own training corpus, a seeded sample that makes `train.old_share`
    of the training pairs beside `new` new ones (all there are, if fewer), none with the source
    of a held-out pair: rehearsing the old data makes fine-tuning forget less of it."""
    share, seed = config.train.old_share, config.run.seed
    pairs = dedup(clean(load_raw(old).get("train", []), {}))
    key = str(seed).encode()
    hashes = keyed_hashes([source_key(s) for s, _ in pairs], key)
    out = np.isin(hashes, keyed_hashes([source_key(s) for p in held.values() for s, _ in p], key))
    for lo, hi in cut.values():
        out |= (hashes >= lo) & (hashes < hi)
    pairs = [pair for pair, o in zip(pairs, out.tolist()) if not o]
    count = min(len(pairs), round(new * share / (1 - share)))
    pick = np.random.default_rng(seed).choice(len(pairs), count, replace=False)
    chosen = [pairs[i] for i in sorted(pick)]
    chunk = [s for s, _ in chosen], [t for _, t in chosen]
    return Corpus("train.init's corpus", [], None, lambda: iter([chunk] if chosen else []))
