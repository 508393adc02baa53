"""The training batch, the one type every stage passes from the data to the loss: padded rows
(a sentence a row) or packed ones (sentences side by side, mt.data.packing), numpy arrays or
the same as tensors, every field (rows, length) int64."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Packing(NamedTuple):
    """Where each sentence of a packed row lies: which sentence of its row each token belongs
    to (-1: padding), and the token's position in that sentence (0 at padding)."""

    src_doc: Any
    tgt_doc: Any
    src_pos: Any
    tgt_pos: Any


class Batch(NamedTuple):
    src: Any  # source + EOS
    tgt_in: Any  # BOS + target: the decoder's input
    labels: Any  # target + EOS: what each position must predict; PAD: nothing
    packed: Packing | None = None  # None: padded rows

    def map(self, fn: Callable[[Any], Any]) -> Batch:
        """`fn` applied to every array (or tensor) of the batch."""
        packed = None if self.packed is None else Packing(*map(fn, self.packed))
        return Batch(fn(self.src), fn(self.tgt_in), fn(self.labels), packed)
