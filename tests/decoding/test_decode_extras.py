"""Ensembles, sampling and forced prefixes in search: an ensemble of a model with itself is the
model; an ensemble's scores are its mean probabilities; seeded samples repeat, stay inside
top-k and top-p and are scored as teacher forcing scores them; a prefix starts every output
and a prefix of the model's own best output changes nothing."""

import math

import pytest
import torch

from helpers.models import (
    mixed_batch,
    pad,
    random_model,
    teacher_forced_logprobs,
    tiny_model,
    trained,
)
from mt.config import DecodeConfig
from mt.data.tokenizer import BOS, EOS, PAD
from mt.decoding.beam import beam_search
from mt.decoding.constraints import (
    Constraints,
    TermProgress,
    constrained_beam_search,
    encode_constraints,
)
from mt.decoding.ensemble import Ensemble
from mt.decoding.sampling import allowed, sample
from mt.decoding.scoring import score_ids
from mt.decoding.search import Plan, greedy, length_penalty, max_output_lengths
from mt.decoding.translate import translate_ids
from mt.errors import MtError


def sources(src: torch.Tensor) -> list[list[int]]:
    """A padded batch (with EOS) as translate_ids takes it: ids without EOS."""
    return [[w for w in row if w not in (PAD, EOS)] for row in src.tolist()]


@pytest.mark.parametrize("static", [False, True])
def test_an_ensemble_of_a_model_with_itself_is_the_model(static):
    model, src = random_model(), mixed_batch()
    twice = Ensemble([model, model]).eval()
    plan = Plan(check_every=4, static=True) if static else Plan()
    lengths = max_output_lengths(src, 1.5, 10)
    assert greedy(twice, src, lengths, plan) == greedy(model, src, lengths, plan)
    cfg = DecodeConfig(beam=4, nbest=4, alpha=0.6)
    alone, together = beam_search(model, src, cfg, plan), beam_search(twice, src, cfg, plan)
    assert [[h.tokens for h in x] for x in together] == [[h.tokens for h in x] for x in alone]
    for x, y in zip(together, alone):
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-5)
    ids, tgt = sources(src), [h[0].tokens for h in alone]
    assert [s.logprob for s in score_ids(twice, ids, tgt, cfg)] == pytest.approx(
        [s.logprob for s in score_ids(model, ids, tgt, cfg)], abs=1e-5
    )


def test_an_ensemble_averages_probabilities_and_beam_scores_them():
    first, second, src = random_model(), tiny_model(seed=7), mixed_batch()
    ensemble = Ensemble([first, second]).eval()
    cfg = DecodeConfig(beam=3, nbest=3, alpha=0.0)
    for i, nbest in enumerate(beam_search(ensemble, src, cfg)):
        outputs = [h.tokens for h in nbest]
        tgt_in = pad([[BOS, *out] for out in outputs])
        tgt_out = pad([[*out, EOS] for out in outputs])
        row = src[i][src[i] != PAD].expand(len(outputs), -1)
        with torch.no_grad():
            probs = sum(m(row, tgt_in).softmax(-1) for m in (first, second)) / 2
        logprobs = probs.log().gather(2, tgt_out.unsqueeze(2)).squeeze(2)
        expected = logprobs.masked_fill(tgt_out == PAD, 0).sum(1).tolist()
        assert [h.logprob for h in nbest] == pytest.approx(expected, abs=1e-4)


def sample_cfg(**keys) -> DecodeConfig:
    return DecodeConfig(**{"sampling": True, "nbest": 4, "beam": 1, "alpha": 0.6, **keys})


def test_seeded_samples_repeat_and_are_scored_as_teacher_forcing_scores_them():
    model, src = random_model(), mixed_batch()
    cfg = sample_cfg(temperature=1.3)
    runs = [sample(model, src, cfg, torch.Generator().manual_seed(s)) for s in (5, 5, 6)]
    tokens = [[[h.tokens for h in hyps] for hyps in run] for run in runs]
    assert tokens[0] == tokens[1] and tokens[0] != tokens[2]
    for i, hyps in enumerate(runs[0]):
        assert len(hyps) == 4 and len({tuple(h.tokens) for h in hyps}) > 1  # samples vary
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        expected = teacher_forced_logprobs(model, src[i], [h.tokens for h in hyps])
        assert [h.logprob for h in hyps] == pytest.approx(expected, abs=1e-4)
        for h in hyps:
            assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 0.6))
    found = translate_ids(model, sources(src), sample_cfg(seed=5), "cpu")
    again = translate_ids(model, sources(src), sample_cfg(seed=5), "cpu")
    assert [[h.tokens for h in x] for x in found] == [[h.tokens for h in x] for x in again]


def step_logprobs(model, src_row: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """(len(tokens) + 1, V): the model's log-probabilities at each step of an output."""
    with torch.no_grad():
        row = src_row[src_row != PAD][None]
        logits = model(row, torch.tensor([[BOS, *tokens]]))[0]
    logits[:, PAD] = logits[:, BOS] = -math.inf
    return logits.log_softmax(-1)


@pytest.mark.parametrize("keys", [dict(top_k=3), dict(top_p=0.5), dict(top_k=5, top_p=0.7)])
def test_samples_stay_inside_top_k_and_top_p(keys):
    model, src = random_model(), mixed_batch()
    cfg = sample_cfg(nbest=8, **keys)
    limits = max_output_lengths(src, cfg.max_len_a, cfg.max_len_b)
    checked = 0
    for i, hyps in enumerate(sample(model, src, cfg, torch.Generator().manual_seed(1))):
        for h in hyps:
            outputs = [*h.tokens, EOS]
            logprobs = step_logprobs(model, src[i], h.tokens)
            for t, token in enumerate(outputs[: int(limits[i])]):  # the last EOS is forced
                ranked = logprobs[t].argsort(descending=True).tolist()
                rank = ranked.index(token)
                probs = logprobs[t].exp()[ranked]
                assert rank < keys.get("top_k", len(ranked))
                assert probs[:rank].sum() < keys.get("top_p", 1.0) + 1e-6
                checked += 1
    assert checked > 100


def test_allowed_cuts_to_top_k_and_the_nucleus():
    logprobs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]).log()
    kept = lambda **keys: (allowed(logprobs, DecodeConfig(**keys)) > -math.inf).sum().item()  # noqa: E731
    assert kept(top_k=2) == 2 and kept(top_p=0.5) == 1 and kept(top_p=0.51) == 2
    assert kept(top_p=0.86) == 4 and kept(top_p=1.0) == 5 and kept(top_k=4, top_p=0.6) == 2


@pytest.mark.parametrize("beam", [1, 4])
def test_a_prefix_starts_every_output_and_its_own_changes_nothing(beam):
    model, src, _ = trained()
    src = torch.cat([src[:6], mixed_batch()])
    cfg = DecodeConfig(beam=beam, nbest=beam, alpha=0.6)
    ids = sources(src)
    free = translate_ids(model, ids, cfg, "cpu")
    own = [hyps[0].tokens[: len(hyps[0].tokens) // 2] for hyps in free]
    steered = translate_ids(model, ids, cfg, "cpu", prefixes=own)
    assert [h[0].tokens for h in steered] == [h[0].tokens for h in free]
    scores = [h[0].score for h in free]
    assert [h[0].score for h in steered] == pytest.approx(scores, abs=1e-5, nan_ok=True)
    forced = [[5, 9, 9][: i % 4] for i in range(len(ids))]  # some none, some unlikely
    for prefix, hyps in zip(forced, translate_ids(model, ids, cfg, "cpu", prefixes=forced)):
        assert hyps and all(h.tokens[: len(prefix)] == prefix for h in hyps)
    sampled = translate_ids(model, ids, sample_cfg(seed=3), "cpu", prefixes=forced)
    assert all(h.tokens[: len(p)] == p for p, hyps in zip(forced, sampled) for h in hyps)


def test_a_prefix_that_repeats_an_ngram_is_kept_and_the_ban_counts_its_ngrams():
    model, src = random_model(), mixed_batch()  # untrained: it repeats itself when let
    cfg = DecodeConfig(beam=3, nbest=3, alpha=0.6, no_repeat_ngram=2)
    prefix = [5, 9, 5, 9, 5]  # the bigram 5 9 twice, 9 5 twice: forced, not banned
    found = translate_ids(model, sources(src), cfg, "cpu", prefixes=[prefix] * len(src))
    for hyps in found:
        assert hyps
        for h in hyps:
            assert h.tokens[: len(prefix)] == prefix
            # after the prefix no bigram repeats an earlier one, the prefix's counted
            grams = list(zip(h.tokens, h.tokens[1:]))
            for t in range(len(prefix) - 1, len(grams)):
                assert grams[t] not in grams[:t], (h.tokens, t)
            assert h.tokens[len(prefix) : len(prefix) + 1] != [9]  # 5 9: the prefix's


def test_no_repeat_ngram_holds_at_beam_1():
    model, src = random_model(), mixed_batch()  # untrained: it repeats itself when let
    cfg = DecodeConfig(beam=1, nbest=1, no_repeat_ngram=2)
    for hyps in translate_ids(model, sources(src), cfg, "cpu"):
        grams = list(zip(hyps[0].tokens, hyps[0].tokens[1:]))
        assert len(set(grams)) == len(grams), hyps[0].tokens


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


@pytest.mark.parametrize("which", ["random", "trained"])
def test_constrained_outputs_contain_their_terms_batched_with_free_sentences(which):
    model, src = (random_model(), mixed_batch()) if which == "random" else trained()[:2]
    src = src[:6]
    cfg = DecodeConfig(beam=4, nbest=2, alpha=0.6)
    terms = [[[7, 8]], None, [[9], [10, 11]], [[12]], None, [[13, 14, 15]]]
    constraints = [None if t is None else Constraints([[p] for p in t]) for t in terms]
    found = constrained_beam_search(model, src, cfg, constraints)
    free = beam_search(model, src, cfg)
    for i, (phrases, hyps) in enumerate(zip(terms, found)):
        assert hyps
        for h in hyps:
            assert all(contains(h.tokens, p) for p in phrases or [])
        expected = teacher_forced_logprobs(model, src[i], [h.tokens for h in hyps])
        assert [h.logprob for h in hyps] == pytest.approx(expected, abs=1e-4)
        if phrases is None:  # a sentence without constraints is searched as beam search does
            assert [h.tokens for h in hyps][:1] == [h.tokens for h in free[i]][:1]
        alone = constrained_beam_search(model, src[i : i + 1], cfg, constraints[i : i + 1])[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]


def test_a_constraint_the_best_output_meets_changes_nothing():
    model, src, targets = trained()
    cfg = DecodeConfig(beam=4, alpha=0.6)
    constraints = [Constraints([[[t[len(t) // 2]]]]) for t in targets]
    assert [h[0].tokens for h in constrained_beam_search(model, src, cfg, constraints)] == targets


def test_constraints_that_cannot_be_are_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"<pad>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4}, "a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    assert encode_constraints(tokenizer, [["b"], []], [5, 5])[1] is None
    with pytest.raises(MtError, match="text 1: constraint ' ' tokenizes to nothing"):
        encode_constraints(tokenizer, [[" "]], [5])
    with pytest.raises(MtError, match="text 2: its constraints need 3 tokens, more than the 2"):
        encode_constraints(tokenizer, [["a"], ["a b", "b"]], [5, 2])


def test_a_term_is_begun_as_written_first_and_after_a_space_after_a_word():
    constraints = Constraints([[[5], [6]]], word_final=frozenset({9}), space_initial=frozenset({6}))
    assert constraints.next_tokens(TermProgress(), None) == {5}  # the output's start: as written
    assert constraints.next_tokens(TermProgress(), 9) == {6}  # after a word: after a space
    assert constraints.next_tokens(TermProgress(), 10) == {5, 6}  # after "¿" or "(": either
    assert constraints.next_tokens(constraints.advance(TermProgress(), 6), 10) == set()  # met
