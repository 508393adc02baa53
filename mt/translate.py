"""Translate text: sources encoded and cut to the model's positions, sorted by length, packed
into batches of about `decode.batch_tokens` source tokens, decoded greedily or with beam
search, and returned in input order."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from . import tokenizer as tok
from .config import DecodeConfig
from .data import pad_batch
from .decode import Hypothesis, beam_search, greedy, max_output_lengths
from .device import autocast, precision_for
from .model import EOS, Transformer, max_length


def translate(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    texts: Sequence[str],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[str]:
    """The best translation of each text, in input order; an empty text gives ""."""
    found = translate_nbest(model, src_tokenizer, tgt_tokenizer, texts, cfg, device, progress)
    return [hyps[0][0] for hyps in found]


def translate_nbest(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    texts: Sequence[str],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[list[tuple[str, float]]]:
    """Up to `cfg.nbest` (text, score) pairs per text, best first; the score is the
    length-normalised log-probability (NaN for greedy search, which does not compute it)."""
    ids = source_ids(model, src_tokenizer, texts)
    hypotheses = translate_ids(model, ids, cfg, device, progress)
    flat = tok.decode(tgt_tokenizer, [h.tokens for hyps in hypotheses for h in hyps])
    out, start = [], 0
    for hyps in hypotheses:
        texts_ = flat[start : start + len(hyps)]
        out.append(list(zip(texts_, (h.score for h in hyps))) or [("", float("nan"))])
        start += len(hyps)
    return out


def source_ids(model: Transformer, tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, cut (with a warning) to what the model's positions hold."""
    ids = tok.encode(tokenizer, texts)
    limit = max_length(model.cfg)
    too_long = sum(len(x) > limit for x in ids)
    if too_long:
        print(
            f"warning: {too_long} input(s) longer than {limit} tokens were truncated",
            file=sys.stderr,
        )
    return [x[:limit] for x in ids]


@torch.inference_mode()
def translate_ids(
    model: Transformer,
    ids: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Hypotheses (token ids and scores) for each source (ids from `source_ids`), in order."""
    beam = cfg.beam
    device = torch.device(device)
    dtype, _ = precision_for(cfg.precision, device)
    model.eval()
    results: list[list[Hypothesis]] = [[] for _ in ids]
    order = [i for i in np.argsort([-len(x) for x in ids], kind="stable") if ids[i]]
    batches, start = [], 0
    while start < len(order):  # longest first: the batch size is set by its first sentence
        size = max(1, cfg.batch_tokens // ((len(ids[order[start]]) + 1) * beam))
        batches.append(order[start : start + size])
        start += size
    bar = tqdm(batches, desc="translate", unit="batch", disable=not progress or None, leave=False)
    for batch in bar:
        src = torch.from_numpy(pad_batch([ids[i] for i in batch], suffix=EOS)).to(device)
        with autocast(device, dtype):  # log-probabilities are float32 all the same
            if beam == 1 and cfg.nbest == 1:
                lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b)
                found = [
                    [Hypothesis(t, float("nan"), float("nan"))] for t in greedy(model, src, lengths)
                ]
            else:
                found = beam_search(
                    model,
                    src,
                    beam,
                    cfg.alpha,
                    cfg.max_len_a,
                    cfg.max_len_b,
                    cfg.nbest,
                    cfg.no_repeat_ngram,
                )
        for i, hyps in zip(batch, found):
            results[i] = hyps
    return results
