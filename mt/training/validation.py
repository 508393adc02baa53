"""Validation during training: the loss over the whole valid split, the same with the sources
shuffled among the sentences (how much the model uses its source), and the greedy BLEU of a
fixed subset of it, as one metrics record, with a few examples for the person watching."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import Config
from ..data import tokenizer as tok
from ..data.prepare import Prepared
from ..data.store import Sentences, Split
from ..decoding.pieces import fitted_pairs
from ..decoding.scoring import teacher_forced
from ..decoding.trained import METADATA, Trained, carried_pieces, measure_carried
from ..model import Transformer, max_sentence_tokens
from .loss import smoothed_loss


def validation_record(
    model: Transformer, data: Prepared, config: Config, device: torch.device, trained: Trained
) -> tuple[dict[str, Any], list[str]]:
    """The record of a validation (loss, nll, ppl, bleu, sentences, the length the model
    carries, `carried`, and the spans it did not carry over, `placed`) and up to
    `train.eval_examples` examples (source, reference, hypothesis) to show. The BLEU is of a
    fixed subset translated greedily as mt translate does (mt.decoding.engine), in pieces of
    `trained.carried` tokens; the length carried is measured on the same subset
    (mt.decoding.trained)."""
    from ..decoding.evaluate import bleu_chrf

    t, valid = config.train, data.splits["valid"]
    model.eval()
    loss, nll, _ = validation_loss(model, valid, t.max_tokens, t.label_smoothing, device)
    shuffled = shuffled_sources(valid, config.run.seed)
    nll_shuffled = validation_loss(model, shuffled, t.max_tokens, t.label_smoothing, device)[1]
    subset = validation_subset(len(valid), t.eval_sentences, config.run.seed)
    sources = [valid.src_text[i] for i in subset]
    references = [valid.tgt_text[i] for i in subset]
    greedy = dataclasses.replace(config.decode, beam=1, nbest=1, sampling=False)  # quick
    translator = in_memory(model, data, config, device, trained)
    targets = [valid.targets[i] for i in subset] if valid.targets else [""] * len(subset)
    longest = min(config.data.max_length, max_sentence_tokens(model.cfg))
    hypotheses, carried, placed = [""] * len(subset), longest, 0
    for target in dict.fromkeys(targets):  # a model of both directions: each apart
        decode = dataclasses.replace(greedy, target_language=target or greedy.target_language)
        picked = [k for k, to in enumerate(targets) if to == target]
        translations = translator.translate_nbest(
            [sources[k] for k in picked], carried_pieces(decode, trained.carried)
        )
        found = [hyps[0][0] for hyps in translations.nbest]
        placed += sum(translations.placed)
        for k, hypothesis in zip(picked, found):
            hypotheses[k] = hypothesis
        carried = min(
            carried,
            measure_carried(
                lambda texts, limit, decode=decode: translator.translate(
                    texts, dataclasses.replace(decode, piece_tokens=limit, coverage=0.0)
                ),
                [sources[k] for k in picked],
                [references[k] for k in picked],
                found,
                [len(x) for x in tok.encode(data.src_tokenizer, [sources[k] for k in picked])],
                longest,
                lambda hyps, refs: bleu_chrf(hyps, refs)["bleu"],
            ),
        )
    record = {
        "loss": loss,
        "nll": nll,
        "nll_shuffled": nll_shuffled,  # each target given another sentence's source
        "ppl": math.exp(min(nll, 50)),
        "bleu": bleu_chrf(hypotheses, references)["bleu"],
        "sentences": len(subset),
        "carried": carried,
        "placed": placed,  # spans the model did not carry over, put back by their neighbours
    }
    examples = [
        f"  src: {sources[i]}\n  ref: {references[i]}\n  hyp: {hypotheses[i]}"
        for i in range(min(t.eval_examples, len(sources)))
    ]
    return record, examples


def in_memory(
    model: Transformer, data: Prepared, config: Config, device: torch.device, trained: Trained
):
    """The model being trained as a Translator (mt.decoding.engine), carrying `trained`."""
    from ..checkpoint import Loaded
    from ..decoding.engine import TorchTranslator

    tokenizers = data.src_tokenizer, data.tgt_tokenizer
    loaded = Loaded(model, config, *tokenizers, Path(config.run.dir), {METADATA: trained.saved()})
    return TorchTranslator(loaded, config, device)


@torch.no_grad()
def validation_loss(
    model: Transformer, split: Split, max_tokens: int, epsilon: float, device: torch.device
) -> tuple[float, float, int]:
    """Label-smoothed loss and NLL per target token over a whole split; a pair longer than
    the model's positions counts what fits of it, as `mt score` does (mt.decoding.pieces)."""
    src_ids, tgt_ids, cut_ones = fitted_pairs(split.src, split.tgt, max_sentence_tokens(model.cfg))
    if cut_ones:
        split = Split(src_ids, tgt_ids)
    src_lengths, tgt_lengths = split.src.lengths(), split.tgt.lengths()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, NLL, tokens: read once

    def sums_of(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        loss, nll = smoothed_loss(logits, tgt_out, epsilon, model.cfg.pad_id)
        return torch.stack(
            (loss.double(), nll.double(), (tgt_out != model.cfg.pad_id).sum().double())
        )

    lengths = src_lengths, tgt_lengths
    for _, batch_sums in teacher_forced(model, split, lengths, max_tokens, device, sums_of):
        sums += batch_sums
    loss_sum, nll_sum, tokens = sums.tolist()
    return loss_sum / max(tokens, 1), nll_sum / max(tokens, 1), int(tokens)


def shuffled_sources(split: Split, seed: int) -> Split:
    """`split` with each target given another sentence's source (a fixed derangement): a
    model that uses its source predicts the targets worse from them, one that ignores it as
    well (mt/training/health.py's collapse check)."""
    order = np.random.default_rng(seed).permutation(len(split))
    given = np.empty_like(order)
    given[order] = np.roll(order, 1)  # sentence order[i] gets the source of order[i - 1]
    ids, lengths = split.src.take(given)
    return Split(Sentences(ids, np.concatenate(([0], np.cumsum(lengths)))), split.tgt)


def validation_subset(size: int, wanted: int, seed: int) -> list[int]:
    """A fixed random subset of the validation split (sorted), or all of it."""
    if not wanted or wanted >= size:
        return list(range(size))
    return sorted(np.random.default_rng(seed).choice(size, wanted, replace=False).tolist())
