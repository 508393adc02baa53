"""Translate text: sources encoded and cut to the model's positions, sorted by length, packed
into batches of about `decode.batch_tokens` source tokens (0: as many as suit the device),
decoded greedily or with beam search, and returned in input order."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from ..config import DecodeConfig, ModelConfig
from ..data import tokenizer as tok
from ..data.batches import pad_batch
from ..device import autocast, precision_for
from ..errors import MtError
from ..model import Transformer, max_length
from .search import Hypothesis, beam_search, greedy, max_output_lengths, plan_for


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


CPU_BATCH_TOKENS = 4096  # decode.batch_tokens 0 (auto) on a CPU, where more is no faster


def decode_batch_tokens(
    cfg: DecodeConfig, model: ModelConfig, vocab_size: int, device: torch.device | str
) -> int:
    """`decode.batch_tokens`, or where it is 0 (auto) the device's: 4096 on a CPU; on a GPU
    what a quarter of its free memory holds, at most 65,536 (plenty to fill an H100's step):
    per source token about two target positions of cached keys and values and four float32
    copies of a row's logits, all in float32 (bf16 halves the first). The one reading of the
    key, for translating (either engine) and scoring."""
    device = torch.device(device)
    if cfg.batch_tokens or device.type != "cuda":
        return cfg.batch_tokens or CPU_BATCH_TOKENS
    per_token = 4 * (2 * 2 * model.decoder_layers * model.d_model + 4 * vocab_size)
    return max(CPU_BATCH_TOKENS, min(2**16, torch.cuda.mem_get_info(device)[0] // 4 // per_token))


@torch.inference_mode()
def translate_ids(
    model: Transformer,
    ids: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> list[list[Hypothesis]]:
    """Hypotheses (token ids and scores) for each source (ids from `source_ids`), in order.
    A batch too big for the device's memory is halved (said once) until it fits."""
    device = torch.device(device)
    dtype, _ = precision_for(cfg.precision, device)
    plan = plan_for(device)
    model.eval()
    results: list[list[Hypothesis]] = [[] for _ in ids]
    order = [i for i in np.argsort([-len(x) for x in ids], kind="stable") if ids[i]]
    budget = decode_batch_tokens(cfg, model.cfg, model.out.out_features, device)
    bar = tqdm(
        total=len(order), desc="translate", unit="sent", disable=not progress or None, leave=False
    )
    # a stack of batches; cap: the sentences a batch may hold (lowered when one did not fit)
    pending, cap = _batches(ids, order, budget, cfg.beam)[::-1], len(order)
    while pending:
        batch = pending.pop()
        if len(batch) > cap:
            pending += [batch[i : i + cap] for i in range(0, len(batch), cap)][::-1]
            continue
        pad, _, eos = model.specials
        src = pad_batch([ids[i] for i in batch], suffix=eos, pad=pad)
        src = torch.from_numpy(src).to(device)
        try:
            with autocast(device, dtype):  # log-probabilities are float32 all the same
                found = _search(model, src, cfg, plan)
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise MtError(
                    f"a sentence of {src.size(1)} tokens does not fit in the memory of "
                    f"{device} with beam {cfg.beam}"
                ) from None
            if cap == len(order):
                print(
                    f"warning: a batch of {len(batch)} sentences did not fit in the memory of "
                    f"{device}; decoding in smaller batches (lower decode.batch_tokens)",
                    file=sys.stderr,
                )
            del src
            if device.type == "cuda":
                torch.cuda.empty_cache()
            cap = len(batch) // 2
            pending.append(batch)
            continue
        for i, hyps in zip(batch, found):
            results[i] = hyps
        bar.update(len(batch))
    bar.close()
    return results


def _batches(ids: Sequence[Sequence[int]], order: list, budget: int, beam: int) -> list[list]:
    """The sentences `order` (longest first) cut into batches of about `budget` tokens: a
    batch's size is set by its first sentence, its source and EOS once per beam."""
    batches, start = [], 0
    while start < len(order):
        size = max(1, budget // ((len(ids[order[start]]) + 1) * beam))
        batches.append(order[start : start + size])
        start += size
    return batches


def _search(model: Transformer, src: torch.Tensor, cfg: DecodeConfig, plan) -> list:
    """Greedy search (one hypothesis, no score) or beam search of one batch."""
    if cfg.beam == 1 and cfg.nbest == 1:
        lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, model.cfg.pad_id)
        return [
            [Hypothesis(t, float("nan"), float("nan"))] for t in greedy(model, src, lengths, plan)
        ]
    return beam_search(model, src, cfg, plan)
