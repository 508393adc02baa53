"""Score given translations: the model's log-probability of each target given its source, in
the units beam search ranks by. For filtering a noisy corpus by how likely the model finds each
pair, or reranking another system's output.

The target is read with teacher forcing, one forward pass a batch; each token's log-probability
is the decoder's log-softmax over the whole vocabulary, as in beam search, so a pair's `score`
is the one beam search gives that hypothesis (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from ..config import DecodeConfig
from ..data import tokenizer as tok
from ..data.batches import collate, token_batches
from ..data.corpus import Pair
from ..data.store import Split
from ..device import autocast, precision_for
from ..errors import ConfigError
from ..model import Transformer, max_length
from .search import length_penalty
from .translate import decode_batch_tokens


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
    src_ids = tok.encode(src_tokenizer, [src for src, _ in pairs])
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
    is refused: it cannot be scored whole."""
    device = torch.device(device)
    limit = max_length(model.cfg)
    for number, (src, tgt) in enumerate(zip(src_ids, tgt_ids), start=1):
        if max(len(src), len(tgt)) > limit:
            raise ConfigError(
                f"pair {number}: {max(len(src), len(tgt))} tokens on a side, more than the "
                f"{limit} the model's positions hold (model.max_positions - 1); shorten it"
            )
    split = Split(list(src_ids), list(tgt_ids))
    lengths = split.src.lengths(), split.tgt.lengths()
    dtype, _ = precision_for(cfg.precision, device)
    model.eval()
    logprobs = np.zeros(len(split))
    budget = decode_batch_tokens(cfg, model.cfg, model.out.out_features, device)
    for index in token_batches(*lengths, budget, 0, 0, shuffle=False):
        arrays = collate(split, index, model.specials)
        src, tgt_in, tgt_out = (torch.from_numpy(a).to(device) for a in arrays)
        with autocast(device, dtype):
            logits = model(src, tgt_in)  # (B, T, V)
        token_logprobs = logits.float().log_softmax(-1).gather(-1, tgt_out.unsqueeze(-1))
        padding = tgt_out == model.cfg.pad_id
        logprobs[index] = token_logprobs.squeeze(-1).masked_fill(padding, 0).sum(1).tolist()
    return [
        Scored(float(lp), int(n), float(lp / n), float(lp / length_penalty(int(n), cfg.alpha)))
        for lp, n in zip(logprobs, lengths[1] + 1)
    ]
