"""Sentence pairs packed into rows of one fixed length: batches of one shape, without padding.

Padded batches change shape from batch to batch, and on a GPU every new shape pays a first
call (kernel plans, a recompile when compiled); for sentences of ~10 tokens the kernels are
tiny and the host cannot keep up. Packed, every batch is `rows` x `length` tokens a side:
sentences sit side by side in a row, a pair's source in the source row and its target at the
same row and order in the target row. The model keeps them apart by per-token document ids
(attention never crosses sentences, see `model.Transformer`) and restarts positions at every
sentence, so it computes what it computes for the same sentences padded.

Pure functions of the sentence lengths, seed and epoch, like `batches.token_batches`: a resumed
run rebuilds the same epoch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..config import Config, longest_sequence
from ..errors import ConfigError
from .batch import Batch, Packing
from .store import Sentences
from .tokenizer import SPECIALS, Specials

ROW_MULTIPLE = 128  # default row lengths are multiples of FlexAttention's block size

__all__ = ["Rows", "collate_packed", "pack_rows", "row_length"]


class Rows(NamedTuple):
    """One batch's plan: sentences in row order and the row each sits in (non-decreasing)."""

    index: np.ndarray  # (n,) sentence ids
    row: np.ndarray  # (n,) row of each, 0 .. rows - 1


def row_length(config: Config, device_type: str) -> int:
    """Tokens in a packed row for a run on `device_type`; 0: padded batches, not packed.

    `train.pack: auto` packs on CUDA, where one shape is what makes compiling and CUDA
    graphs pay, and not elsewhere: on a CPU, batches of similar lengths waste a few percent
    in padding, less than attention over whole rows costs."""
    t = config.train
    if t.pack is False or (t.pack == "auto" and device_type != "cuda"):
        return 0
    length = t.pack_length or -(-longest_sequence(config.data) // ROW_MULTIPLE) * ROW_MULTIPLE
    if length > t.max_tokens:
        raise ConfigError(
            f"train.max_tokens: {t.max_tokens} is less than one packed row of {length} tokens "
            "(train.pack_length); raise it, or set train.pack: false"
        )
    return length


def pack_rows(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    length: int,
    rows: int,
    seed: int,
    epoch: int,
) -> list[Rows]:
    """The batches of `epoch`: every sentence pair once, in rows of `length` tokens a side
    (source + EOS, and BOS/EOS + target, each take their length + 1), `rows` rows a batch;
    the last batch may have fewer rows (collate fills them with padding).

    Next fit in an order drawn from (seed, epoch): a row takes pairs until the next one would
    overflow either side. Sentences far shorter than a row waste half of one on average at a
    row's end; and every row is a random sample of the corpus, as a shuffled batch is, where
    first-fit-decreasing would put long sentences with long ones. One binary search a row,
    no loop over sentences: an epoch of Tatoeba packs in a blink.
    """
    src_cost, tgt_cost = src_lengths + 1, tgt_lengths + 1
    too_long = np.flatnonzero(np.maximum(src_cost, tgt_cost) > length)
    if len(too_long):
        i = too_long[0]
        raise ConfigError(
            f"train.pack_length: sentence pair {i} needs {max(src_cost[i], tgt_cost[i])} "
            f"tokens, more than a row of {length}"
        )
    order = np.random.default_rng([seed, epoch]).permutation(len(src_lengths))
    src_end = np.concatenate(([0], np.cumsum(src_cost[order])))  # tokens before pair i
    tgt_end = np.concatenate(([0], np.cumsum(tgt_cost[order])))
    starts = [0]  # first pair of each row
    while starts[-1] < len(order):
        i = starts[-1]
        fits_src = np.searchsorted(src_end, src_end[i] + length, "right") - 1
        fits_tgt = np.searchsorted(tgt_end, tgt_end[i] + length, "right") - 1
        starts.append(min(fits_src, fits_tgt))
    row_of = np.repeat(np.arange(len(starts) - 1), np.diff(starts))  # (n,)
    return [
        Rows(order[starts[first] : starts[last]], row_of[starts[first] : starts[last]] - first)
        for first, last in (
            (b, min(b + rows, len(starts) - 1)) for b in range(0, len(starts) - 1, rows)
        )
    ]


def collate_packed(
    src: Sentences,
    tgt: Sentences,
    plan: Rows,
    length: int,
    rows: int,
    specials: Specials = SPECIALS,
) -> Batch:
    """The arrays of a batch planned by `pack_rows`, (rows, length) each: gathered and
    scattered by index, with no loop over the sentences (a GPU batch holds thousands)."""
    grid = (rows, length)
    src_cell, src_doc, src_pos, src_at, src_last = _layout(src, plan, length)
    tgt_cell, tgt_doc, tgt_pos, tgt_at, tgt_last = _layout(tgt, plan, length)
    pad, bos, eos = specials
    return Batch(
        _grid(src_cell, np.where(src_last, eos, src.ids.take(src_at, mode="clip")), pad, grid),
        _grid(
            tgt_cell, np.where(tgt_pos == 0, bos, tgt.ids.take(tgt_at - 1, mode="clip")), pad, grid
        ),
        _grid(tgt_cell, np.where(tgt_last, eos, tgt.ids.take(tgt_at, mode="clip")), pad, grid),
        Packing(
            _grid(src_cell, src_doc, -1, grid),
            _grid(tgt_cell, tgt_doc, -1, grid),
            _grid(src_cell, src_pos, 0, grid),
            _grid(tgt_cell, tgt_pos, 0, grid),
        ),
    )


def _layout(side: Sentences, plan: Rows, length: int):
    """Per token of a side of the batch, each sentence with one extra token (EOS or BOS):
    its cell in the flattened (rows, length) grid, its sentence in its row, its position in
    that sentence, where `side.ids` holds it (the extra one: past the end) and whether it
    is the last (the extra EOS)."""
    sizes = side.lengths(plan.index) + 1  # (n,)
    starts = np.cumsum(sizes) - sizes  # counting the tokens of every row before
    first = np.searchsorted(plan.row, plan.row)  # the first sentence of each one's row
    sentence = np.repeat(np.arange(len(sizes)), sizes)  # (tokens,)
    pos = np.arange(len(sentence)) - starts[sentence]
    cell = plan.row[sentence] * length + (starts - starts[first])[sentence] + pos
    at = side.offsets[plan.index][sentence] + pos
    return cell, (np.arange(len(sizes)) - first)[sentence], pos, at, pos == sizes[sentence] - 1


def _grid(cell: np.ndarray, values: np.ndarray, fill: int, shape: tuple[int, int]) -> np.ndarray:
    out = np.full(shape[0] * shape[1], fill, np.int64)
    out[cell] = values
    return out.reshape(shape)
