"""Encoding, prepare's last pass: a chunk's training pairs filtered by language, encoded and
filtered by length and ratio, in a worker process (`encode_chunk`); the held-out splits
written whole (`write_held_out`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from ..config import DataConfig
from ..errors import MtError
from ..run_folder import held_out_text
from . import language
from . import tokenizer as tok
from .corpus import Chunk, Pair, normalize, read_jsonl
from .directions import lead_token
from .scan import HELD_OUT, SAMPLED, TEST, TRAIN, VALID
from .store import Sentences, SplitWriter, token_dtype
from .workers import worker_encoders

Flat = tuple[np.ndarray, np.ndarray]  # sentences: their ids one after another, their lengths


def encode_chunk(
    chunk: Chunk,
    codes: np.ndarray,
    max_length: int,
    max_ratio: float,
    languages: tuple[str, str] | None,
    corpus: int,
    leads: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A chunk's training pairs filtered by language (given `languages`), encoded (flat ids
    and lengths a side), filtered by length and ratio, and with `leads` (the ids of the
    tokens into the target and into the source) read both ways (`both_ways`); its held-out
    pairs as text."""
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
    extra = int(leads is not None)  # either side is a source after its lead: it must fit so
    lengths = [side[1] + extra for side in sides]
    keep = np.flatnonzero(length_filter(*lengths, max_length, max_ratio, drops))
    out: dict[str, Any] = {"corpus": corpus, "pairs": len(codes), **drops}
    src, tgt = (
        Sentences(flat, np.concatenate(([0], np.cumsum(n)))).take(keep) for flat, n in sides
    )
    out["train"] = dict(zip(("src", "tgt"), both_ways(src, tgt, leads) if leads else (src, tgt)))
    for name, code in HELD_OUT.items():
        out[name] = [(normalize(chunk[0][i]), normalize(chunk[1][i])) for i in picked[code]]
    return out


def both_ways(src: Flat, tgt: Flat, leads: tuple[int, int]) -> tuple[Flat, Flat]:
    """Pairs (flat ids and lengths a side) read both ways: each source led by `leads[0]`
    with its target, then each target led by `leads[1]` with its source."""
    return (
        appended(led(*src, leads[0]), led(*tgt, leads[1])),
        appended(tgt, src),
    )


def appended(first: Flat, second: Flat) -> Flat:
    """The sentences of `first`, then those of `second`."""
    return np.concatenate([first[0], second[0]]), np.concatenate([first[1], second[1]])


def led(ids: np.ndarray, lengths: np.ndarray, lead: int) -> Flat:
    """Sentences (flat ids and lengths) with `lead` before each."""
    starts = np.cumsum(lengths) - lengths
    return np.insert(ids, starts, lead), lengths + 1


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
    folder: Path,
    name: str,
    pairs: list[Pair],
    tokenizers: tuple[Tokenizer, Tokenizer],
    data: DataConfig,
) -> dict[str, Any]:
    """A held-out split (small): its ids into the store, its text beside. For a model of
    both directions (mt.data.directions) the pairs both ways, each source led by the token
    of the language it goes to, which each line's "to" says."""
    rows = [(src, tgt, "") for src, tgt in pairs]
    if data.both_directions:
        rows = [(s, t, data.tgt_lang) for s, t in pairs] + [(t, s, data.src_lang) for s, t in pairs]
    lead = {to: [tokenizers[0].token_to_id(lead_token(to))] if to else [] for _, _, to in rows}
    sources = tok.encode(tokenizers[0], [src for src, _, _ in rows])
    src = [lead[to] + ids for ids, (_, _, to) in zip(sources, rows)]
    tgt = tok.encode(tokenizers[1], [tgt for _, tgt, _ in rows])
    writer = SplitWriter(folder, name, store_dtype(tokenizers))
    writer.append({"src": tok.flat_ids(src), "tgt": tok.flat_ids(tgt)})
    with open(held_out_text(folder, name), "w", encoding="utf-8") as f:
        for src_text, tgt_text, to in rows:
            line = {"src": src_text, "tgt": tgt_text, **({"to": to} if to else {})}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return writer.close()


def read_held_out(path: Path) -> tuple[list[Pair], list[str]]:
    """A held-out split's text as `write_held_out` wrote it: its pairs, and the language each
    goes to ("" for a model of one direction)."""
    pairs, targets = [], []
    for number, row in enumerate(read_jsonl(path), start=1):
        if not (isinstance(row, dict) and isinstance(row.get("src"), str) and "tgt" in row):
            raise MtError(f"{path}:{number}: expected an object with 'src' and 'tgt'")
        pairs.append((row["src"], str(row["tgt"])))
        targets.append(str(row.get("to", "")))
    return pairs, targets
