"""One search loop for every way of decoding: greedy search, beam search, constrained beam
search (mt.decoding.constraints) and sampling (mt.decoding.sampling) are `Strategy`s of
`search`, as fairseq's search strategies plug into one SequenceGenerator through `step`.

The loop owns what they share: the encoder's pass, each sentence's length limit (at most
`max_len` tokens before EOS, which is then forced; `output_lengths` gives the usual a *
source_length + b), the decoder's cache and its rows, the tokens no strategy may take (PAD
and BOS anywhere, all but EOS at a limit, a `prefix`'s forced tokens, `no_repeat_ngram`'s
repeats) and how it meets the device (`Plan`). A strategy sees each step's scores of its
rows and picks the next tokens and the rows they extend, keeps its finished hypotheses and
says which sentences are done. The special ids are the model's (`model.cfg`: pad_id,
bos_id, eos_id). A `prefix` (B, P) of target tokens, FREE (0) where a sentence's is shorter,
forces each hypothesis's first tokens. `no_repeat_ngram` counts the prefix's n-grams, as
fairseq's history holds its prefix, but never bans a forced token (fairseq bans after
forcing, so a prefix that repeats an n-gram leaves its rows nothing to take). Put the model
in eval mode first.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import Tensor

from ..config import DecodeConfig, ModelConfig
from ..model import DecoderState, Transformer, max_sentence_tokens
from .graphs import DecodeStep, graphs_for

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


def least_tokens(cfg: DecodeConfig) -> int:
    """Tokens a translation has before its EOS, at least: one under mt's rules, so that no
    source comes back empty (fairseq's min_len; an empty hypothesis's one log-probability
    can beat a whole sentence's normalised one), none under transformers' generate()'s."""
    return int(cfg.rules == "mt")


def penalty(length: int | Tensor, cfg: DecodeConfig) -> float | Tensor:
    """What a hypothesis's log-probability is divided by under decode.rules: GNMT's
    `length_penalty`, or transformers' L ** alpha."""
    return length**cfg.alpha if cfg.rules == "transformers" else length_penalty(length, cfg.alpha)


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


class Strategy(Protocol):
    """How the next tokens are chosen: `search` calls `start`, then `step` at every step, and
    `keep` when done sentences leave, and returns `finish`'s hypotheses."""

    rows: int  # decoder rows a sentence has: the beam (1: greedy search, sampling)
    log_probs: bool  # step takes log-probabilities (False: logits, whose argmax is enough)
    done: Tensor  # (N,) bool: the sentence needs no more steps (read when the host looks)

    def start(self, src: Tensor, limit: Tensor, steps: int, model: ModelConfig) -> None:
        """A new search of src (B, S), each sentence's output at most `limit` (B,) tokens
        before EOS, in at most `steps` steps."""
        ...

    def step(self, t: int, scores: Tensor, sent: Tensor, history: Tensor) -> tuple[Tensor, ...]:
        """Step t's scores (N * rows, V) of the rows of sentences `sent` (N,), -inf where a
        token may not come, and the tokens so far (N * rows, t) -> the next tokens (N, rows)
        and the row each extends (N, rows), or only the tokens where each row extends itself."""
        ...

    def keep(self, live: Tensor) -> None:
        """Only the sentences `live` (indices into those of the last step) go on."""
        ...

    def finish(self) -> list[list[Hypothesis]]:
        """Each sentence's hypotheses, best first."""
        ...


class Abandoned(BaseException):
    """A search stopped because nobody waits for its result (`abandoned`). A BaseException,
    as asyncio's CancelledError is, so that no fallback's `except Exception` retries it."""


# The caller's way to stop a search whose result nobody waits for any more (mt serve: every
# client of a batch has left): asked before every step, in the caller's own thread.
abandoned: ContextVar[Callable[[], bool]] = ContextVar("abandoned", default=lambda: False)


@torch.inference_mode()
def search(
    model: Transformer,
    src: Tensor,
    strategy: Strategy,
    max_len: int | Tensor,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
    cfg: DecodeConfig | None = None,
) -> list[list[Hypothesis]]:
    """Decode src (B, S) with `strategy`, each output at most `max_len` (an int or (B,))
    tokens before EOS -> per sentence, its hypotheses best first (the module's docstring).
    What every strategy shares of `cfg`: no_repeat_ngram, and under decode.rules
    transformers a forced EOS's log-probability 0, as generate() has it. Through the model's
    CUDA graphs where `plan` says, under their net (Graphs.guard)."""

    def run(plan: Plan) -> list[list[Hypothesis]]:
        return _search(model, src, strategy, max_len, plan, prefix, cfg or DecodeConfig())

    if not plan.buckets:  # nothing of the model's to share: decodings run side by side
        return run(plan)
    graphs = graphs_for(model)
    with graphs.lock:
        if not plan.graph:
            return run(plan)
        return graphs.guard(
            lambda graph: run(replace(plan, graph=graph)),
            lambda found: [[h.tokens for h in hyps] for hyps in found],  # what must match
        )


def _search(
    model: Transformer,
    src: Tensor,
    strategy: Strategy,
    max_len: int | Tensor,
    plan: Plan,
    prefix: Tensor | None,
    cfg: DecodeConfig,
) -> list[list[Hypothesis]]:
    specials, k = model.cfg, strategy.rows
    limit = sentence_limits(model, src, max_len)  # (B,)
    steps = int(limit.max()) + 1  # the last one can only give EOS
    first_limit = int(limit.min())  # no row has to give EOS before this step
    state, decode_step = start_decoding(model, *model.encode(src), steps, k, plan)
    strategy.start(src, limit, steps, specials)
    sent = torch.arange(src.size(0), device=src.device)  # (N,) sentence of each group of k rows
    history = src.new_full((len(sent) * k, steps), specials.pad_id)  # (N * k, steps) tokens so far
    tokens = src.new_full((len(sent) * k,), specials.bos_id)
    gone = abandoned.get()
    for t in range(steps):
        if gone():
            raise Abandoned
        scores = decode_step(tokens)  # (N * k, V) logits
        if strategy.log_probs:  # float32 whatever the step's precision
            scores = scores.float().log_softmax(-1)
        force_eos = (t >= limit[sent]).repeat_interleave(k) if t >= first_limit else None
        forbid(scores, force_eos, specials, t < least_tokens(cfg))
        if cfg.rules == "transformers" and force_eos is not None:  # its ForcedEOSTokenLogits-
            scores[:, specials.eos_id].masked_fill_(force_eos, 0.0)  # Processor
        forced = forced_at(prefix, t, sent)
        if cfg.no_repeat_ngram and t >= cfg.no_repeat_ngram:
            banned = repeated_ngrams(history[:, :t], cfg.no_repeat_ngram, scores.size(1))
            if forced is not None:  # a forced row keeps its token
                banned &= (forced == FREE).repeat_interleave(k).unsqueeze(1)
            scores.masked_fill_(banned, NEG_INF)
        if forced is not None:
            force(scores, forced.repeat_interleave(k))
        chosen, *origin = strategy.step(t, scores, sent, history)
        rows = origin[0] if origin else None  # (N, k) the row each new row extends
        keep = None
        if (t + 1) % plan.check_every == 0:  # the host looks
            live = (~strategy.done).nonzero().squeeze(1)  # (N',)
            if len(live) == 0:
                break
            if not plan.static and len(live) < len(sent):
                keep, sent = live, sent[live]
                strategy.keep(live)
                chosen = chosen[keep]
                if rows is None:  # each row extends itself
                    rows = torch.arange(len(history), device=src.device).view(-1, k)
                rows = rows[keep]
        if rows is not None:  # reorders rows and drops done sentences' at once
            rows = rows.flatten()
            state.select(rows, keep)
            history = history[rows]
        tokens = chosen.flatten()
        history[:, t] = tokens
    return strategy.finish()


def sentence_limits(model: Transformer, src: Tensor, max_len: int | Tensor) -> Tensor:
    """Each sentence's most output tokens before EOS (B,): `max_len` within the positions."""
    limit = torch.as_tensor(max_len, device=src.device).expand(src.size(0))
    return within_positions(limit, model.cfg)


def start_decoding(
    model: Transformer, memory: Tensor, src_keep: Tensor, steps: int, rows: int, plan: Plan
) -> tuple[DecoderState, DecodeStep]:
    """The decoder state for `steps` positions and `rows` rows per source, and its step: in
    the buffers of the model's graphs where `plan` says so."""
    if plan.buckets:
        return graphs_for(model).start(model, memory, src_keep, steps, rows, plan.graph)
    state = model.start_decoding(memory, src_keep, steps, rows, static=plan.static)
    return state, lambda tokens: model.decode_step(tokens, state)


def forbid(
    scores: Tensor, force_eos: Tensor | None, cfg: ModelConfig, too_soon: bool = False
) -> Tensor:
    """scores (R, V): logits or log-probs, force_eos (R,) bool or None (no row at its limit)
    -> the same tensor, -inf where a token may not come next: PAD and BOS anywhere, EOS
    where it comes `too_soon`, all but EOS in rows at their limit. Masked, not by
    `force_eos.any()`: no wait for the device."""
    scores[:, cfg.pad_id] = scores[:, cfg.bos_id] = NEG_INF
    if force_eos is not None:
        eos = scores[:, cfg.eos_id].clone()
        scores.masked_fill_(force_eos.unsqueeze(1), NEG_INF)
        scores[:, cfg.eos_id] = eos
    if too_soon and force_eos is None:
        scores[:, cfg.eos_id] = NEG_INF
    elif too_soon:  # but in rows at their limit: there EOS is all a row may take
        scores[:, cfg.eos_id].masked_fill_(~force_eos, NEG_INF)
    return scores


def force(scores: Tensor, forced: Tensor) -> Tensor:
    """scores (R, V), forced (R,): the token a row must take now, FREE where it is free
    -> the same tensor, -inf but at the forced token in rows that have one."""
    other = torch.arange(scores.size(1), device=scores.device) != forced.unsqueeze(1)
    return scores.masked_fill_(other & (forced != FREE).unsqueeze(1), NEG_INF)


def forced_at(prefix: Tensor | None, t: int, sentences: Tensor) -> Tensor | None:
    """The tokens `prefix` forces on `sentences` (N,) at step t; None once it has none."""
    return prefix[sentences, t] if prefix is not None and t < prefix.size(1) else None


def repeated_ngrams(history: Tensor, n: int, vocab: int) -> Tensor:
    """history (R, t) tokens so far, t >= n -> (R, V) True at the tokens that would repeat an
    n-gram: those that followed an earlier occurrence of the last n - 1 tokens."""
    grams = history.unfold(1, n, 1)  # (R, t - n + 1, n) every n-gram so far
    recent = history[:, history.size(1) - n + 1 :].unsqueeze(1)  # (R, 1, n - 1)
    seen = (grams[:, :, :-1] == recent).all(-1)  # (R, t - n + 1)
    counts = torch.zeros(len(history), vocab, device=history.device)
    return counts.scatter_add_(1, grams[:, :, -1], seen.float()) > 0


class Greedy:
    """The most probable token at each step, one row a sentence (sampling draws instead:
    mt.decoding.sampling.Sampling)."""

    rows = 1
    log_probs = False  # the argmax needs no softmax

    def start(self, src: Tensor, limit: Tensor, steps: int, model: ModelConfig) -> None:
        self.eos = model.eos_id
        self.out = src.new_full((src.size(0), steps), self.eos)  # (B, steps) each one's tokens
        self.done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)

    def pick(self, scores: Tensor, sent: Tensor) -> Tensor:
        """The next token of each row (N,)."""
        return scores.argmax(-1)

    def step(self, t: int, scores: Tensor, sent: Tensor, history: Tensor) -> tuple[Tensor]:
        tokens = self.pick(scores, sent)
        self.out[sent, t] = tokens  # what follows a row's first EOS is cut off at the end
        self.done |= tokens == self.eos
        return (tokens.unsqueeze(1),)

    def keep(self, live: Tensor) -> None:
        self.done = self.done[live]

    def outputs(self) -> list[list[int]]:
        """Each sentence's tokens, without BOS and EOS."""
        return [seq[: seq.index(self.eos)] for seq in self.out.tolist()]

    def finish(self) -> list[list[Hypothesis]]:
        return [[Hypothesis(tokens, float("nan"), float("nan"))] for tokens in self.outputs()]


def greedy(
    model: Transformer,
    src: Tensor,
    max_len: int | Tensor,
    plan: Plan = Plan(),
    prefix: Tensor | None = None,
    cfg: DecodeConfig | None = None,
) -> list[list[int]]:
    """Greedy search of src (B, S); max_len an int or a (B,) tensor such as
    max_output_lengths(src, a, b) -> per sentence, its tokens without BOS and EOS; under
    `cfg`'s rules (mt's where not given)."""
    found = search(model, src, Greedy(), max_len, plan, prefix, cfg)
    return [hyps[0].tokens for hyps in found]
