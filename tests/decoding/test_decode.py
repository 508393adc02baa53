"""Greedy and beam search: against a known distribution, exhaustive search and each other;
scores against teacher forcing; batching, n-best lists, n-gram blocking, length limits; the
GPU plan (a static cache, few looks by the host) against the CPU one, and its host syncs;
batches split when memory runs out."""

import copy
import dataclasses
import itertools
import math
from types import SimpleNamespace

import pytest
import torch

import mt.decoding.translate
from helpers.models import (
    VOCAB,
    HostSyncs,
    mixed_batch,
    random_batch,
    random_model,
    teacher_forced_logprobs,
    tiny_model,
    trained,
)
from mt.config import DecodeConfig, ModelConfig
from mt.data.tokenizer import BOS, EOS, PAD
from mt.decoding.beam import beam_search, best_extensions
from mt.decoding.constraints import Constraints, constrained_beam_search
from mt.decoding.sampling import sample
from mt.decoding.search import Plan, greedy, length_penalty, max_output_lengths
from mt.decoding.translate import translate_ids
from mt.errors import MtError


@pytest.fixture(params=["random", "trained"])
def model_and_batch(request):
    return (random_model(), mixed_batch()) if request.param == "random" else trained()[:2]


class ChainModel:
    """A stand-in for Transformer whose next token depends on the previous one only. After an
    `opening` token o (where given), it has three outputs: [o] (p = 0.4), [o, a] (0.27) and
    [o, a, b, c, d] (0.33), which greedy picks."""

    cfg = ModelConfig()
    o, a, b, c, d = 8, 4, 5, 6, 7

    def __init__(self, opening: bool = True):
        o, a, b, c, d = self.o, self.a, self.b, self.c, self.d
        start = o if opening else BOS
        arcs = [(start, EOS, 0.4), (start, a, 0.6), (a, EOS, 0.45), (a, b, 0.55), (b, c, 1.0)]
        arcs += [(c, d, 1.0), (d, EOS, 1.0)] + ([(BOS, o, 1.0)] if opening else [])
        self.logits = torch.full((9, 9), -30.0)  # [previous token, next token]
        for prev, nxt, p in arcs:
            self.logits[prev, nxt] = math.log(p)
        self.opening = [o] if opening else []

    def encode(self, src):
        return src, None

    def start_decoding(self, memory, src_keep, max_len, rows_per_source=1, static=False):
        return SimpleNamespace(select=lambda rows, sources=None: None)  # nothing cached

    def decode_step(self, tokens, state):
        return self.logits[tokens]


def test_search_on_a_known_distribution():
    model, src = ChainModel(), torch.tensor([[4, 5, EOS]])
    chain = [model.o, model.a, model.b, model.c, model.d]
    assert greedy(model, src, 10) == [chain]
    # an EOS ranked second, below the beam of one, finishes nothing
    assert beam_search(model, src, DecodeConfig(beam=1, alpha=0.0))[0][0].tokens == chain
    assert beam_search(model, src, DecodeConfig(beam=2, alpha=0.0))[0][0].tokens == [
        model.o
    ]  # the most probable
    # with a length penalty the chain wins (score -0.67 against -0.79 for [o]), but only a
    # search that bounds the scores reachable from [o, a, b] (log-prob -1.11) looks past [o]
    assert beam_search(model, src, DecodeConfig(beam=2, alpha=1.0))[0][0].tokens == chain


def test_no_source_comes_back_empty_under_mts_rules():
    """An empty output most probable of all (EOS first, p = 0.4) is never chosen under mt's
    rules, as fairseq's min_len: not by beam search or in 50 samples (every strategy takes the
    one loop's rule); transformers' generate() chooses it."""
    model, src = ChainModel(opening=False), torch.tensor([[4, 5, EOS]])
    chain = [model.a, model.b, model.c, model.d]
    for rules, want in (("mt", chain), ("transformers", [])):
        cfg = DecodeConfig(beam=2, alpha=0.0, rules=rules)
        assert beam_search(model, src, cfg)[0][0].tokens == want
    assert greedy(model, src, 0) == [[]]  # a limit of no tokens leaves EOS alone to take
    cfg = DecodeConfig(nbest=50, sampling=True)
    samples = sample(model, src, cfg, torch.Generator().manual_seed(0))
    assert {len(h.tokens) for h in samples[0]} == {1, 4}  # [a] and the chain, never []


def test_beam_of_one_is_greedy(model_and_batch):
    model, src = model_and_batch
    hyps = beam_search(model, src, DecodeConfig(beam=1, alpha=0.0, max_len_a=1.5, max_len_b=10))
    assert [h[0].tokens for h in hyps] == greedy(model, src, max_output_lengths(src, 1.5, 10))


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_exhaustive_beam_finds_the_best_outputs(alpha):
    """A beam as wide as the set of all outputs of one or two tokens (none is empty under mt's
    rules) is exact search: its n-best list is the best of them all, each scored by teacher
    forcing."""
    model, src = random_model(), random_batch([5, 3], seed=5)
    words = [w for w in range(VOCAB) if w not in (PAD, BOS, EOS)]
    outputs = [*([w] for w in words), *map(list, itertools.product(words, repeat=2))]
    hyps = beam_search(
        model, src, DecodeConfig(beam=len(outputs), alpha=alpha, max_len_a=0, max_len_b=2, nbest=5)
    )
    penalties = [length_penalty(len(out) + 1, alpha) for out in outputs]
    for i, nbest in enumerate(hyps):
        logprobs = teacher_forced_logprobs(model, src[i], outputs)
        scores = sorted(((lp / p, out) for lp, p, out in zip(logprobs, penalties, outputs)))[::-1]
        assert [h.tokens for h in nbest] == [out for _, out in scores[:5]]
        assert [h.score for h in nbest] == pytest.approx([s for s, _ in scores[:5]], abs=1e-4)


def test_beam_scores_no_worse_than_greedy():
    """Not a theorem (greedy's path can drop out of the beam and still end better, as it does
    now and then for a random model), but it should hold for a trained model."""
    model, src, _ = trained()
    src = torch.cat([src, mixed_batch()])  # seen and unseen sentences
    best = beam_search(model, src, DecodeConfig(beam=4, alpha=0.0))
    for i, tokens in enumerate(greedy(model, src, max_output_lengths(src, 1.5, 10))):
        logprobs = teacher_forced_logprobs(model, src[i], [tokens, best[i][0].tokens])
        assert logprobs[1] >= logprobs[0] - 1e-5


def test_same_output_alone_as_in_a_batch(model_and_batch):
    model, src = model_and_batch
    src = src[:6]
    in_batch = greedy(model, src, max_output_lengths(src, 1.5, 10))
    beams = beam_search(model, src, DecodeConfig(beam=3, nbest=3))
    for i in range(len(src)):
        alone = src[i][src[i] != PAD][None]
        assert greedy(model, alone, max_output_lengths(alone, 1.5, 10)) == [in_batch[i]]
        (nbest,) = beam_search(model, alone, DecodeConfig(beam=3, nbest=3))
        assert [h.tokens for h in nbest] == [h.tokens for h in beams[i]]
        assert [h.score for h in nbest] == pytest.approx([h.score for h in beams[i]], abs=1e-5)


def test_nbest_lists_are_sorted_distinct_and_rescore_exactly():
    model, src = random_model(), mixed_batch()
    for alpha, no_repeat_ngram in [(0.6, 0), (0.0, 2)]:
        hyps = beam_search(
            model, src, DecodeConfig(beam=4, alpha=alpha, nbest=4, no_repeat_ngram=no_repeat_ngram)
        )
        for i, nbest in enumerate(hyps):
            assert len({tuple(h.tokens) for h in nbest}) == 4
            assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
            logprobs = teacher_forced_logprobs(model, src[i], [h.tokens for h in nbest])
            assert [h.logprob for h in nbest] == pytest.approx(logprobs, abs=1e-4)
            penalties = [length_penalty(len(h.tokens) + 1, alpha) for h in nbest]
            assert [h.score for h in nbest] == pytest.approx(
                [h.logprob / p for h, p in zip(nbest, penalties)]
            )


def test_trained_model_beam_reproduces_its_targets():
    model, src, targets = trained()
    assert [h[0].tokens for h in beam_search(model, src, DecodeConfig(beam=4))] == targets


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram(n):
    def repeats(tokens):
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        return len(grams) - len(set(grams))

    model, src = random_model(), mixed_batch()
    assert (
        sum(repeats(h[0].tokens) for h in beam_search(model, src, DecodeConfig(beam=3))) > 0
    )  # not vacuous
    cfg = DecodeConfig(beam=3, nbest=3, no_repeat_ngram=n)
    sampled = dataclasses.replace(cfg, sampling=True)
    constraints = [Constraints([[[7]]])] * len(src)  # met, or else beam search's output
    for found in (
        beam_search(model, src, cfg),
        sample(model, src, sampled, torch.Generator().manual_seed(n)),
        constrained_beam_search(model, src, cfg, constraints),
    ):  # one loop bans them for every strategy
        assert all(repeats(h.tokens) == 0 for nbest in found for h in nbest)


def test_output_lengths_are_limited():
    model, src = random_model(), mixed_batch()  # runs to the limit: each bound is reached
    limits = max_output_lengths(src, 0.5, 2)
    assert limits.tolist() == [6, 3, 5, 4, 6, 3]
    assert [len(tokens) for tokens in greedy(model, src, limits)] == limits.tolist()
    hyps = beam_search(model, src, DecodeConfig(beam=3, nbest=3, max_len_a=0.5, max_len_b=2))
    assert [max(len(h.tokens) for h in nbest) for nbest in hyps] == limits.tolist()
    assert all(len(h.tokens) <= limit for nbest, limit in zip(hyps, limits) for h in nbest)
    short, src = tiny_model(seed=3, max_positions=8), src[:, :8]  # BOS + 7 tokens fill it
    assert {len(tokens) for tokens in greedy(short, src, 100)} == {7}
    assert {
        len(h[0].tokens) for h in beam_search(short, src, DecodeConfig(beam=2, max_len_b=100))
    } == {7}


@pytest.mark.parametrize("vocab", [8000, 101, 96])  # chunks of 64, of 1 (a prime), of 48
def test_best_extensions_rank_like_a_full_sort(vocab):
    gen = torch.Generator().manual_seed(vocab)
    n, k, m = 6, 4, 8
    logprobs = torch.randn(n * k, vocab, generator=gen).log_softmax(-1)
    logprobs[:, :2] = float("-inf")  # forbidden words
    logprobs[3, 5:] = float("-inf")  # a row with only three words allowed
    alive = torch.randn(n, k, generator=gen) - 2.0
    alive[0, 1:] = float("-inf")  # a first step: one live beam
    expected, flat = (alive.view(-1, 1) + logprobs).view(n, -1).topk(m)
    scores, beam, word = best_extensions(logprobs, alive, m)
    assert torch.equal(scores, expected)
    assert torch.equal(beam * vocab + word, flat)


# what a GPU runs (plan_for): a static cache, the host looking every few steps; and lagging
# looks with rows dropped, as a CPU would if it looked less often
# (and the static cache in the buffers of a bucket, which CUDA graphs read, stepped eagerly)
GPU_LIKE = [Plan(check_every=4, static=True), Plan(check_every=3)]
BUCKETS = Plan(check_every=4, static=True, buckets=True)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize(
    "plan",
    [
        *GPU_LIKE,
        BUCKETS,
        pytest.param(Plan(check_every=8, static=True, buckets=True, graph=True), marks=CUDA),
    ],
    ids=["static", "lagging", "buckets", "cuda-graph"],
)
def test_plans_change_the_work_not_the_result(model_and_batch, plan):
    model, src = model_and_batch
    if plan.graph:  # the plan of a GPU, there
        model, src = copy.deepcopy(model).cuda(), src.cuda()
    limits = max_output_lengths(src, 1.5, 10)
    assert greedy(model, src, limits, plan) == greedy(model, src, limits)
    for cfg in [DecodeConfig(beam=4, nbest=3), DecodeConfig(beam=3, alpha=0, no_repeat_ngram=2)]:
        expected, found = beam_search(model, src, cfg), beam_search(model, src, cfg, plan)
        assert [[h.tokens for h in x] for x in found] == [[h.tokens for h in x] for x in expected]
        for x, y in zip(found, expected):
            assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-5)
            assert [h.logprob for h in x] == pytest.approx([h.logprob for h in y], abs=1e-5)


def test_decodings_in_two_threads_take_the_model_s_buffers_in_turn(model_and_batch, monkeypatch):
    """mt serve decodes the two directions of one model in two threads: through the buffers
    of the model's Graphs, one decoding at a time, each as alone."""
    from concurrent.futures import ThreadPoolExecutor

    from mt.decoding.graphs import graphs_for

    model, src = model_and_batch
    limits = max_output_lengths(src, 1.5, 10)
    alone = [greedy(model, half, limits[: len(half)], BUCKETS) for half in (src, src[1:])]
    held, step = [], model.decode_step

    def stepping(*args, **kwargs):
        held.append(graphs_for(model).lock.locked())
        return step(*args, **kwargs)

    monkeypatch.setattr(model, "decode_step", stepping)
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda x: greedy(model, x, limits[: len(x)], BUCKETS), (src, src[1:])))
    assert both == alone
    assert held and all(held)


def syncs_per_step(monkeypatch, model, search) -> list[int]:
    """Host syncs between one decoder step and the next, for each step but the last."""
    mode, marks, step = HostSyncs(), [], model.decode_step
    for method in ("tolist", "numpy", "cpu"):  # they read values with no operation to count

        def read(tensor, *args, real=getattr(torch.Tensor, method), **kwargs):
            mode.count += 1
            return real(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, read)
    monkeypatch.setattr(model, "decode_step", lambda *a: marks.append(mode.count) or step(*a))
    with mode:
        search()
    return [b - a for a, b in itertools.pairwise(marks)]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_the_gpu_plan_waits_for_the_device_only_when_the_host_looks(monkeypatch, search):
    model, src = random_model(), mixed_batch()  # runs to the length limit: many steps
    limits, cfg = max_output_lengths(src, 1.5, 10), DecodeConfig(beam=3, nbest=2, no_repeat_ngram=2)

    def run(plan):
        if search == "greedy":
            return lambda: greedy(model, src, limits, plan)
        return lambda: beam_search(model, src, cfg, plan)

    assert min(syncs_per_step(monkeypatch, model, run(Plan()))) >= 1  # the CPU's: every step
    for plan in (GPU_LIKE[0], BUCKETS):
        syncs = syncs_per_step(monkeypatch, model, run(plan))
        assert len(syncs) > 12
        assert syncs == [int((t + 1) % 4 == 0) for t in range(len(syncs))]


def test_a_batch_too_big_for_memory_is_split_until_it_fits(monkeypatch, capsys):
    model = random_model()
    # six sources of one length: one batch of 6 (a CPU's batches hold one length)
    ids = [([w for w in row if w != PAD] * 9)[:9] for row in mixed_batch().tolist()]
    cfg = DecodeConfig(beam=2, nbest=2, batch_tokens=1000)
    expected, search = translate_ids(model, ids, cfg), mt.decoding.translate.beam_search

    def small_memory(model, src, cfg, plan, prefix=None):
        if len(src) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return search(model, src, cfg, plan, prefix)

    monkeypatch.setattr(mt.decoding.translate, "beam_search", small_memory)
    found = translate_ids(model, ids, cfg)
    assert [[h.tokens for h in x] for x in found] == [[h.tokens for h in x] for x in expected]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a batch of 6 sentences did not fit in the memory of cpu" in err

    def no_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(
        mt.decoding.translate, "beam_search", no_memory
    )  # not even one sentence fits
    with pytest.raises(MtError, match="a sentence of 10 tokens does not fit in the memory of cpu"):
        translate_ids(model, ids, cfg)
