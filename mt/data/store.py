"""The token store: each side of each split as one flat array of token ids and the offsets
where its sentences begin, in files that training memory-maps (fairseq's
MMapIndexedDataset), so that a corpus of any size is read without holding it: no Python
object per sentence, pages read from disk as batches touch them.

    <split>.<side>.tokens   uint16 while the vocabulary fits, else int32; no BOS/EOS
    <split>.<side>.offsets  int64, sentences + 1: sentence i is tokens[offsets[i]:offsets[i+1]]
    <split>.<side>.counts   int64, how often each token id occurs (up to the largest seen),
                            counted as the tokens are written (a store prepared before these
                            files existed is counted when read, COUNT_STEP tokens at a time)

`Split` is a view over them, with the text of valid and test (small) kept beside.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..run_folder import store_files

SIDES = ("src", "tgt")
COUNT_STEP = 1 << 22  # tokens counted together (np.bincount copies them to int64: 32 MiB)


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


class Sentences(Sequence):
    """One side of a split: sentence i's token ids are `ids[offsets[i]:offsets[i + 1]]`."""

    def __init__(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        counts: np.ndarray | None = None,
        maps: tuple[mmap.mmap, ...] = (),
    ) -> None:
        self.ids, self.offsets = ids, offsets
        self._counts = counts  # of each token id, where the store kept them
        self._maps = maps  # the files `ids` and `offsets` are mapped from, if they are

    def release(self) -> None:
        """Unmap the pages of the files that this process has read: they stay in the page
        cache, and the next read maps them again. A mapped page counts to the process's
        memory (RSS) until then, and the kernel maps a large folio (megabytes) a fault:
        batches drawn from all over the store would map all of it."""
        for mapped in self._maps:
            mapped.madvise(mmap.MADV_DONTNEED)

    def counts(self) -> np.ndarray:
        """How often each token id occurs (int64, up to the largest id at least): as the store
        kept them, else counted COUNT_STEP tokens at a time (never a copy of them all)."""
        if self._counts is None:
            self._counts = np.zeros(0, np.int64)
            for start in range(0, len(self.ids), COUNT_STEP):
                step = np.bincount(self.ids[start : start + COUNT_STEP])
                self._counts = added(self._counts, step)
            self.release()
        return self._counts

    def inside_counts(self) -> np.ndarray:
        """`counts` of the tokens past each sentence's first: how often each id occurs inside
        a sentence (a word's first token is the same at a sentence's start, mt.data.tokenizer)."""
        counts = self.counts().copy()
        step = COUNT_STEP >> 4  # sentences: their first tokens lie on a few MiB of pages
        for start in range(0, len(self.offsets) - 1, step):
            begin = self.offsets[start : start + step + 1]
            firsts = begin[:-1][np.diff(begin) > 0]
            counts -= np.bincount(self.ids[firsts], minlength=len(counts))[: len(counts)]
            self.release()  # else every page of the ids would stay mapped (`release`)
        return counts

    @classmethod
    def of(cls, seqs: Sequence[Sequence[int]]) -> Sentences:
        """Sentences held in memory, from a list of id sequences."""
        lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        ids = np.concatenate([np.asarray(s, np.int32) for s in seqs]) if len(seqs) else []
        return cls(np.asarray(ids, np.int32), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: Any) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self, index: np.ndarray | None = None) -> np.ndarray:
        """Tokens of every sentence, or of those of `index`."""
        if index is None:
            return np.diff(self.offsets)
        return self.offsets[index + 1] - self.offsets[index]

    def take(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sentences of `index`, in its order: their ids concatenated and their lengths,
        gathered in one indexing (no loop over the sentences)."""
        lengths = self.lengths(index)
        return self.ids[spans(self.offsets[index], lengths)], lengths

    @classmethod
    def mixed(cls, first: Sentences, second: Sentences, use_first: np.ndarray) -> Sentences:
        """Sentence i of `first` where `use_first[i]`, else of `second`, gathered in one
        indexing from each (no loop over the sentences)."""
        lengths = np.where(use_first, first.lengths(), second.lengths())
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        ids = np.empty(offsets[-1], first.ids.dtype)
        for side, chosen in ((first, use_first), (second, ~use_first)):
            index = np.flatnonzero(chosen)
            taken, n = side.take(index)
            ids[spans(offsets[index], n)] = taken
        return cls(ids, offsets)


def added(counts: np.ndarray, more: np.ndarray) -> np.ndarray:
    """Two arrays of counts per token id (of any lengths) summed."""
    total = np.zeros(max(len(counts), len(more)), np.int64)
    total[: len(counts)] += counts
    total[: len(more)] += more
    return total


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The flat positions of the spans [start, start + length) of each, one after another."""
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + within


@dataclass
class Split:
    """One split: token ids per sentence (no BOS/EOS) and, for valid/test, the text. Given
    lists of id sequences, it holds them as `Sentences` in memory."""

    src: Sentences
    tgt: Sentences
    src_text: list[str] = field(default_factory=list)
    tgt_text: list[str] = field(default_factory=list)
    # valid/test: the language each pair goes to, for a model of both directions
    # (mt.data.directions); "" for a model of one
    targets: list[str] = field(default_factory=list)
    # train: (pairs, weight) of each corpus in store order; weight None: its own size
    corpora: list[tuple[int, float | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        sides = self.src, self.tgt
        self.src, self.tgt = (s if isinstance(s, Sentences) else Sentences.of(s) for s in sides)

    def __len__(self) -> int:
        return len(self.src)


class SplitWriter:
    """Appends encoded pairs of one split to its files, chunk by chunk."""

    def __init__(self, folder: Path, name: str, dtype: np.dtype) -> None:
        self.folder, self.name, self.dtype = folder, name, dtype
        self.tokens, self.sentences = dict.fromkeys(SIDES, 0), dict.fromkeys(SIDES, 0)
        self.counts = {side: np.zeros(0, np.int64) for side in SIDES}
        self.files: dict[str, tuple[IO[bytes], IO[bytes]]] = {}
        for side in SIDES:
            ids, offsets = (  # closed by `close`; a failed build removes the folder
                open(path, "wb")  # noqa: SIM115
                for path in store_files(folder, name, side)
            )
            offsets.write(np.zeros(1, np.int64).tobytes())
            self.files[side] = ids, offsets

    def append(self, sides: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """`sides`: per side (both, or one: the other's may come later), the chunk's flat ids
        and the length of each sentence."""
        for side, (ids, lengths) in sides.items():
            out_ids, out_offsets = self.files[side]
            out_ids.write(ids.astype(self.dtype).tobytes())
            out_offsets.write((self.tokens[side] + np.cumsum(lengths, dtype=np.int64)).tobytes())
            self.tokens[side] += len(ids)
            self.counts[side] = added(self.counts[side], np.bincount(ids))
            self.sentences[side] += len(lengths)

    def close(self) -> dict[str, Any]:
        """Close the files, write the counts; what `open_split` needs to read them."""
        for f in (f for pair in self.files.values() for f in pair):
            f.close()
        for side, counts in self.counts.items():
            counts.tofile(self.folder / f"{self.name}.{side}.counts")
        if len(set(self.sentences.values())) != 1:
            raise ValueError(f"{self.name}: the sides have {self.sentences} sentences")
        pairs = self.sentences["src"]
        return {"pairs": pairs, "tokens": self.tokens, "dtype": self.dtype.name}


def open_split(folder: Path, name: str, layout: dict[str, Any]) -> Split:
    """The split as written by `SplitWriter`, memory-mapped; ValueError if its files do not
    have the sizes `layout` says (a damaged store)."""
    sides = []
    for side in SIDES:
        ids_file, offsets_file = store_files(folder, name, side)
        ids, ids_map = _map(ids_file, np.dtype(layout["dtype"]), layout["tokens"][side])
        offsets, offsets_map = _map(offsets_file, np.dtype(np.int64), layout["pairs"] + 1)
        if offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError(f"{name}.{side}: offsets do not match the tokens")
        counts = _counts(folder / f"{name}.{side}.counts", len(ids))
        maps = tuple(m for m in (ids_map, offsets_map) if m is not None)
        sides.append(Sentences(ids, offsets, counts, maps))
    return Split(*sides)


def _counts(path: Path, tokens: int) -> np.ndarray | None:
    """The counts kept in `path`; None where the store has none (prepared before they were
    kept); ValueError if they do not add up to the side's tokens."""
    if not path.is_file():
        return None
    counts = np.fromfile(path, np.int64)
    if counts.sum() != tokens or (counts < 0).any():
        raise ValueError(f"{path}: counts of {counts.sum()} tokens, not {tokens}")
    return counts


def _map(path: Path, dtype: np.dtype, count: int) -> tuple[np.ndarray, mmap.mmap | None]:
    """The file as a read-only array (slices: plain views) and its mapping (None: empty)."""
    if path.stat().st_size != count * dtype.itemsize:
        raise ValueError(f"{path}: {path.stat().st_size} bytes, not {count * dtype.itemsize}")
    if count == 0:  # an empty file cannot be mapped
        return np.zeros(0, dtype), None
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype, count), mapped
