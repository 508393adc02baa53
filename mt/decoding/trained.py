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
- its connectives: the source words that lead a clause after a comma yet never a sentence
  ("and", "but", "or"), each with the target word the pairs that have it share most ("y",
  "pero", "o"), a piece led by one being no sentence the model has seen (mt.decoding.clauses);
  without a store, none.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..config import Config, DecodeConfig
from ..data import tokenizer as tok
from ..data.store import Sentences, Split, open_split
from ..run_folder import META, data_dir, store_files

# Chosen on Tatoeba valid sentences joined 2, 4, 8, 16 a line (scripts/bench_long.py --split
# valid; the 2,525-update Tatoeba model, 39.7 test BLEU): pieces of the 98th percentile (17
# tokens) score 29.6, 25.7, 24.2, 23.8 BLEU, the best of those tried (99th, 19 tokens: 29.5,
# 25.6, 23.8, 22.9; 95th, 14: 27.5, 24.7, 23.6, 23.3; 50th, 8: 16 to 18; 99.9th, 29: 27.0 down
# to 16.6), and leave single sentences as they were (41.55 one a line, 41.43 with no pieces;
# the 95th: 41.04); then, pieces cut only where needed and given as cut. Cut after every
# clause and given as sentences (mt.decoding.clauses) they come within 2 of the sentences one
# by one (docs/benchmarks.md).
CARRIED_PERCENTILE = 98
# Without a measured ratio: one target token per source token. A joint BPE between related
# languages is near it (English-Spanish Tatoeba: 1.02); a pair far from it (3 words of
# English for 1 of a compounding language) still stays above the guard's half of it.
DEFAULT_RATIO = 1.0
# A connective: a whole word that is at least CONNECTIVE_SHARE of the words after a comma in
# the training sources (and CONNECTIVE_FOLLOWS of them), begins under CONNECTIVE_STARTS of the
# sentences it is in, and shares its pairs with one target word at a Dice coefficient of
# CONNECTIVE_DICE at least. Tatoeba English: but 15% of the words after a comma, and 2.5%, or
# 0.6%, then 0.5%, against 0.06% at most for the nouns of lists (milk, men, fish), which a
# count alone lets in on a corpus 9 times as large; and/y 0.89, but/pero 0.86, or/o 0.71,
# then/entonces 0.52, while "right" (0.6%) shares at most 0.23, with razón.
CONNECTIVE_SHARE = 0.002
CONNECTIVE_FOLLOWS = 20
CONNECTIVE_STARTS = 0.01
CONNECTIVE_DICE = 0.5
CONNECTIVE_PAIRS = 200_000  # pairs evenly spaced over a larger store: function words are frequent


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


def connectives(
    src: Sentences, tgt: Sentences, tokenizers: tuple[Tokenizer, Tokenizer], lead: int = 0
) -> dict[str, str]:
    """The connectives of a corpus (see CONNECTIVE_SHARE) and their translations: `src` and
    `tgt` its sides, the first `lead` tokens of a source a language's."""
    if not len(src):
        return {}
    index = np.linspace(0, len(src) - 1, min(len(src), CONNECTIVE_PAIRS)).astype(np.int64)
    (src_ids, src_lengths), (tgt_ids, tgt_lengths) = src.take(index), tgt.take(index)
    src_offsets = np.concatenate(([0], np.cumsum(src_lengths)))
    src_tok, tgt_tok = tokenizers
    pairs = len(index)
    size = max(src_tok.get_vocab_size(), int(src_ids.max(initial=0)) + 1)
    texts = tok.detokenize(src_tok, [[i] for i in range(size)])
    after_comma = np.array([t.rstrip()[-1:] == "," for t in texts])
    # a token that goes on a word (neither a word's start nor a space or punctuation)
    goes_on = np.array(
        [t[:1].isalnum() and not tok.starts_word(src_tok, i) for i, t in enumerate(texts)]
    )
    nonempty = np.diff(src_offsets) > lead
    starts = src_offsets[:-1][nonempty] + lead
    whole = np.ones(len(src_ids), bool)  # a token that ends a word
    whole[:-1] = ~goes_on[src_ids[1:]]
    whole[src_offsets[1:][nonempty] - 1] = True  # a sentence's last
    follows = np.zeros(len(src_ids), bool)  # a whole word after a comma
    follows[1:] = after_comma[src_ids[:-1]]
    follows &= whole
    follows[starts] = False
    counts = np.bincount(src_ids, minlength=size)
    first = np.bincount(src_ids[starts], minlength=size)
    after = np.bincount(src_ids[follows], minlength=size)
    src_pair = np.repeat(np.arange(pairs), src_lengths)
    tgt_pair = np.repeat(np.arange(pairs), tgt_lengths)
    tgt_size = max(tgt_tok.get_vocab_size(), int(tgt_ids.max(initial=0)) + 1)
    in_pairs = pair_counts(tgt_ids, tgt_pair, tgt_size)
    least = max(CONNECTIVE_FOLLOWS, CONNECTIVE_SHARE * after.sum())
    found = {}
    for i in np.flatnonzero(after >= least):
        word = texts[i].strip()
        if not word.isalpha() or not word.islower() or not tok.starts_word(src_tok, int(i)):
            continue
        capital = tok.encode(src_tok, [word.capitalize()])[0]
        begun = first[capital[0]] if len(capital) == 1 else 0
        if begun >= CONNECTIVE_STARTS * (counts[i] + begun):
            continue
        has = np.zeros(pairs, bool)
        has[src_pair[src_ids == i]] = True
        shared = pair_counts(tgt_ids[has[tgt_pair]], tgt_pair[has[tgt_pair]], tgt_size)
        dice = 2 * shared / (has.sum() + in_pairs)
        best = int(dice.argmax())
        translation = tok.detokenize(tgt_tok, [[best]])[0].strip()
        if dice[best] >= CONNECTIVE_DICE and translation.isalpha():
            found[word] = translation
    return found


def pair_counts(ids: np.ndarray, pair: np.ndarray, size: int) -> np.ndarray:
    """In how many pairs each id of `size` is (`pair`: the pair of each of `ids`)."""
    keys = np.sort(pair.astype(np.int64) * size + ids)
    once = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return np.bincount(once % size, minlength=size)


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
    """The length a model carries, in source tokens, its target/source length ratio, and
    its connectives with their translations."""

    carried: int
    ratio: float
    connectives: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, run_dir: Path, config: Config, tokenizers: tuple[Tokenizer, Tokenizer]) -> Trained:
        """What `run_dir`'s prepared data says of the model of `config` (`tokenizers` its
        own); the defaults where it is not there."""
        carried = carried_length(train_source_offsets(run_dir), config.data.max_length)
        try:
            meta = json.loads((data_dir(run_dir) / META).read_text(encoding="utf-8"))
            ratio = length_ratio(meta["stats"])
        except (OSError, ValueError, KeyError, TypeError):
            return cls(carried, DEFAULT_RATIO)
        try:
            train = open_split(data_dir(run_dir), "train", meta["store"]["train"])
        except (OSError, ValueError, KeyError, TypeError):
            return cls(carried, ratio)
        return cls.of_split(train, config, tokenizers, ratio)

    @classmethod
    def of_split(
        cls,
        train: Split | None,
        config: Config,
        tokenizers: tuple[Tokenizer, Tokenizer],
        ratio: float = DEFAULT_RATIO,
    ) -> Trained:
        """What a prepared training split (None: none) says of the model of `config`."""
        if train is None:
            return cls(config.data.max_length, ratio)
        carried = carried_length(train.src.offsets, config.data.max_length)
        lead = int(config.data.both_directions)  # each source led by its direction's token
        return cls(carried, ratio, connectives(train.src, train.tgt, tokenizers, lead))
