"""Sampling instead of search (`decode.sampling`): each token drawn from the model's distribution
at `decode.temperature`, cut to the `top_k` most likely tokens (Fan et al., 2018) and to the
fewest whose probabilities reach `top_p` (nucleus sampling, Holtzman et al., 2020), as fairseq's
`--sampling-topk` / `--sampling-topp`, a `Strategy` of the one search loop (mt.decoding.search).
Back-translation with sampled translations beats beam back-translation (Edunov et al., 2018).
The same generator state gives the same samples.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import DecodeConfig, ModelConfig
from ..model import Transformer
from .search import NEG_INF, Greedy, Hypothesis, Plan, max_output_lengths, penalty, search


def allowed(logprobs: Tensor, cfg: DecodeConfig) -> Tensor:
    """logprobs (R, V), -inf where a token may not come -> the scores to sample from:
    logprobs / temperature, -inf outside the top_k and the top_p nucleus."""
    scores = logprobs / cfg.temperature
    if 0 < cfg.top_k < scores.size(1):
        kth = scores.topk(cfg.top_k).values[:, -1:]
        scores = scores.masked_fill(scores < kth, NEG_INF)
    if cfg.top_p < 1:
        ranked, order = scores.sort(-1, descending=True)
        probs = ranked.softmax(-1)
        # a token is out when those ranked above it already reach top_p (the first never is)
        out = probs.cumsum(-1) - probs >= cfg.top_p
        scores = scores.scatter(1, order, ranked.masked_fill(out, NEG_INF))
    return scores


def draw(logprobs: Tensor, cfg: DecodeConfig, generator: torch.Generator) -> Tensor:
    """One token per row (R,), drawn from `allowed(logprobs, cfg)`."""
    probs = allowed(logprobs, cfg).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


class Sampling(Greedy):
    """Greedy search's loop with each token drawn (`draw`), and the samples scored as beam
    search scores its hypotheses: the model's own log-probabilities, length-normalised."""

    log_probs = True  # those before the masks: those `mt score` gives

    def __init__(self, cfg: DecodeConfig, generator: torch.Generator) -> None:
        self.cfg, self.generator = cfg, generator

    def start(self, src: Tensor, limit: Tensor, steps: int, model: ModelConfig) -> None:
        super().start(src, limit, steps, model)
        self.logprob = torch.zeros(src.size(0), device=src.device)

    def pick(self, logprobs: Tensor, sent: Tensor) -> Tensor:
        tokens = draw(logprobs, self.cfg, self.generator)
        drawn = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        self.logprob[sent] += drawn.masked_fill(self.done, 0)
        return tokens

    def finish(self) -> list[list[Hypothesis]]:
        return [
            [Hypothesis(tokens, lp / penalty(len(tokens) + 1, self.cfg), lp)]
            for tokens, lp in zip(self.outputs(), self.logprob.tolist())
        ]


def sample(
    model: Transformer,
    src: Tensor,
    cfg: DecodeConfig,
    generator: torch.Generator,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
) -> list[list[Hypothesis]]:
    """`cfg.nbest` samples per sentence of src (B, S), best first by score. `plan` must not
    replay CUDA graphs: a replay draws nothing new."""
    n = cfg.nbest
    src = src.repeat_interleave(n, 0)  # every sample its own row
    prefix = None if prefix is None else prefix.repeat_interleave(n, 0)
    lengths = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b, model.cfg.pad_id)
    found = search(model, src, Sampling(cfg, generator), lengths, plan, prefix, cfg)
    hyps = [h for sample in found for h in sample]
    return [sorted(hyps[i : i + n], key=lambda h: -h.score) for i in range(0, len(hyps), n)]
