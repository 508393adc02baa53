"""The first passes of prepare over the corpus: each pair's hash (64 bits, for duplicates)
and its source sentence's (seeded, for the held-out cut), 16 bytes a pair; then what becomes
of each pair (empty, duplicate, valid, test, train, or train in the tokenizers' sample).

Valid and test, when cut from train, are the pairs whose source hash is among the smallest:
every pair of a source sentence has the same hash, so no source of valid or test is in train,
and the cut is chosen from the sorted hashes of the corpus's distinct pairs to give
data.valid_size and data.test_size pairs (fewer by the rest of a group at a boundary).
They are cut from the untagged corpora only: a tagged corpus (back-translation) has
synthetic sources and a tag that real input never carries, so its pairs would measure
something else. A tagged source is hashed without its tag, and a tagged pair whose source is
held out is dropped (HELD_SOURCE), as a pair of train.init's corpus is.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import ConfigError
from .corpus import Chunk, Corpus, Pair, normalize
from .workers import Meter

TRAIN, VALID, TEST, SAMPLED, EMPTY, DUPLICATE, HELD_SOURCE = range(7)  # what becomes of a pair
HELD_OUT = {"valid": VALID, "test": TEST}


def source_key(text: str) -> str:
    """What makes two source sentences 'the same' for leakage: case and spacing ignored."""
    return " ".join(text.casefold().split())


def clean(pairs: Sequence[Pair], drops: dict[str, int]) -> list[Pair]:
    """Normalise both sides; drop pairs with an empty side (counted in drops['empty'])."""
    kept = []
    for src, tgt in pairs:
        src, tgt = normalize(src), normalize(tgt)
        if src and tgt:
            kept.append((src, tgt))
    drops["empty"] = drops.get("empty", 0) + len(pairs) - len(kept)
    return kept


def scan(train: list[Corpus], run: Callable, seed: int, folder: Path) -> dict[str, Any]:
    """Pass 1: per raw pair whether it has text on both sides; per such pair its hash and its
    source's (seeded); and how many raw pairs each corpus has. The chunks' results go to
    files in `folder` as they come and are read back whole once the pass ends: a list of the
    chunks' arrays joined at the end would hold every pair's twice."""
    raw, tagged, done = [], [], 0  # tagged: [start, end) of each tagged corpus's pairs with text
    meter = Meter("scan", None)
    with ExitStack() as stack:
        spills = [stack.enter_context(tempfile.TemporaryFile(dir=folder)) for _ in COLUMNS]
        for corpus in train:
            count = 0
            kept = 0  # pairs with text
            work = ((chunk, seed, corpus.tag) for chunk in corpus.read())
            for part in run(scan_chunk, work):
                for spill, column in zip(spills, part):
                    spill.write(column.tobytes())
                count, kept = count + len(part[0]), kept + len(part[1])
                meter.update(len(part[0]))
            raw.append(count)
            if corpus.tag:
                tagged.append((done, done + kept))
            done += kept
        meter.close()
        columns = {name: _read_back(spill, dtype) for spill, (name, dtype) in zip(spills, COLUMNS)}
    return {**columns, "raw": raw, "first": _first(columns["pair"]), "tagged": tagged}


COLUMNS = (
    ("nonempty", np.dtype(bool)),
    ("pair", np.dtype(np.uint64)),
    ("src", np.dtype(np.uint64)),
)


def _read_back(spill: IO[bytes], dtype: np.dtype) -> np.ndarray:
    spill.flush()
    spill.seek(0)
    return np.fromfile(spill, dtype)


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {k: np.concatenate([a[k], b[k]]) for k, _ in COLUMNS}
    shift = len(a["pair"])
    tagged = a["tagged"] + [(lo + shift, hi + shift) for lo, hi in b["tagged"]]
    return {**out, "raw": a["raw"] + b["raw"], "first": _first(out["pair"]), "tagged": tagged}


STEP = 1 << 20  # hashes a vectorised step over the scan's arrays takes (8 MiB of them)
BUCKET_BITS = 4  # duplicates are found among the pairs of one bucket (top bits) at a time


def _first(hashes: np.ndarray) -> np.ndarray:
    """Whether each pair is the first with its hash. Equal hashes share their top bits, so
    the pairs are taken a bucket of top bits at a time, each sorted stably on its own (its
    first occurrences are the corpus's): sorting all at once would take ~30 bytes a pair
    beside the hashes, a bucket takes 1/16 of that."""
    shift = np.uint64(64 - BUCKET_BITS)
    top = np.empty(len(hashes), np.uint8)
    for start in range(0, len(hashes), STEP):
        top[start : start + STEP] = hashes[start : start + STEP] >> shift
    first = np.zeros(len(hashes), bool)
    for bucket in range(1 << BUCKET_BITS):
        at = np.flatnonzero(top == bucket)
        first[at[np.unique(hashes[at], return_index=True)[1]]] = True
    return first


def held_out_ranges(scanned: dict[str, Any], sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Source-hash ranges [lo, hi) of the held-out splits cut from train: the distinct pairs'
    source hashes sorted, each split takes the next `size` of them, ending before a hash
    (a whole source sentence, all its pairs) so that groups are never cut in two."""
    if not sizes:
        return {}
    cuttable = _cuttable(scanned)
    wanted, distinct = sum(sizes.values()), int(np.count_nonzero(cuttable))
    if wanted >= distinct:
        names = " + ".join(f"data.{name}_size" for name in sizes)
        corpus = "untagged corpora" if scanned["tagged"] else "corpus"
        raise ConfigError(f"{names} ({wanted}) is not smaller than the {corpus} ({distinct} pairs)")
    # the cut reads the sorted hashes up to position `wanted`: the smallest wanted + 1
    hashes = _smallest(scanned["src"], cuttable, wanted + 1)
    cut, lo, at = {}, 0, 0
    for name, size in sizes.items():
        hi = int(hashes[at + size])
        cut[name], lo, at = (lo, hi), hi, int(np.searchsorted(hashes, hi))
    return cut


def _cuttable(scanned: dict[str, Any]) -> np.ndarray:
    """Which pairs (with text) valid and test may be cut from: the first of their kind, of an
    untagged corpus."""
    if not scanned["tagged"]:
        return scanned["first"]
    cuttable = scanned["first"].copy()
    for lo, hi in scanned["tagged"]:
        cuttable[lo:hi] = False
    return cuttable


def _smallest(values: np.ndarray, where: np.ndarray, count: int) -> np.ndarray:
    """The `count` smallest of `values[where]`, sorted, found STEP values at a time (no copy
    of them all)."""
    kept = np.zeros(0, values.dtype)
    for start in range(0, len(values), STEP):
        part = values[start : start + STEP][where[start : start + STEP]]
        kept = np.concatenate([kept, part])
        if len(kept) > count:
            kept = np.partition(kept, count - 1)[:count]
    return np.sort(kept)


def split_codes(scanned: dict[str, Any], cut: dict[str, tuple[int, int]]) -> np.ndarray:
    """What becomes of each raw pair: EMPTY, DUPLICATE, VALID, TEST, HELD_SOURCE or TRAIN."""
    first, src = scanned["first"], scanned["src"]
    inner = np.where(first, np.uint8(TRAIN), np.uint8(DUPLICATE))  # uint8: a byte a pair
    for name, (lo, hi) in cut.items():
        inner[first & (src >= lo) & (src < hi)] = HELD_OUT[name]
    for lo, hi in scanned["tagged"] if cut else ():
        part = inner[lo:hi]
        part[(part == VALID) | (part == TEST)] = HELD_SOURCE
    codes = np.full(len(scanned["nonempty"]), EMPTY, np.uint8)
    codes[scanned["nonempty"]] = inner
    return codes


def sample(codes: np.ndarray, size: int, seed: int) -> None:
    """Mark a seeded sample of `size` training pairs (all, if fewer) SAMPLED."""
    train = np.flatnonzero(codes == TRAIN)
    if len(train) > size:
        train = train[np.random.default_rng([seed, 3]).choice(len(train), size, replace=False)]
    codes[train] = SAMPLED


def scan_chunk(
    chunk: Chunk, seed: int, tag: str | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether each pair has text on both sides; the hashes of those that do, and of their
    source sentences (keyed by the seed; without the corpus's `tag`)."""
    src, tgt = ([normalize(text) for text in side] for side in chunk)
    nonempty = np.array([bool(s and t) for s, t in zip(src, tgt)], bool)
    kept = [(s, t) for s, t, k in zip(src, tgt, nonempty.tolist()) if k]
    pairs = keyed_hashes([f"{s}\t{t}" for s, t in kept], b"")
    sources = [s.removeprefix(f"{tag} ") if tag else s for s, _ in kept]
    return nonempty, pairs, keyed_hashes([source_key(s) for s in sources], str(seed).encode())


def keyed_hashes(texts: list[str], key: bytes) -> np.ndarray:
    digests = b"".join(hashlib.blake2b(t.encode(), digest_size=8, key=key).digest() for t in texts)
    return np.frombuffer(digests, "<u8").astype(np.uint64)
