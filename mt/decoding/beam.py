"""Beam search, a `Strategy` of the one search loop (mt.decoding.search).

Each step extends the k = `decode.beam` live hypotheses of a sentence by every token and
ranks the k * V extensions by log-probability; an EOS among the k best finishes a hypothesis,
the k best others live on. A sentence is done when no live hypothesis can still beat its
nbest-th finished one. Every sentence and beam is one batch, the finished hypotheses kept on
the device. Under decode.rules transformers: generate()'s rules (DecodeConfig.rules).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import DecodeConfig, ModelConfig
from ..model import Transformer
from .search import NEG_INF, Hypothesis, Plan, max_output_lengths, penalty, search


class Beam:
    """Beam search as `cfg` says (beam, alpha, nbest, rules)."""

    log_probs = True

    def __init__(self, cfg: DecodeConfig) -> None:
        self.cfg, self.rows = cfg, cfg.beam
        self.hf = cfg.rules == "transformers"  # generate()'s rules
        self.kept = max(cfg.nbest, cfg.beam) if self.hf else cfg.nbest  # finished ones kept

    def start(self, src: Tensor, limit: Tensor, steps: int, model: ModelConfig) -> None:
        n, k, device = src.size(0), self.rows, src.device
        self.limit, self.steps, self.pad, self.eos = limit, steps, model.pad_id, model.eos_id
        # the best finished hypotheses of each sentence so far
        self.fin_score = torch.full((n, self.kept), NEG_INF, device=device)
        self.fin_logprob = torch.full((n, self.kept), NEG_INF, device=device)
        self.fin_tokens = src.new_full((n, self.kept, steps), self.pad)
        self.alive = torch.full((n, k), NEG_INF, device=device)  # (N, k) live log-probs
        self.alive[:, 0] = 0.0  # the k beams start as copies of one
        self.done = torch.zeros(n, dtype=torch.bool, device=device)  # nothing can beat fin

    def step(self, t: int, logprobs: Tensor, sent: Tensor, history: Tensor) -> tuple[Tensor, ...]:
        k, n = self.rows, len(sent)
        # the 2k best extensions: at most k end in EOS (one per beam), so k others remain
        cand, origin, word = best_extensions(logprobs, self.alive, 2 * k)  # (N, 2k) each
        origin += torch.arange(n, device=origin.device).unsqueeze(1) * k  # beam -> its row
        ends = word == self.eos
        # an EOS in the top k finishes a hypothesis (of a sentence not done yet)
        finished = ends[:, :k] & ~self.done.unsqueeze(1)  # (N, k)
        score = torch.where(finished, cand[:, :k] / penalty(t + 1, self.cfg), NEG_INF)
        top, pick = torch.cat([self.fin_score[sent], score], 1).topk(self.kept)  # (N, kept)
        self.fin_score[sent] = top
        logprob = torch.cat([self.fin_logprob[sent], cand[:, :k]], 1)
        self.fin_logprob[sent] = logprob.gather(1, pick)
        pool = torch.cat([self.fin_tokens[sent], history[origin[:, :k]]], 1)  # (N, kept + k, steps)
        self.fin_tokens[sent] = pool.gather(1, pick.unsqueeze(2).expand(-1, -1, self.steps))
        self.alive, pick = cand.masked_fill(ends, NEG_INF).topk(k)  # (N, k)
        # log-probs only fall, and the penalty grows at most to that of the longest output;
        # transformers guesses the current length instead
        longest = t + 1 if self.hf else self.limit[sent] + 1
        self.done |= self.fin_score[sent, -1] >= self.alive[:, 0] / penalty(longest, self.cfg)
        return word.gather(1, pick), origin.gather(1, pick)

    def keep(self, live: Tensor) -> None:
        self.alive, self.done = self.alive[live], self.done[live]

    def finish(self) -> list[list[Hypothesis]]:
        """Each sentence's nbest finished hypotheses, best first (fewer only if fewer
        finished)."""
        found = zip(self.fin_tokens.tolist(), self.fin_score.tolist(), self.fin_logprob.tolist())
        return [
            [
                Hypothesis([w for w in seq if w != self.pad], s, lp)
                for seq, s, lp in zip(*hyps)
                if s > NEG_INF
            ][: self.cfg.nbest]
            for hyps in found
        ]


def beam_search(
    model: Transformer,
    src: Tensor,
    cfg: DecodeConfig,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """Beam search of src (B, S) as `cfg` says (beam, alpha, max_len_a/b, nbest, rules,
    no_repeat_ngram) -> per sentence, its `nbest` best hypotheses (fewer only if fewer
    exist), best first by score = logprob / penalty(L), where the length L counts EOS."""
    lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, model.cfg.pad_id)
    return search(model, src, Beam(cfg), lengths, plan, prefix, cfg)


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
