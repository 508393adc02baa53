"""Several checkpoints of one tokenizer decoded as one model: at each step the ensemble's
distribution is the mean of the models' probabilities, as fairseq's EnsembleModel averages
them (`logsumexp(log_probs) - log(n)`). Search and scoring take an `Ensemble` where they take a
Transformer: it encodes, starts decoding, steps and runs a forward pass as one, returning
log-probabilities where a Transformer returns logits (a log-softmax of them changes nothing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import checkpoint as ckpt
from ..errors import ConfigError
from ..model import Transformer


def mean_probabilities(logits: Sequence[Tensor]) -> Tensor:
    """log of the mean of softmax(logits) over the models, in float32: (..., V) each."""
    logprobs = torch.stack([x.float().log_softmax(-1) for x in logits])
    return logprobs.logsumexp(0) - math.log(len(logits))


class EnsembleState:
    """The decoder states of the ensemble's models, reordered together."""

    def __init__(self, states: list) -> None:
        self.states = states

    def select(self, rows: Tensor, sources: Tensor | None = None) -> None:
        for state in self.states:
            state.select(rows, sources)


class Ensemble(nn.Module):
    """Models of the same vocabularies as one: their outputs are mean-probability log-probs."""

    def __init__(self, models: Sequence[Transformer]) -> None:
        super().__init__()
        self.models = nn.ModuleList(models)
        # the tightest limit on positions binds every model
        self.cfg = min((m.cfg for m in models), key=lambda cfg: cfg.max_positions)

    @property
    def out(self) -> nn.Linear:  # the output layer's size is the target vocabulary's
        return self.models[0].out

    @property
    def specials(self):  # one tokenizer, so one set of special ids
        return self.models[0].specials

    def encode(self, src: Tensor) -> tuple[list[Tensor], Tensor]:
        encoded = [model.encode(src) for model in self.models]
        return [memory for memory, _ in encoded], encoded[0][1]

    def start_decoding(
        self, memory: list[Tensor], src_keep: Tensor, max_len: int, rows_per_source=1, static=False
    ) -> EnsembleState:
        return EnsembleState(
            [
                model.start_decoding(x, src_keep, max_len, rows_per_source, static)
                for model, x in zip(self.models, memory)
            ]
        )

    def decode_step(self, tokens: Tensor, state: EnsembleState) -> Tensor:
        return mean_probabilities(
            [model.decode_step(tokens, s) for model, s in zip(self.models, state.states)]
        )

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return mean_probabilities([model(src, tgt_in) for model in self.models])


def load_ensemble(paths: Sequence[str | Path], device) -> ckpt.Loaded:
    """The checkpoints at `paths` as one model (the first alone if it is the only one), with
    the first's config, tokenizers and metadata. Checkpoints whose tokenizers differ from the
    first's are refused: the models would not read and write the same token ids."""
    loaded = [ckpt.load(path, device) for path in paths]
    first = loaded[0]
    for other in loaded[1:]:
        for side in ("src", "tgt"):
            mine, theirs = (getattr(x, f"{side}_tokenizer") for x in (first, other))
            if mine.to_str() != theirs.to_str():
                raise ConfigError(
                    f"ensemble: {other.path} has another {side} tokenizer than {first.path} "
                    f"(vocabularies {theirs.get_vocab_size():,} and {mine.get_vocab_size():,}); "
                    "an ensemble needs one tokenizer"
                )
    if len(loaded) == 1:
        return first
    return dataclasses.replace(first, model=Ensemble([x.model for x in loaded]).eval())
