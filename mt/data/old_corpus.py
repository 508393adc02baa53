"""Fine-tuning's mix of old data: a seeded sample of `train.init`'s own training corpus
mixed into the new one (`train.old_share`), so that fine-tuning forgets less of it (replay of
old data; in mt "rehearsal" names only the first update's trial, mt.training.rehearsal).
The old corpus is scanned as the new one is (`scan.scan`: 16 bytes a pair) and read again
for the pairs chosen, a chunk at a time: it is never held whole."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..config import Config, DataConfig
from .corpus import Chunk, Corpus, Pair, corpora, normalize
from .scan import keyed_hashes, scan, source_key


@dataclass
class Base:
    """What a fine-tuned run takes from train.init (`finetune.base`): its tokenizers, and its
    data config where train.old_share mixes some of its corpus back."""

    tokenizers: tuple[Tokenizer, Tokenizer]
    data: DataConfig


def old_corpus(
    old: DataConfig,
    config: Config,
    new: int,
    cut: dict,
    held: dict[str, list[Pair]],
    run: Callable,
    folder: Path,
) -> Corpus:
    """Pairs of train.init's own training corpus, a seeded sample that makes `train.old_share`
    of the training pairs beside `new` new ones (all there are, if fewer), none with the source
    of a held-out pair, each distinct pair once, normalised: mixing the old data in makes
    fine-tuning forget less of it. `run` and `folder`: the scan's workers and spill files."""
    share, seed = config.train.old_share, config.run.seed
    found = corpora(old).get("train", [])
    scanned = scan(found, run, seed, folder)
    src = scanned["src"]
    sources = [source_key(s) for pairs in held.values() for s, _ in pairs]
    out = ~scanned["first"] | np.isin(src, keyed_hashes(sources, str(seed).encode()))
    for lo, hi in cut.values():
        out |= (src >= lo) & (src < hi)
    eligible = np.flatnonzero(~out)  # among the pairs with text, in corpus order
    del out, src
    count = min(len(eligible), round(new * share / (1 - share)))
    pick = np.random.default_rng(seed).choice(len(eligible), count, replace=False)
    chosen = np.flatnonzero(scanned["nonempty"])[np.sort(eligible[pick])]  # among all pairs

    def read() -> Iterator[Chunk]:
        at = 0  # place of the chunk's first pair
        for chunk in (chunk for corpus in found for chunk in corpus.read()):
            lo, hi = np.searchsorted(chosen, [at, at + len(chunk[0])])
            inside = (chosen[lo:hi] - at).tolist()
            if inside:
                src, tgt = chunk
                yield [normalize(src[i]) for i in inside], [normalize(tgt[i]) for i in inside]
            at += len(chunk[0])

    return Corpus("train.init's corpus", [], None, read)
