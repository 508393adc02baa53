"""A source longer than the model carries, cut into pieces and joined back
(mt.decoding.pieces), and the length a model carries, measured on it and kept with its
weights (mt.decoding.trained)."""

from __future__ import annotations

from itertools import chain

import pytest

from mt.config import Config, TokenizerConfig
from mt.data import tokenizer as tok
from mt.decoding.pieces import breaks, even_cut, source_pieces, split_at_breaks
from mt.decoding.trained import CARRIED_BLEU, DEFAULT_RATIO, Trained, measure_carried

SENTENCES = ["Tom runs, and Mary sleeps.", "The dog eats; my father sings.", "I paid 1,000."]


@pytest.fixture(scope="module")
def english():
    return tok.train_tokenizer(SENTENCES * 20, TokenizerConfig(vocab_size=300))


def test_a_long_input_is_cut_after_every_clause_of_its_strongest_kind():
    ids = list(range(20))
    strength = [0 if i % 2 else 1 for i in range(20)]
    strength[0], strength[1], strength[5], strength[9], strength[14] = 0, 2, 2, 4, 3
    # over: after the sentence end (9), then in what is still too long after its ; (14)
    pieces = split_at_breaks(ids, 10, strength)
    assert [p[0] for p in pieces] == [0, 9, 14] and list(chain(*pieces)) == ids
    # commas only: after every one, but never a piece under a third of the limit (1)
    commas = [2 if s >= 2 else s for s in strength]
    assert [p[0] for p in split_at_breaks(ids, 10, commas)] == [0, 5, 9, 14]
    assert split_at_breaks(ids, 20, strength) == [ids]  # what fits stays whole
    # a clause longer than the limit: cut again at its best breaks
    strength[5] = strength[9] = strength[14] = 1
    pieces = split_at_breaks(ids, 7, strength)
    assert all(len(p) <= 7 for p in pieces) and list(chain(*pieces)) == ids


def test_a_clause_too_long_is_cut_at_its_best_breaks_near_an_even_cut():
    ids = list(range(20))
    strength = [0 if i % 2 else 1 for i in range(20)]
    strength[0], strength[5], strength[9], strength[14] = 0, 2, 4, 2
    pieces = even_cut(ids, 10, strength)
    assert [p[0] for p in pieces] == [0, 9, 14] and list(chain(*pieces)) == ids
    assert even_cut(ids, 20, strength) == [ids]
    words = [0 if i % 2 else 1 for i in range(20)]
    words[0] = 0
    pieces = even_cut(ids, 8, words)
    assert all(len(p) <= 8 for p in pieces) and list(chain(*pieces)) == ids
    assert all(words[p[0]] for p in pieces[1:])  # between words
    pieces = even_cut(ids, 7, [0] * 20)  # no break at all: windows all the same
    assert all(len(p) <= 7 for p in pieces) and list(chain(*pieces)) == ids


def test_breaks_are_after_clauses_before_words_never_inside_a_number(english):
    ids = tok.encode(english, ["Tom runs, and Mary sleeps; I paid 1,000."])[0]
    strength = breaks(english, ids)
    after = [tok.detokenize(english, [ids[p:]])[0] for p in range(len(ids)) if strength[p] >= 2]
    assert after == ["and Mary sleeps; I paid 1,000.", "I paid 1,000."]


def test_a_source_that_fits_is_one_piece_a_longer_one_its_clauses_joined_back(english):
    pieces = source_pieces(english, SENTENCES, 20)
    assert pieces.counts == [1, 1, 1]
    long = "Tom runs, and Mary sleeps; the dog eats, my father sings."
    # 23 tokens in pieces of 14: after the ; then, as 9 and 14 fit, no further; each piece
    # without the space before it
    pieces = source_pieces(english, [long, "I paid 1,000."], 14)
    given = tok.detokenize(english, pieces.ids)
    assert given[0] == "Tom runs, and Mary sleeps;" and given[2] == SENTENCES[2]
    assert given[1].strip() == "the dog eats, my father sings."  # stripped where it still fits
    assert pieces.counts == [2, 1]
    found = [[("A", -1.0)], [("B", -3.0)], [("D", 0.0)]]
    assert pieces.joined(found) == [[("A B", -2.0)], [("D", 0.0)]]
    # pieces of 8: each of those after its commas too
    pieces = source_pieces(english, [long], 8)
    given = [t.strip() for t in tok.detokenize(english, pieces.ids)]
    assert given == ["Tom runs,", "and Mary sleeps;", "the dog eats,", "my father sings."]


def test_what_a_model_carries_comes_from_its_metadata_else_its_longest_examples():
    config = Config()
    config.data.max_length = 64
    assert Trained.of(None, config) == Trained(64, DEFAULT_RATIO)
    assert Trained.of('{"carried": 32, "ratio": 1.1}', config) == Trained(32, 1.1)
    assert Trained.of(Trained(16, 0.9).saved(), config) == Trained(16, 0.9)
    assert Trained.of("not json", config) == Trained(64, DEFAULT_RATIO)


def test_the_length_carried_is_the_longest_whose_joined_lines_score_as_one_by_one():
    sources = [f"s{i}" for i in range(8)]
    references = [f"r{i}" for i in range(8)]
    asked = []

    def bleu(hyps, refs):  # the share of lines translated right, in points
        return 100 * sum(h == r for h, r in zip(hyps, refs)) / len(refs)

    def model_of(carries):  # translates a line right when it has at most `carries` tokens
        def translate(lines, limit):
            asked.append(limit)
            return [
                line.replace("s", "r") if 4 * len(line.split()) <= carries else "?"
                for line in lines
            ]

        return translate

    singles = references  # one by one: all right
    lengths = [3] * 8  # k sentences a line: 4k - 1 tokens
    # from the longest sentence (3) up, doubling: lines of one sentence are not asked for
    assert measure_carried(model_of(64), sources, references, singles, lengths, 64, bleu) == 64
    assert asked == [12, 24, 48, 64]
    asked.clear()
    # lines of 3 sentences (12 tokens) lost: the length before, 6
    assert measure_carried(model_of(8), sources, references, singles, lengths, 64, bleu) == 6
    assert asked == [12]
    # lines of one sentence, none cut: the singles themselves
    assert measure_carried(model_of(0), sources, references, singles, [3] * 8, 3, bleu) == 3

    def up_to(carries):  # every line right at lengths up to `carries`, none past it
        def translate(lines, limit):
            asked.append(limit)
            return [x.replace("s", "r") if limit <= carries else "?" for x in lines]

        return translate

    # never under the longest sentence (20), which the model was trained on whole: a model
    # that carries nothing joined is tried there alone
    uneven = [3] * 7 + [20]
    asked.clear()
    assert measure_carried(up_to(0), sources, references, singles, uneven, 64, bleu) == 20
    assert asked == [20]
    asked.clear()
    assert measure_carried(up_to(40), sources, references, singles, uneven, 64, bleu) == 40
    assert asked == [20, 40, 64]
    assert CARRIED_BLEU == 2.0
