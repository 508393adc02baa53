"""The torch engine: sources of token ids (each fits the model: the Translator cut them,
mt.decoding.engine) sorted by length, packed into batches of about `decode.batch_tokens`
source tokens (0: as many as suit the device), decoded greedily, with beam search or by
sampling (mt.decoding.sampling), each optionally from a forced target prefix, a batch with
terminology constraints by constrained beam search (mt.decoding.constraints), and returned in
input order. What both engines share of a call: the output lengths and prefixes a piece
may have (`output_limits`, `piece_prefixes`), a batch's size (`translation_batch_tokens`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from ..config import DecodeConfig, ModelConfig
from ..data import tokenizer as tok
from ..data.batches import pad_batch
from ..device import autocast, precision_for
from ..errors import ConfigError, MachineError
from ..messages import say
from ..model import Transformer
from .beam import beam_search
from .constraints import Constraints, constrained_beam_search
from .ensemble import Ensemble
from .pieces import Pieces
from .sampling import sample
from .search import (
    FREE,
    Greedy,
    Hypothesis,
    max_output_lengths,
    output_lengths,
    plan_for,
    search,
    within_positions,
)

CPU_BATCH_TOKENS = 4096  # decode.batch_tokens 0 (auto) on a CPU, where more is no faster


def translation_batch_tokens(
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
    prefixes: Sequence[Sequence[int]] | None = None,
    constraints: Sequence[Constraints | None] | None = None,
) -> list[list[Hypothesis]]:
    """Hypotheses (token ids and scores) for each source (ids that fit the model), in order,
    each starting with its `prefixes` tokens (that fit: `piece_prefixes`) and containing its
    `constraints` if given. A
    batch too big for the device's memory is halved (said once) until it fits. Sampling draws
    from a generator seeded with `cfg.seed` (None: 0) for the whole call."""
    device = torch.device(device)
    dtype, _ = precision_for(cfg.precision, device)
    plan = plan_for(device)
    if cfg.sampling or isinstance(model, Ensemble):  # no CUDA graphs: see `Plan`
        plan = dataclasses.replace(plan, buckets=False, graph=False)
    search = _searcher(cfg, device)
    model.eval()
    results: list[list[Hypothesis]] = [[] for _ in ids]
    order = [i for i in np.argsort([-len(x) for x in ids], kind="stable") if ids[i]]
    budget = translation_batch_tokens(cfg, model.cfg, model.out.out_features, device)
    bar = tqdm(
        total=len(order), desc="translate", unit="sent", disable=not progress or None, leave=False
    )
    # a stack of batches; cap: the sentences a batch may hold (lowered when one did not fit)
    pending, cap = _batches(ids, order, budget, cfg.beam, device.type == "cpu")[::-1], len(order)
    while pending:
        batch = pending.pop()
        if len(batch) > cap:
            pending += [batch[i : i + cap] for i in range(0, len(batch), cap)][::-1]
            continue
        pad, _, eos = model.specials
        src = torch.from_numpy(pad_batch([ids[i] for i in batch], suffix=eos, pad=pad)).to(device)
        prefix = _prefix_batch(prefixes, batch, device)
        batch_constraints = [constraints[i] for i in batch] if constraints else []
        try:
            with autocast(device, dtype):  # log-probabilities are float32 all the same
                if any(batch_constraints):
                    found = constrained_beam_search(model, src, cfg, batch_constraints, prefix)
                else:
                    found = search(model, src, plan, prefix)
        except torch.OutOfMemoryError:
            if len(batch) == 1:
                raise MachineError(
                    f"a sentence of {src.size(1)} tokens does not fit in the memory of "
                    f"{device} with beam {cfg.beam}"
                ) from None
            if cap == len(order):
                say(
                    f"warning: a batch of {len(batch)} sentences did not fit in the memory of "
                    f"{device}; decoding in smaller batches (lower decode.batch_tokens)"
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


def _batches(
    ids: Sequence[Sequence[int]], order: list, budget: int, beam: int, one_length: bool
) -> list[list]:
    """The sentences `order` (longest first) cut into batches of about `budget` tokens: a
    batch's size is set by its first sentence, its source and EOS once per beam.
    `one_length` (a CPU): a batch holds sources of one length, unpadded, so that a sentence's
    attention sums what it sums alone (with mt.row_linear, its translation is that of the
    sentence alone, to the bit)."""
    batches, start = [], 0
    while start < len(order):
        length = len(ids[order[start]])
        end = min(len(order), start + max(1, budget // ((length + 1) * beam)))
        if one_length:
            end = next((i for i in range(start, end) if len(ids[order[i]]) != length), end)
        batches.append(order[start:end])
        start = end
    return batches


def _searcher(cfg: DecodeConfig, device: torch.device):
    """The search of a batch as `cfg` says: (model, src, plan, prefix) -> hypotheses per
    sentence. Sampling (its generator seeded once), greedy search (one hypothesis, no score)
    or beam search."""
    if cfg.sampling:
        generator = torch.Generator(device).manual_seed(cfg.seed or 0)
        return lambda model, src, plan, prefix: sample(model, src, cfg, generator, plan, prefix)
    if cfg.greedy:

        def search_greedy(model, src, plan, prefix) -> list:
            lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, model.cfg.pad_id)
            return search(model, src, Greedy(), lengths, plan, prefix, cfg)

        return search_greedy
    return lambda model, src, plan, prefix: beam_search(model, src, cfg, plan, prefix)


def piece_prefixes(
    tokenizer: Tokenizer, pieces: Pieces, prefixes: Sequence[str] | None, limits: Sequence[int]
) -> list[list[int]] | None:
    """Each piece's forced target tokens: a text's `prefixes` text (one per text) on its
    first piece. Refused, naming the text: a prefix longer than its piece's output may be
    (`limits`: decode.max_len_a/b, the model's positions), for the search could not end
    after it."""
    if prefixes is None:
        return None
    if len(prefixes) != len(pieces.counts):
        raise ConfigError(
            f"{len(prefixes)} prefixes for {len(pieces.counts)} texts: give one per text"
        )
    forced = pieces.first(tok.encode(tokenizer, prefixes), [])
    for prefix, limit, number in zip(forced, limits, pieces.numbers):
        if len(prefix) > limit:
            raise ConfigError(
                f"text {number}: its prefix has {len(prefix)} tokens, more than the {limit} "
                "its translation may have (decode.max_len_a, decode.max_len_b)"
            )
    return forced


def output_limits(model: ModelConfig, ids: Sequence[Sequence[int]], cfg: DecodeConfig) -> list[int]:
    """The most tokens each source's output may have (decode.max_len_a/b, the source's EOS
    counted, within the model's positions), for either engine."""
    lengths = torch.tensor([len(src) + 1 for src in ids], dtype=torch.long)
    limits = output_lengths(lengths, cfg.max_len_a, cfg.max_len_b)
    return within_positions(limits, model).tolist()


def _prefix_batch(
    prefixes: Sequence[Sequence[int]] | None, batch: list, device: torch.device
) -> torch.Tensor | None:
    """The batch's prefixes as a (B, P) tensor filled with FREE; None if none has one."""
    if prefixes is None or not any(prefixes[i] for i in batch):
        return None
    width = max(len(prefixes[i]) for i in batch)
    rows = [[*prefixes[i], *[FREE] * (width - len(prefixes[i]))] for i in batch]
    return torch.tensor(rows, device=device)
