"""Greedy and beam search on the incremental decoder (`Transformer.decode_step`).

Both decode a whole batch at once and drop a sentence's rows from the cache as soon as it is
finished. A sentence's output has at most `max_len` tokens before EOS, which is then forced;
`max_output_lengths` gives the usual a * source_length + b. PAD and BOS are never generated.
Put the model in eval mode first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mt.model import BOS, EOS, PAD, Transformer, max_length

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # logprob / length_penalty(len(tokens) + 1): the length counts EOS
    logprob: float  # sum of the log-probabilities of the tokens and EOS


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ((5 + L) / 6) ** alpha (Wu et al., 2016); 1 when alpha is 0."""
    return ((5 + length) / 6) ** alpha


def max_output_lengths(src: Tensor, a: float, b: int) -> Tensor:
    """a * (real source length) + b tokens for each sentence: src (B, S) -> (B,) long.
    greedy and beam_search lower it where the model's max_positions requires."""
    return ((src != PAD).sum(1) * a + b).long()


def _limits(model: Transformer, src: Tensor, max_len: int | Tensor) -> Tensor:
    # -> (B,); the step that must give EOS reads position max_len, which must exist
    limit = torch.as_tensor(max_len, device=src.device).expand(src.size(0))
    return limit.clamp(max=max_length(model.cfg))


def _forbid(scores: Tensor, force_eos: Tensor) -> Tensor:
    # scores (R, V): logits or log-probs, force_eos (R,) bool -> the same tensor, -inf where
    # a token may not come next: PAD and BOS anywhere, all but EOS in rows at their limit
    scores[:, PAD] = scores[:, BOS] = NEG_INF
    if force_eos.any():  # rare: only rows at their length limit, so no (R, V) mask
        eos = scores[force_eos, EOS]
        scores[force_eos] = NEG_INF
        scores[force_eos, EOS] = eos
    return scores


@torch.no_grad()
def greedy(model: Transformer, src: Tensor, max_len: int | Tensor) -> list[list[int]]:
    """The most probable token at each step. src (B, S); max_len an int or a (B,) tensor
    such as max_output_lengths(src, a, b) -> per sentence, its tokens without BOS and EOS."""
    limit = _limits(model, src, max_len)  # (B,)
    steps = int(limit.max()) + 1  # the last one can only give EOS
    state = model.start_decoding(*model.encode(src), steps)
    out = src.new_full((src.size(0), steps), EOS)
    rows = torch.arange(src.size(0), device=src.device)  # (N,) sentence of each live row
    tokens = src.new_full(rows.shape, BOS)
    for t in range(steps):
        logits = model.decode_step(tokens, state)  # (N, V): the argmax needs no softmax
        tokens = _forbid(logits, t >= limit[rows]).argmax(-1)  # (N,)
        out[rows, t] = tokens
        live = (tokens != EOS).nonzero().squeeze(1)
        if len(live) == 0:
            break
        if len(live) < len(rows):
            rows, tokens = rows[live], tokens[live]
            state.select(live, live)
    return [seq[: seq.index(EOS)] for seq in out.tolist()]


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam: int,
    alpha: float = 0.6,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    nbest: int = 1,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once -> per sentence, its `nbest` best
    hypotheses (fewer only if fewer exist), best first by score = logprob / length_penalty(L),
    where the length L counts EOS.

    Each step extends the k = `beam` live hypotheses of a sentence by every token and ranks
    the k * V extensions by log-probability; an EOS among the k best finishes a hypothesis,
    the k best others live on. A sentence is done when no live hypothesis can still beat its
    nbest-th finished one; its rows then leave the cache.
    """
    n_src, device = src.size(0), src.device
    limit = _limits(model, src, max_output_lengths(src, max_len_a, max_len_b))  # (B,)
    steps = int(limit.max()) + 1
    state = model.start_decoding(*model.encode(src), steps, rows_per_source=beam)
    # the nbest best finished hypotheses of each sentence so far
    fin_score = torch.full((n_src, nbest), NEG_INF, device=device)
    fin_logprob = torch.full((n_src, nbest), NEG_INF, device=device)
    fin_tokens = src.new_full((n_src, nbest, steps), PAD)
    # the live hypotheses: k per unfinished sentence, their rows in the cache in that order
    sent = torch.arange(n_src, device=device)  # (N,) sentence of each group of k rows
    alive = torch.full((n_src, beam), NEG_INF, device=device)  # (N, k) their log-probs
    alive[:, 0] = 0.0  # the k beams start as copies of one
    history = src.new_full((n_src * beam, steps), PAD)  # (N * k, steps) their tokens
    tokens = src.new_full((n_src * beam,), BOS)
    for t in range(steps):
        n = len(sent)
        logprobs = model.decode_step(tokens, state).float().log_softmax(-1)  # (N * k, V)
        _forbid(logprobs, (t >= limit[sent]).repeat_interleave(beam))
        if no_repeat_ngram and t >= no_repeat_ngram:
            banned = _repeated_ngrams(history[:, :t], no_repeat_ngram, logprobs.size(1))
            logprobs.masked_fill_(banned, NEG_INF)
        # the 2k best extensions: at most k end in EOS (one per beam), so k others remain
        cand, origin, word = best_extensions(logprobs, alive, 2 * beam)  # (N, 2k) each
        origin += torch.arange(n, device=device).unsqueeze(1) * beam  # beam -> its row
        ends = word == EOS
        finished = ends & (torch.arange(2 * beam, device=device) < beam)  # EOS in the top k
        if finished.any():
            score = torch.where(finished, cand / length_penalty(t + 1, alpha), NEG_INF)
            top, pick = torch.cat([fin_score[sent], score], 1).topk(nbest)  # (N, nbest)
            fin_score[sent] = top
            fin_logprob[sent] = torch.cat([fin_logprob[sent], cand], 1).gather(1, pick)
            pool = torch.cat([fin_tokens[sent], history[origin]], 1)  # (N, nbest + 2k, steps)
            fin_tokens[sent] = pool.gather(1, pick.unsqueeze(2).expand(-1, -1, steps))
        alive, pick = cand.masked_fill(ends, NEG_INF).topk(beam)  # (N, k)
        origin, word = origin.gather(1, pick), word.gather(1, pick)
        # log-probs only fall, and the penalty grows at most to that of the longest output
        reachable = alive[:, 0] / length_penalty(limit[sent] + 1, alpha)  # (N,)
        keep = (fin_score[sent, -1] < reachable).nonzero().squeeze(1)  # (N',)
        if len(keep) == 0:
            break
        rows = origin[keep].flatten()  # reorders beams and drops done sentences at once
        state.select(rows, None if len(keep) == n else keep)
        history = history[rows]
        tokens = word[keep].flatten()
        history[:, t] = tokens
        alive, sent = alive[keep], sent[keep]
    return [
        [
            Hypothesis([w for w in seq if w != PAD], s, lp)
            for seq, s, lp in zip(*hyps)
            if s > NEG_INF
        ]
        for hyps in zip(fin_tokens.tolist(), fin_score.tolist(), fin_logprob.tolist())
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
