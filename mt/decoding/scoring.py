"""Score given translations: the model's log-probability of each target given its source, in
the units beam search ranks by. For filtering a noisy corpus by how likely the model finds each
pair, or reranking another system's output.

The target is read with teacher forcing, one forward pass a batch; each token's log-probability
is the decoder's log-softmax over the whole vocabulary, as in beam search, so a pair's `score`
is the one beam search gives that hypothesis (tested).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from tokenizers import Tokenizer

from ..config import DecodeConfig
from ..data import tokenizer as tok
from ..data.batches import collate, token_batches
from ..data.corpus import Pair
from ..data.store import Split
from ..device import autocast, precision_for
from ..messages import say
from ..model import Transformer, max_sentence_tokens
from .pieces import fitted_pairs, lead_ids, not_exact
from .search import length_penalty
from .translate import translation_batch_tokens

T = TypeVar("T")


def teacher_forced(
    model: Transformer,
    split: Split,
    lengths: tuple[np.ndarray, np.ndarray],
    budget: int,
    device: torch.device,
    measure: Callable[[torch.Tensor, torch.Tensor], T],
    dtype: torch.dtype | None = None,
) -> Iterator[tuple[np.ndarray, T]]:
    """The one teacher-forced pass over a split, for scoring and validation: batches of about
    `budget` tokens by `lengths` (source, target), in order, each as its sentences' indices
    and what `measure` makes of the decoder's logits (B, T, V) given the reference prefix
    and the labels (B, T). The logits are gone before the next batch's pass."""
    for index in token_batches(*lengths, budget, 0, 0, shuffle=False):
        batch = collate(split, index, model.specials).map(lambda a: torch.from_numpy(a).to(device))
        with autocast(device, dtype):
            logits = model(batch.src, batch.tgt_in)
        measured = measure(logits, batch.labels)
        del logits
        yield index, measured


def _target_logprobs(logits: torch.Tensor, tgt_out: torch.Tensor, pad: int) -> torch.Tensor:
    # (B, T, V), (B, T) -> (B,): each target's log-probability, its EOS included
    token_logprobs = logits.float().log_softmax(-1).gather(-1, tgt_out.unsqueeze(-1))
    return token_logprobs.squeeze(-1).masked_fill(tgt_out == pad, 0).sum(1)


@dataclass
class Scored:
    logprob: float  # of the target's tokens and its EOS
    tokens: int  # the target's tokens, EOS included
    per_token: float  # logprob / tokens
    score: float  # logprob / length_penalty(tokens, alpha): what beam search ranks by


def score_pairs(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
) -> list[Scored]:
    """The log-probability of each (source, target) text pair, in input order."""
    lead = lead_ids(src_tokenizer, cfg.target_language)
    src_ids = [lead + ids for ids in tok.encode(src_tokenizer, [src for src, _ in pairs])]
    return score_ids(model, src_ids, tok.encode(tgt_tokenizer, [t for _, t in pairs]), cfg, device)


@torch.inference_mode()
def score_ids(
    model: Transformer,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
) -> list[Scored]:
    """The same for token ids (without BOS and EOS). A pair longer than the model's positions
    is scored on what fits of it (mt.decoding.pieces), said in one line."""
    device = torch.device(device)
    limit = max_sentence_tokens(model.cfg)
    src_ids, tgt_ids, cut_ones = fitted_pairs(src_ids, tgt_ids, limit)
    if cut_ones:
        say(not_exact(cut_ones, limit))
    split = Split(list(src_ids), list(tgt_ids))
    lengths = split.src.lengths(), split.tgt.lengths()
    dtype, _ = precision_for(cfg.precision, device)
    model.eval()
    logprobs = np.zeros(len(split))
    budget = translation_batch_tokens(cfg, model.cfg, model.out.out_features, device)
    measure = functools.partial(_target_logprobs, pad=model.cfg.pad_id)
    passes = teacher_forced(model, split, lengths, budget, device, measure, dtype)
    for index, sums in passes:
        logprobs[index] = sums.tolist()
    return [
        Scored(float(lp), int(n), float(lp / n), float(lp / length_penalty(int(n), cfg.alpha)))
        for lp, n in zip(logprobs, lengths[1] + 1)
    ]
