"""BPE-dropout for training: each epoch's training pairs segmented anew, seeded, streamed
through the store a run of sentences at a time into files of their own (memory-mapped as
the store is), so that memory does not grow with the corpus.

`tokenizers` has BPE-dropout too, but draws from a generator no seed reaches, so neither a
resumed run nor a second run with the same seed could redo an epoch. Here a segmentation is
a function of the generator given: each word is rebuilt from its byte symbols and merged as
BPE does, the lowest-ranked pair first (leftmost on a tie), except that at every step each
candidate merge is skipped with probability `p`; a word whose candidates were all skipped
stops there, as in `tokenizers`. With p = 0 this gives `encode`'s ids (tested).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers

from ..config import Config
from ..run_folder import data_dir
from .prepare import Prepared
from .store import SIDES, Sentences, Split, SplitWriter, open_split
from .tokenizer import detokenize, space_led_chunks

TAGS = 0xE000  # private-use characters that stand for added tokens (corpus tags) in words
STEP = 1 << 16  # sentences of an epoch's split mixed from the two segmentations together


class BpeDropout:
    """BPE-dropout of the sentences of a store, seeded. The words are merged CHUNK at a time,
    all of a chunk at once (one merge per word per step, in numpy), in the order of the
    sentences, whatever the runs of sentences they are read in: the draws, and so the ids,
    depend on the generator and the sentences alone."""

    CHUNK = 1 << 14  # words merged together (a chunk is as wide as its longest word)
    GROUP = 1 << 12  # sentences read and decoded together
    MEMO = 1 << 18  # chunks whose words are remembered; past that the memo starts again

    def __init__(self, tokenizer: Tokenizer, p: float) -> None:
        saved = json.loads(tokenizer.to_str())
        vocab = saved["model"]["vocab"]
        pairs = [m.split(" ") if isinstance(m, str) else m for m in saved["model"]["merges"]]
        self.tokenizer, self.p, self.size = tokenizer, p, tokenizer.get_vocab_size()
        self.memo: dict[str, list[str]] = {}  # a space-led chunk of text -> its words
        keys = np.array([vocab[a] * self.size + vocab[b] for a, b in pairs], np.int64)
        self.order = np.argsort(keys)  # the rank of each sorted key
        self.keys = keys[self.order]
        self.merged = np.array([vocab[a + b] for a, b in pairs], np.int64)[self.order]
        # an added token (a corpus tag) is one symbol that no merge takes, split from the text
        # before anything else as `tokenizers` does (longest first)
        added = sorted(
            (t for t in saved["added_tokens"] if not t["special"]), key=lambda t: -len(t["content"])
        )
        self.tags = {t["content"]: chr(TAGS + i) for i, t in enumerate(added)}
        self.split_tags = (
            re.compile("(" + "|".join(re.escape(t["content"]) for t in added) + ")")
            if added
            else None
        )
        self.after_tag = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        self.symbols = np.zeros(TAGS + len(added), np.int64)  # character -> symbol id
        for char in alphabet:
            self.symbols[ord(char)] = vocab[char]
        for i, token in enumerate(added):
            self.symbols[TAGS + i] = token["id"]

    def sample(
        self, sentences: Sentences, rng: np.random.Generator
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every sentence segmented anew, in order, a run of sentences at a time: their token
        ids (int32) one after another and the count of each sentence's."""
        todo = [np.zeros(0, np.int64)] * 2  # symbols and word lengths read, not merged
        tokens = counts = np.zeros(0, np.int64)  # words merged, not given
        waiting = np.zeros(0, np.int64)  # words of each sentence read, not given
        reads = self._read(sentences)
        while True:
            read = next(reads, None)  # None: all read, the last words are merged
            if read is not None:
                todo = [np.concatenate(x) for x in zip(todo, read[:2])]
                waiting = np.concatenate([waiting, read[2]])
            while len(todo[1]) >= self.CHUNK or (read is None and len(todo[1])):
                cut = int(todo[1][: self.CHUNK].sum())
                more, per_word = self._merge_words(todo[0][:cut], todo[1][: self.CHUNK], rng)
                todo = [todo[0][cut:], todo[1][self.CHUNK :]]
                tokens, counts = np.concatenate([tokens, more]), np.concatenate([counts, per_word])
            ends = np.cumsum(waiting)
            done = int(np.searchsorted(ends, len(counts), side="right"))
            if done:
                taken = np.concatenate(([0], np.cumsum(counts)))  # tokens of the words before
                given = taken[ends[:done]] - taken[ends[:done] - waiting[:done]]
                took = int(taken[ends[done - 1]])
                yield tokens[:took].astype(np.int32), given
                tokens, counts = tokens[took:], counts[ends[done - 1] :]
                waiting = waiting[done:]
            if read is None:
                return

    def _read(self, sentences: Sentences) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per run of GROUP sentences: the byte symbols of their words, one after another, the
        length of each word and the words of each sentence."""
        for start in range(0, len(sentences), self.GROUP):
            ids, lengths = sentences.take(np.arange(start, min(start + self.GROUP, len(sentences))))
            sentences.release()  # the pages read: unmapped (`Sentences.release`)
            texts = detokenize(self.tokenizer, np.split(ids, np.cumsum(lengths)[:-1]))
            words = [self._sentence_words(text) for text in texts]
            flat = [w for sentence in words for w in sentence]
            codes = np.frombuffer("".join(flat).encode("utf-32-le"), np.uint32)
            yield (
                self.symbols[codes],
                np.fromiter(map(len, flat), np.int64, len(flat)),
                np.fromiter(map(len, words), np.int64, len(words)),
            )

    def _sentence_words(self, text: str) -> list[str]:
        """`_words` of a sentence: of each of its space-led chunks, remembered, where the text
        is normalised (its words one space apart: the pre-tokeniser never cuts across such a
        space, as `tok.PieceEncoder` says), else of the whole."""
        if " ".join(text.split()) != text:
            return self._words(text)
        if len(self.memo) > self.MEMO:
            self.memo.clear()
        words = []
        for chunk in space_led_chunks(text):
            found = self.memo.get(chunk)
            if found is None:
                found = self.memo[chunk] = self._words(chunk)
            words += found
        return words

    def _words(self, text: str) -> list[str]:
        """The words of a text as byte-level characters; a tag one character of its own."""
        if self.split_tags is None:
            return [w for w, _ in self.tokenizer.pre_tokenizer.pre_tokenize_str(text)]
        words = []
        for i, part in enumerate(self.split_tags.split(text)):
            if i % 2:  # a tag, matched
                words.append(self.tags[part])
            elif part:  # after a tag, no space put before the part (mt.data.tokenizer)
                cut = self.tokenizer.pre_tokenizer if i == 0 else self.after_tag
                words += [w for w, _ in cut.pre_tokenize_str(part)]
        return words

    def _merge_words(
        self, symbols: np.ndarray, lengths: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Words (their symbols one after another, and their lengths) merged: their tokens one
        after another and each word's count."""
        width = int(lengths.max())
        rows = np.full((len(lengths), width), -1, np.int64)  # (W, L) symbols, -1 after
        rows[np.arange(width) < lengths[:, None]] = symbols
        self._merge(rows, rng)
        return rows[rows >= 0], (rows >= 0).sum(1)

    def _merge(self, rows: np.ndarray, rng: np.random.Generator) -> None:
        """Merge the words of `rows` (W, L) in place until no merge is left or taken."""
        active = np.arange(len(rows))
        while len(active):
            left, right = rows[active, :-1], rows[active, 1:]  # (A, L - 1) adjacent pairs
            key = left * self.size + right
            at = np.searchsorted(self.keys, key).clip(max=len(self.keys) - 1)
            rank = np.where((self.keys[at] == key) & (right >= 0), self.order[at], np.inf)
            if self.p:
                rank[rng.random(rank.shape) < self.p] = np.inf
            best = rank.argmin(1)  # (A,) leftmost of the lowest rank
            go = rank[np.arange(len(active)), best] < np.inf
            active, best = active[go], best[go]
            merged = self.merged[at[go, best]]
            words = rows[active]
            shifted = np.concatenate([words[:, 1:], np.full((len(words), 1), -1)], 1)
            words = np.where(np.arange(rows.shape[1]) > best[:, None], shifted, words)
            words[np.arange(len(words)), best] = merged
            rows[active] = words


def dropout_epochs(prepared: Prepared, config: Config) -> Callable[[int], Split] | None:
    """With tokenizer.dropout: epoch -> the training pairs segmented anew by BPE-dropout, a
    function of (run.seed, epoch) alone, so that a resumed run (or another process) redoes an
    epoch exactly. A pair that comes out longer than data.max_length keeps its usual ids.
    None without dropout.

    An epoch's split is written to files in a temporary folder beside the store (the source
    side segmented, then the target side, then the two mixed with the usual ids where too
    long), each a run of sentences at a time, and memory-mapped: up to three times the train
    split's tokens on disk while an epoch is written, once after; an epoch's files go when the
    next epoch's are written, and the folder when the process ends."""
    if not config.tokenizer.dropout:
        return None
    train, limit = prepared.splits["train"], config.data.max_length
    toks = {"src": prepared.src_tokenizer, "tgt": prepared.tgt_tokenizer}
    sides = {side: BpeDropout(toks[side], config.tokenizer.dropout) for side in SIDES}
    folder = tempfile.TemporaryDirectory(prefix="dropout-", dir=data_dir(Path(config.run.dir)))
    dtype = train.src.ids.dtype

    def epoch_split(epoch: int) -> Split:
        rng = np.random.default_rng([config.run.seed, epoch, 1])  # not token_batches' stream
        here = Path(tempfile.mkdtemp(prefix=f"epoch{epoch}-", dir=folder.name))
        drafts = SplitWriter(here, "draft", dtype)
        for side in SIDES:  # the source side whole, then the target side: one stream
            for ids, lengths in sides[side].sample(getattr(train, side), rng):
                drafts.append({side: (ids, lengths)})
        draft = open_split(here, "draft", drafts.close())
        writer = SplitWriter(here, "train", dtype)
        for start in range(0, len(train), STEP):
            index = np.arange(start, min(start + STEP, len(train)))
            fits = (draft.src.lengths(index) <= limit) & (draft.tgt.lengths(index) <= limit)
            writer.append({side: _mixed(draft, train, side, index, fits) for side in SIDES})
        split = open_split(here, "train", writer.close())
        split.corpora = train.corpora
        for draft_file in here.glob("draft.*"):  # mapped files stay readable once removed
            draft_file.unlink()
        for older in Path(folder.name).iterdir():
            if older != here:
                shutil.rmtree(older)
        return split

    return epoch_split


def _mixed(
    first: Split, second: Split, side: str, index: np.ndarray, use_first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sentences `index` of `side`, from `first` where `use_first` (else as encoded, from
    `second`): their ids one after another and their lengths."""
    parts = []
    for split in (first, second):
        ids, lengths = getattr(split, side).take(index)
        getattr(split, side).release()
        parts.append(Sentences(ids, np.concatenate(([0], np.cumsum(lengths)))))
    mixed = Sentences.mixed(*parts, use_first)
    return mixed.ids, mixed.lengths()
