"""What a model was trained to carry, measured on it and kept with its weights (their
metadata, the CTranslate2 export's manifest, the transformers export's config), so that a
model copied anywhere decodes as in its run folder:

- the length it carries (`carried`, source tokens): from the longest validation sentence
  up, doubling to data.max_length, the longest at which validation sentences joined into
  lines of that many tokens (and of every shorter length tried) translate within
  CARRIED_BLEU of the same sentences one by one (`measure_carried`, at each validation, of
  the model as it is then). A source longer is cut into pieces
  (mt.decoding.pieces). A model never measured carries data.max_length, the longest example
  it was trained on.
- its length ratio (`ratio`): target tokens per source token of its training split, the
  coverage guard's measure (mt.decoding.coverage); DEFAULT_RATIO where not known.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config import Config, DecodeConfig

# Joined lines may score this far below their sentences one by one and still be carried:
# the bar issue 51 sets for long text. Measured on the Tatoeba recipe (docs/benchmarks.md,
# "Real text"): a model trained on joined examples carries data.max_length (64) within it.
CARRIED_BLEU = 2.0
# Without a measured ratio: one target token per source token. A joint BPE between related
# languages is near it (English-Spanish Tatoeba: 1.02); a pair far from it (3 words of
# English for 1 of a compounding language) still stays above the guard's half of it.
DEFAULT_RATIO = 1.0
METADATA = "trained"  # the key of the weights' metadata, the manifest's, the config's


@dataclass(frozen=True)
class Trained:
    """The length a model carries, in source tokens, and its target/source length ratio."""

    carried: int
    ratio: float = DEFAULT_RATIO

    @classmethod
    def of(cls, saved: str | dict | None, config: Config) -> Trained:
        """What a model's metadata says (`saved`: its JSON, or the dict; None: nothing),
        data.max_length and DEFAULT_RATIO for what it does not."""
        try:
            found = json.loads(saved) if isinstance(saved, str) else dict(saved or {})
            return cls(int(found["carried"]), float(found["ratio"]))
        except (ValueError, KeyError, TypeError):
            return cls(config.data.max_length, DEFAULT_RATIO)

    def saved(self) -> dict[str, int | float]:
        """As the metadata keeps it, in JSON (`of` reads it back)."""
        return dataclasses.asdict(self)


def carried_pieces(decode: DecodeConfig, carried: int) -> DecodeConfig:
    """`decode` with pieces of `carried` tokens unless decode.piece_tokens sets them."""
    return dataclasses.replace(decode, piece_tokens=decode.piece_tokens or carried)


def length_ratio(stats: dict) -> float:
    """Target tokens per source token of the training split, from `mt prepare`'s statistics."""
    tokens = stats["tokens"]["train"]
    return tokens["tgt"] / max(tokens["src"], 1)


def measure_carried(
    translate: Callable[[Sequence[str], int], list[str]],
    sources: Sequence[str],
    references: Sequence[str],
    singles: Sequence[str],
    lengths: Sequence[int],
    longest: int,
    bleu: Callable[[Sequence[str], Sequence[str]], float],
) -> int:
    """The length carried (see the module's doc): `sources` of `lengths` tokens, their
    `references` and their translations one by one, whole (`singles`), joined into lines of
    at most the longest source's length, then twice as many, ... up to `longest`: the
    longest length up to which every line length `translate` (texts, the longest piece: a
    longer sentence is cut) gives within CARRIED_BLEU of the singles joined alike. None is
    shorter than the sentences the model is validated on, which it was trained on as they
    are; a weak model is tried at that length alone."""
    carried = limit = min(max(lengths, default=1), longest)
    while True:
        lines = _lines(lengths, limit)
        if any(end - start > 1 for start, end in lines):  # else the singles themselves
            joined = [
                [" ".join(side[a:b]) for a, b in lines] for side in (sources, references, singles)
            ]
            found = bleu(translate(joined[0], limit), joined[1])
            if found < bleu(joined[2], joined[1]) - CARRIED_BLEU:
                return carried
        carried = limit
        if limit >= longest:
            return carried
        limit = min(2 * limit, longest)


def _lines(lengths: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """Consecutive sentences of `lengths` tokens as lines of at most `limit` (a longer one
    alone): (start, end) of each."""
    lines, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and total + n + 1 > limit:
            lines.append((start, i))
            start, total = i, 0
        total += n + (i > start)
    return [*lines, (start, len(lengths))] if len(lengths) else lines
