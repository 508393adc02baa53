"""Encoding, prepare's last pass: a chunk's training pairs filtered by language, encoded and
filtered by length and ratio, in a worker process (`encode_chunk`); the held-out splits
written whole (`write_held_out`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from ..run_folder import held_out_text
from . import language
from . import tokenizer as tok
from .corpus import Chunk, Pair, normalize
from .scan import HELD_OUT, SAMPLED, TEST, TRAIN, VALID
from .store import Sentences, SplitWriter, token_dtype
from .workers import worker_encoders


def encode_chunk(
    chunk: Chunk,
    codes: np.ndarray,
    max_length: int,
    max_ratio: float,
    languages: tuple[str, str] | None,
    corpus: int,
) -> dict[str, Any]:
    """A chunk's training pairs filtered by language (given `languages`), encoded (flat ids
    and lengths a side), filtered by length and ratio; its held-out pairs as text."""
    picked = {code: np.flatnonzero(codes == code).tolist() for code in (VALID, TEST)}
    train = np.flatnonzero((codes == TRAIN) | (codes == SAMPLED)).tolist()
    texts = [[normalize(side[i]) for i in train] for side in chunk]
    drops: dict[str, int] = {}
    if languages:
        verdict = language.filter_pairs(*texts, languages)
        drops["language"] = int(np.count_nonzero(verdict == language.WRONG_LANGUAGE))
        drops["copy"] = int(np.count_nonzero(verdict == language.COPY))
        kept = (verdict == language.KEPT).tolist()
        texts = [[text for text, keep in zip(side, kept) if keep] for side in texts]
    sides = [encoder.encode(side) for encoder, side in zip(worker_encoders(), texts)]
    keep = np.flatnonzero(length_filter(sides[0][1], sides[1][1], max_length, max_ratio, drops))
    out: dict[str, Any] = {"corpus": corpus, "pairs": len(codes), **drops, "train": {}}
    for name, (flat, lengths) in zip(("src", "tgt"), sides):
        out["train"][name] = Sentences(flat, np.concatenate(([0], np.cumsum(lengths)))).take(keep)
    for name, code in HELD_OUT.items():
        out[name] = [(normalize(chunk[0][i]), normalize(chunk[1][i])) for i in picked[code]]
    return out


def store_dtype(tokenizers: tuple[Tokenizer, Tokenizer]) -> np.dtype:
    return token_dtype(max(t.get_vocab_size() for t in tokenizers))


def length_filter(
    src_len: np.ndarray, tgt_len: np.ndarray, max_length: int, max_ratio: float, drops: dict
) -> np.ndarray:
    """Which pairs are within the length and ratio limits; the rest are counted in drops."""
    too_long = (src_len > max_length) | (tgt_len > max_length)
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~too_long & (ratio > max_ratio)
    drops["too_long"] = int(too_long.sum())
    drops["ratio"] = int(bad_ratio.sum())
    return ~(too_long | bad_ratio)


def write_held_out(
    folder: Path, name: str, pairs: list[Pair], tokenizers: tuple[Tokenizer, Tokenizer]
) -> dict[str, Any]:
    """A held-out split (small): its ids into the store, its text beside."""
    writer = SplitWriter(folder, name, store_dtype(tokenizers))
    sides = {}
    for side, tokenizer, texts in zip(
        ("src", "tgt"), tokenizers, zip(*pairs) if pairs else ([], [])
    ):
        sides[side] = tok.flat_ids(tok.encode(tokenizer, texts))
    writer.append(sides)
    with open(held_out_text(folder, name), "w", encoding="utf-8") as f:
        for src, tgt in pairs:
            f.write(json.dumps({"src": src, "tgt": tgt}, ensure_ascii=False) + "\n")
    return writer.close()
