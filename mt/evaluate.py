"""Translate text in length-sorted batches and score it with sacreBLEU (BLEU and chrF)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch
from sacrebleu.metrics import BLEU, CHRF
from tokenizers import Tokenizer
from tqdm import tqdm

from . import tokenizer as tok
from .config import DecodeConfig
from .data import pad_batch
from .decode import Hypothesis, beam_search, greedy, max_output_lengths
from .model import EOS, Transformer


def translate(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    texts: Sequence[str],
    cfg: DecodeConfig,
    beam: int | None = None,
    nbest: int = 1,
    batch_tokens: int | None = None,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[list[str]] | list[str]:
    """Translations of `texts`, in input order: one string each, or `nbest` lists.

    Inputs are sorted by length and packed into batches of about `batch_tokens` source
    tokens, so padding is small; an empty input gives an empty output; an input longer than
    the model's positions is truncated with a warning.
    """
    ids = source_ids(model, src_tokenizer, texts)
    hypotheses = translate_ids(model, ids, cfg, beam, nbest, batch_tokens, device, progress)
    flat = tok.decode(tgt_tokenizer, [h.tokens for hyps in hypotheses for h in hyps])
    out, start = [], 0
    for hyps in hypotheses:
        out.append(flat[start : start + len(hyps)] or [""])
        start += len(hyps)
    return [lines[0] for lines in out] if nbest == 1 else out


def source_ids(model: Transformer, tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, cut (with a warning) to what the model's positions hold."""
    ids = tok.encode(tokenizer, texts)
    limit = model.cfg.max_positions - 1  # room for EOS
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
    beam: int | None = None,
    nbest: int = 1,
    batch_tokens: int | None = None,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Hypotheses (token ids and scores) for each source (ids from `source_ids`), in order."""
    beam = beam or cfg.beam
    batch_tokens = batch_tokens or cfg.batch_tokens
    model.eval()
    results: list[list[Hypothesis]] = [[] for _ in ids]
    order = [i for i in np.argsort([-len(x) for x in ids], kind="stable") if ids[i]]
    batches, start = [], 0
    while start < len(order):  # longest first: the batch size is set by its first sentence
        size = max(1, batch_tokens // ((len(ids[order[start]]) + 1) * beam))
        batches.append(order[start : start + size])
        start += size
    for batch in tqdm(batches, desc="translate", unit="batch", disable=not progress, leave=False):
        src = torch.from_numpy(pad_batch([ids[i] for i in batch], suffix=EOS)).to(device)
        if beam == 1 and nbest == 1:
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
                nbest,
                cfg.no_repeat_ngram,
            )
        for i, hyps in zip(batch, found):
            results[i] = hyps
    return results


def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """Corpus BLEU (13a tokenisation) and chrF on detokenised text, with signatures."""
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": b.score,
        "chrf": c.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }
