"""Greedy and beam search on the incremental decoder (`Transformer.decode_step`).

Both decode a whole batch at once; how the loop meets the device (how often the host looks,
whether done sentences' rows leave the cache, a static cache, CUDA graphs) is a `Plan`. A
sentence's output has at most `max_len` tokens before EOS, which is then forced;
`output_lengths` gives the usual a * source_length + b. PAD and BOS are never generated.
The special ids are the model's (`model.cfg`: pad_id, bos_id, eos_id). A `prefix` (B, P) of
target tokens, FREE (0) where a sentence's is shorter, forces each hypothesis's first tokens;
the search continues from them. Beam search's `no_repeat_ngram` counts the prefix's n-grams,
as fairseq's history holds its prefix, but never bans a forced token (fairseq bans after
forcing, so a prefix that repeats an n-gram leaves its rows nothing to take). Put the model in
eval mode first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch
from torch import Tensor

from mt.config import DecodeConfig, ModelConfig
from mt.decoding.graphs import Step, graphs_for
from mt.model import DecoderState, Transformer, max_sentence_tokens

T = TypeVar("T")

NEG_INF = float("-inf")
FREE = 0  # a prefix's filler, no token forced: id 0 is PAD (ours) or EOS (Marian), in no prefix


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # logprob / length_penalty(len(tokens) + 1): the length counts EOS
    logprob: float  # sum of the log-probabilities of the tokens and EOS


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ((5 + L) / 6) ** alpha (Wu et al., 2016); 1 when alpha is 0."""
    return ((5 + length) / 6) ** alpha


def output_lengths(source_lengths: Tensor, a: float, b: int) -> Tensor:
    """The decode.max_len_a/b rule, the one every engine applies: a * source length (its EOS
    counted) + b tokens for each sentence, (B,) -> (B,) long; lowered to what the model's
    positions hold by `within_positions`."""
    return (source_lengths * a + b).long()


def max_output_lengths(src: Tensor, a: float, b: int, pad: int = 0) -> Tensor:
    """`output_lengths` of a batch src (B, S) padded with `pad` (the model's pad id) -> (B,)
    long."""
    return output_lengths((src != pad).sum(1), a, b)


def within_positions(max_len: int | Tensor, model: ModelConfig) -> Tensor:
    """Output lengths lowered where the model's positions require: the step that must give
    EOS reads position max_len, which must exist."""
    return torch.as_tensor(max_len).clamp(max=max_sentence_tokens(model))


def _limits(model: Transformer, src: Tensor, max_len: int | Tensor) -> Tensor:
    # -> (B,)
    limit = torch.as_tensor(max_len, device=src.device).expand(src.size(0))
    return within_positions(limit, model.cfg)


def _forbid(scores: Tensor, force_eos: Tensor | None, cfg: ModelConfig) -> Tensor:
    # scores (R, V): logits or log-probs, force_eos (R,) bool or None (no row at its limit)
    # -> the same tensor, -inf where a token may not come next: PAD and BOS anywhere, all but
    # EOS in rows at their limit. Masked, not by `force_eos.any()`: no wait for the device
    scores[:, cfg.pad_id] = scores[:, cfg.bos_id] = NEG_INF
    if force_eos is not None:
        eos = scores[:, cfg.eos_id].clone()
        scores.masked_fill_(force_eos.unsqueeze(1), NEG_INF)
        scores[:, cfg.eos_id] = eos
    return scores


def _force(scores: Tensor, forced: Tensor) -> Tensor:
    # scores (R, V), forced (R,): the token a row must take now, FREE where it is free
    # -> the same tensor, -inf but at the forced token in rows that have one
    other = torch.arange(scores.size(1), device=scores.device) != forced.unsqueeze(1)
    return scores.masked_fill_(other & (forced != FREE).unsqueeze(1), NEG_INF)


def _forced_at(prefix: Tensor | None, t: int, sentences: Tensor) -> Tensor | None:
    # the tokens `prefix` forces on `sentences` (R,) at step t; None once it has none
    return prefix[sentences, t] if prefix is not None and t < prefix.size(1) else None


@dataclass(frozen=True)
class Plan:
    """How a search loop meets its device. The host looks at the search only every
    `check_every` steps: to stop once every sentence is done and, unless `static`, to drop
    the done sentences' rows. Between looks nothing waits for the device (the finished
    hypotheses are kept there) and done sentences' rows are computed and ignored.
    `static`: a static cache (`start_decoding`), all rows kept, so that the steps of a cache
    read length have one shape; `buckets`: that cache in buffers of the model's `Graphs`,
    shaped by bucket and reused by later batches; `graph`: each step of those recorded once
    as a CUDA graph and replayed, the first batch checked against eager steps
    (mt.decoding.graphs)."""

    check_every: int = 1
    static: bool = False
    buckets: bool = False
    graph: bool = False

    def __post_init__(self):
        if (self.graph and not self.buckets) or (self.buckets and not self.static):
            raise ValueError(f"graph needs buckets, and buckets a static cache: {self}")


def plan_for(device: torch.device) -> Plan:
    """On a CPU the host looks at every step for free, and fewer rows are less work: look
    and drop rows each step. On a GPU a round trip stalls the device and a step is a few
    hundred small kernels: look every 8 steps, one shape, CUDA graphs kept by bucket."""
    if device.type == "cpu":
        return Plan()
    cuda = device.type == "cuda"
    return Plan(check_every=8, static=True, buckets=cuda, graph=cuda)


def _start(
    model: Transformer, memory: Tensor, src_keep: Tensor, steps: int, beam: int, plan: Plan
) -> tuple[DecoderState, Step]:
    # the decoder state for `steps` positions and `beam` rows per source, and its step
    if plan.buckets:
        return graphs_for(model).start(model, memory, src_keep, steps, beam, plan.graph)
    state = model.start_decoding(memory, src_keep, steps, beam, static=plan.static)
    return state, lambda tokens: model.decode_step(tokens, state)


def _guarded(
    model: Transformer, plan: Plan, search: Callable[[Plan], T], tokens: Callable[[T], Any]
) -> T:
    # through graphs, under their net (Graphs.guard), when the plan says so
    if not plan.graph:
        return search(plan)
    return graphs_for(model).guard(lambda graph: search(replace(plan, graph=graph)), tokens)


@torch.inference_mode()
def greedy(
    model: Transformer,
    src: Tensor,
    max_len: int | Tensor,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
) -> list[list[int]]:
    """The most probable token at each step. src (B, S); max_len an int or a (B,) tensor
    such as max_output_lengths(src, a, b) -> per sentence, its tokens without BOS and EOS."""
    return _guarded(model, plan, lambda p: _greedy(model, src, max_len, p, prefix)[0], lambda x: x)


def _greedy(
    model: Transformer,
    src: Tensor,
    max_len: int | Tensor,
    plan: Plan,
    prefix: Tensor | None = None,
    choose: Callable[[Tensor], Tensor] | None = None,
) -> tuple[list[list[int]], Tensor]:
    """One token a step for each sentence: the most probable, or `choose`'s pick from the
    log-probabilities (R, V) -> (R,) (sampling) -> (outputs, their log-probabilities (B,),
    computed only with `choose`)."""
    limit = _limits(model, src, max_len)  # (B,)
    steps = int(limit.max()) + 1  # the last one can only give EOS
    first_limit = int(limit.min())  # no row has to give EOS before this step
    state, decode_step = _start(model, *model.encode(src), steps, 1, plan)
    eos = model.cfg.eos_id
    out = src.new_full((src.size(0), steps), eos)
    rows = torch.arange(src.size(0), device=src.device)  # (N,) sentence of each row
    tokens = src.new_full(rows.shape, model.cfg.bos_id)
    done = torch.zeros_like(rows, dtype=torch.bool)  # (N,) the row has given EOS
    logprob = torch.zeros(src.size(0), device=src.device)
    for t in range(steps):
        scores = decode_step(tokens)  # (N, V): the argmax needs no softmax
        if choose is not None:  # log-probs before masking: those `mt score` gives
            scores = scores.float().log_softmax(-1)
        force_eos = t >= limit[rows] if t >= first_limit else None
        _forbid(scores, force_eos, model.cfg)
        if (forced := _forced_at(prefix, t, rows)) is not None:
            _force(scores, forced)
        if choose is None:
            tokens = scores.argmax(-1)  # (N,)
        else:
            tokens = choose(scores)
            logprob[rows] += scores.gather(1, tokens.unsqueeze(1)).squeeze(1).masked_fill(done, 0)
        out[rows, t] = tokens  # what follows a row's first EOS is cut off below
        done |= tokens == eos
        if (t + 1) % plan.check_every == 0:  # the host looks
            live = (~done).nonzero().squeeze(1)
            if len(live) == 0:
                break
            if not plan.static and len(live) < len(rows):
                rows, tokens, done = rows[live], tokens[live], done[live]
                state.select(live, live)
    return [seq[: seq.index(eos)] for seq in out.tolist()], logprob


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    cfg: DecodeConfig,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once, as `cfg` says (beam, alpha,
    max_len_a/b, nbest, no_repeat_ngram) -> per sentence, its `nbest` best hypotheses (fewer
    only if fewer exist), best first by score = logprob / length_penalty(L), where the
    length L counts EOS.

    Each step extends the k = `beam` live hypotheses of a sentence by every token and ranks
    the k * V extensions by log-probability; an EOS among the k best finishes a hypothesis,
    the k best others live on. A sentence is done when no live hypothesis can still beat its
    nbest-th finished one; its rows then leave the cache (as `plan` says).
    """
    return _guarded(
        model,
        plan,
        lambda p: _beam_search(model, src, cfg, p, prefix),
        lambda found: [[h.tokens for h in hyps] for hyps in found],
    )


def _beam_search(
    model: Transformer, src: Tensor, cfg: DecodeConfig, plan: Plan, prefix: Tensor | None
) -> list[list[Hypothesis]]:
    beam, nbest, alpha = cfg.beam, cfg.nbest, cfg.alpha
    hf = cfg.rules == "transformers"  # generate()'s rules (DecodeConfig.rules)
    kept = max(nbest, beam) if hf else nbest  # finished hypotheses kept

    def penalty(length):
        return length**alpha if hf else length_penalty(length, alpha)

    n_src, device = src.size(0), src.device
    pad, eos = model.cfg.pad_id, model.cfg.eos_id
    lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, pad)
    limit = _limits(model, src, lengths)  # (B,)
    steps, first_limit = int(limit.max()) + 1, int(limit.min())
    state, decode_step = _start(model, *model.encode(src), steps, beam, plan)
    # the nbest best finished hypotheses of each sentence so far
    fin_score = torch.full((n_src, kept), NEG_INF, device=device)
    fin_logprob = torch.full((n_src, kept), NEG_INF, device=device)
    fin_tokens = src.new_full((n_src, kept, steps), pad)
    # the live hypotheses: k per sentence, their rows in the cache in that order
    sent = torch.arange(n_src, device=device)  # (N,) sentence of each group of k rows
    alive = torch.full((n_src, beam), NEG_INF, device=device)  # (N, k) their log-probs
    alive[:, 0] = 0.0  # the k beams start as copies of one
    done = torch.zeros(n_src, dtype=torch.bool, device=device)  # (N,) nothing can beat fin
    history = src.new_full((n_src * beam, steps), pad)  # (N * k, steps) their tokens
    tokens = src.new_full((n_src * beam,), model.cfg.bos_id)
    for t in range(steps):
        n = len(sent)
        logprobs = decode_step(tokens).float().log_softmax(-1)  # (N * k, V)
        force_eos = (t >= limit[sent]).repeat_interleave(beam) if t >= first_limit else None
        _forbid(logprobs, force_eos, model.cfg)
        if hf and force_eos is not None:  # transformers' ForcedEOSTokenLogitsProcessor
            logprobs[:, eos].masked_fill_(force_eos, 0.0)
        forced = _forced_at(prefix, t, sent)
        if cfg.no_repeat_ngram and t >= cfg.no_repeat_ngram:
            banned = _repeated_ngrams(history[:, :t], cfg.no_repeat_ngram, logprobs.size(1))
            if forced is not None:  # a forced row keeps its token
                banned &= (forced == FREE).repeat_interleave(beam).unsqueeze(1)
            logprobs.masked_fill_(banned, NEG_INF)
        if forced is not None:
            _force(logprobs, forced.repeat_interleave(beam))
        # the 2k best extensions: at most k end in EOS (one per beam), so k others remain
        cand, origin, word = best_extensions(logprobs, alive, 2 * beam)  # (N, 2k) each
        origin += torch.arange(n, device=device).unsqueeze(1) * beam  # beam -> its row
        ends = word == eos
        # an EOS in the top k finishes a hypothesis (of a sentence not done yet)
        finished = ends[:, :beam] & ~done.unsqueeze(1)  # (N, k)
        score = torch.where(finished, cand[:, :beam] / penalty(t + 1), NEG_INF)
        top, pick = torch.cat([fin_score[sent], score], 1).topk(kept)  # (N, kept)
        fin_score[sent] = top
        fin_logprob[sent] = torch.cat([fin_logprob[sent], cand[:, :beam]], 1).gather(1, pick)
        pool = torch.cat([fin_tokens[sent], history[origin[:, :beam]]], 1)  # (N, nbest + k, steps)
        fin_tokens[sent] = pool.gather(1, pick.unsqueeze(2).expand(-1, -1, steps))
        alive, pick = cand.masked_fill(ends, NEG_INF).topk(beam)  # (N, k)
        origin, word = origin.gather(1, pick), word.gather(1, pick)
        # log-probs only fall, and the penalty grows at most to that of the longest output;
        # transformers guesses the current length instead
        reachable = alive[:, 0] / penalty(t + 1 if hf else limit[sent] + 1)  # (N,)
        done |= fin_score[sent, -1] >= reachable
        keep = None
        if (t + 1) % plan.check_every == 0:  # the host looks
            live = (~done).nonzero().squeeze(1)  # (N',)
            if len(live) == 0:
                break
            if not plan.static and len(live) < n:
                keep = live
                origin, word, alive, sent, done = (
                    x[keep] for x in (origin, word, alive, sent, done)
                )
        rows = origin.flatten()  # reorders beams and drops done sentences at once
        state.select(rows, keep)
        history = history[rows]
        tokens = word.flatten()
        history[:, t] = tokens
    return [hyps[:nbest] for hyps in _finished(fin_tokens, fin_score, fin_logprob, pad)]


def _finished(tokens: Tensor, score: Tensor, logprob: Tensor, pad: int) -> list[list[Hypothesis]]:
    """Each sentence's finished hypotheses, best first: tokens (N, nbest, steps) padded with
    `pad`, score and logprob (N, nbest), -inf where fewer than nbest finished."""
    return [
        [
            Hypothesis([w for w in seq if w != pad], s, lp)
            for seq, s, lp in zip(*hyps)
            if s > NEG_INF
        ]
        for hyps in zip(tokens.tolist(), score.tolist(), logprob.tolist())
    ]


def best_extensions(logprobs: Tensor, alive: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """The m best extensions of each sentence's k live hypotheses: logprobs (N * k, V) of the
    next word, alive (N, k) the hypotheses' log-probs -> (N, m) scores alive + logprob, best
    first, with the beam (0..k-1) and the word of each.

    What (alive.view(-1, 1) + logprobs).view(N, -1).topk(m) gives, without adding and ranking
    all k * V extensions, the slowest part of a beam step: the words are cut into chunks, and
    each of the m best lies in a chunk whose best is no worse, so in one of the m chunks with
    the best maxima. Only those m chunks are ranked.
    """
    n, k = alive.shape
    vocab = logprobs.size(1)
    # 64 words when V allows, and at least m chunks to choose from
    size = max(c for c in range(1, 65) if vocab % c == 0 and k * vocab // c >= m)
    width = vocab // size  # chunks per row
    chunks = logprobs.view(n, k * width, size)
    maxima = chunks.amax(-1).view(n, k, width).add_(alive.unsqueeze(2))  # (N, k, width)
    _, chunk = maxima.view(n, -1).topk(m)  # (N, m): chunk ids in 0..k * width - 1
    picked = chunks.gather(1, chunk.unsqueeze(2).expand(-1, -1, size))  # (N, m, size)
    picked += alive.gather(1, chunk // width).unsqueeze(2)
    scores, i = picked.view(n, -1).topk(m)  # (N, m): i in 0..m * size - 1
    chunk = chunk.gather(1, i // size)
    return scores, chunk // width, chunk % width * size + i % size


def _repeated_ngrams(history: Tensor, n: int, vocab: int) -> Tensor:
    """history (R, t) tokens so far, t >= n -> (R, V) True at the tokens that would repeat an
    n-gram: those that followed an earlier occurrence of the last n - 1 tokens."""
    grams = history.unfold(1, n, 1)  # (R, t - n + 1, n) every n-gram so far
    recent = history[:, history.size(1) - n + 1 :].unsqueeze(1)  # (R, 1, n - 1)
    seen = (grams[:, :, :-1] == recent).all(-1)  # (R, t - n + 1)
    counts = torch.zeros(len(history), vocab, device=history.device)
    return counts.scatter_add_(1, grams[:, :, -1], seen.float()) > 0
