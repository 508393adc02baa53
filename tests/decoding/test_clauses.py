"""A long sentence cut into clauses, each given to the model as a sentence and put back
(mt.decoding.pieces, mt.decoding.clauses), and the connectives a training corpus has
(mt.decoding.trained): where the cuts fall, what the model is given, what comes back."""

from __future__ import annotations

import json
from itertools import chain, product

import numpy as np
import pytest

from mt.config import Config, TokenizerConfig
from mt.data import tokenizer as tok
from mt.data.store import SIDES, Sentences, SplitWriter
from mt.decoding import trained
from mt.decoding.clauses import present
from mt.decoding.pieces import breaks, even_cut, source_pieces, split_at_breaks
from mt.decoding.trained import Trained, connectives

SUBJECTS = [("Tom", "Tom"), ("Mary", "Mary"), ("the dog", "el perro"), ("my father", "mi padre")]
VERBS = [("runs", "corre"), ("sleeps", "duerme"), ("eats", "come"), ("sings", "canta")]
JOINS = {"and": "y", "but": "pero"}


def clause(subject: str, verb: str) -> str:
    return f"{subject} {verb}"


def corpus() -> list[tuple[str, str]]:
    """Clauses joined by ", and" / ", but", and "please" after a comma as often as first."""
    pairs = []
    for (a, a_es), (v, v_es), (b, b_es), (w, w_es) in product(SUBJECTS, VERBS, SUBJECTS, VERBS):
        for join, join_es in JOINS.items():
            pairs.append(
                (
                    f"{clause(a, v).capitalize()}, {join} {clause(b, w)}.",
                    f"{clause(a_es, v_es).capitalize()}, {join_es} {clause(b_es, w_es)}.",
                )
            )
        pairs.append((f"{clause(a, v).capitalize()}, please.", f"{a_es} {v_es}, por favor."))
        pairs.append((f"Please, {clause(a, v)}.", f"Por favor, {a_es} {v_es}."))
    return pairs


@pytest.fixture(scope="module")
def tokenizers():
    pairs = corpus()
    cfg = TokenizerConfig(vocab_size=500)
    return tuple(tok.train_tokenizer([p[side] for p in pairs], cfg) for side in (0, 1))


def store(tokenizer, texts: list[str], lead: list[int] = ()) -> Sentences:
    return Sentences.of([[*lead, *x] for x in tok.encode(tokenizer, texts)])


@pytest.mark.parametrize("lead", [0, 1])
def test_connectives_lead_clauses_never_sentences_and_have_one_translation(tokenizers, lead):
    pairs = corpus()
    src = store(tokenizers[0], [s for s, _ in pairs], [1] * lead)  # a language's token first
    tgt = store(tokenizers[1], [t for _, t in pairs])
    # "please" follows a comma as often, but starts as many sentences
    assert connectives(src, tgt, tokenizers, lead) == JOINS


def test_a_corpus_with_too_few_clauses_has_no_connectives(tokenizers):
    pairs = corpus()[:3]
    src = store(tokenizers[0], [s for s, _ in pairs])
    tgt = store(tokenizers[1], [t for _, t in pairs])
    assert connectives(src, tgt, tokenizers) == {}
    assert connectives(Sentences.of([]), Sentences.of([]), tokenizers) == {}


def test_connectives_are_the_same_in_a_corpus_thirty_times_as_large(tokenizers):
    # "sings" follows a comma in one pair: too rare a share of the words after commas to
    # be a connective, however often a larger corpus repeats it
    pairs = [*corpus(), ("Tom runs, sings.", "Tom corre, canta.")] * 30
    src = store(tokenizers[0], [s for s, _ in pairs])
    tgt = store(tokenizers[1], [t for _, t in pairs])
    assert connectives(src, tgt, tokenizers) == JOINS


def test_connectives_are_counted_on_pairs_from_all_over_a_large_store(tokenizers, monkeypatch):
    # a store of both directions holds one direction's chunk, then the other's: a sample of
    # its first pairs would see one language only
    pairs = [("Please, Tom runs.", "Por favor, Tom corre.")] * 1000 + corpus()
    src = store(tokenizers[0], [s for s, _ in pairs])
    tgt = store(tokenizers[1], [t for _, t in pairs])
    monkeypatch.setattr(trained, "CONNECTIVE_PAIRS", 1000)
    assert connectives(src, tgt, tokenizers) == JOINS


def test_a_piece_is_given_as_a_sentence_and_its_translation_put_back():
    # the first piece of a sentence: only its clause mark goes, and comes back
    given, dress = present("Tom runs,", True, False, JOINS)
    assert given == "Tom runs" and dress.restore("Tom corre.") == "Tom corre,"
    assert dress.restore("Tom corre") == "Tom corre,"
    # a clause led by a connective: given without it, its translation put first
    given, dress = present(" and the dog sleeps;", False, False, JOINS)
    assert given == "The dog sleeps"
    assert dress.restore("El perro duerme.") == "y el perro duerme;"
    # the last piece keeps its stop; a name carried over and "I" keep their capitals
    given, dress = present("but Tom sings!", False, True, JOINS)
    assert given == "Tom sings!" and dress.restore("Tom canta!") == "pero Tom canta!"
    assert present("so I left.", False, True, {})[1].restore("I left.") == "I left."
    # a question's first word after its opening mark
    given, dress = present("where is it?", False, True, JOINS)
    assert given == "Where is it?" and dress.restore("¿Dónde está?") == "¿dónde está?"
    # a first piece is never changed at its start; an empty translation stays empty
    assert present("and so on,", True, False, JOINS)[0] == "and so on"
    assert present("and it", False, True, JOINS)[1].restore("") == "y"
    assert present("it,", False, False, JOINS)[1].restore(" ") == ""


def test_a_long_input_is_cut_after_every_clause_one_that_fits_before_connectives():
    ids = list(range(20))
    strength = [0 if i % 2 else 1 for i in range(20)]
    strength[0], strength[1], strength[5], strength[9], strength[14] = 0, 2, 2, 4, 3
    none = [False] * 20
    # over: after the sentence end (9), then in what is still too long after its ; (14)
    pieces = split_at_breaks(ids, 10, strength, none)
    assert [p[0] for p in pieces] == [0, 9, 14] and list(chain(*pieces)) == ids
    # commas only: after every one, but never a piece under a third of the limit (1)
    commas = [2 if s >= 2 else s for s in strength]
    assert [p[0] for p in split_at_breaks(ids, 10, commas, none)] == [0, 5, 9, 14]
    # that fits: whole, unless a connective leads a clause (the comma before 1: too early)
    assert split_at_breaks(ids, 20, strength, none) == [ids]
    led = [i in (1, 9) for i in range(20)]
    assert [p[0] for p in split_at_breaks(ids, 20, strength, led)] == [0, 9]
    # a clause longer than the limit: cut again at its best breaks
    strength[5] = strength[9] = strength[14] = 1
    pieces = split_at_breaks(ids, 7, strength, none)
    assert all(len(p) <= 7 for p in pieces) and list(chain(*pieces)) == ids


def test_a_clause_too_long_is_cut_at_its_best_breaks_near_an_even_cut():
    ids = list(range(20))
    # a sentence end before 9, a comma before 5 and 14, word starts every other token
    strength = [0 if i % 2 else 1 for i in range(20)]
    strength[0], strength[5], strength[9], strength[14] = 0, 2, 4, 2
    pieces = even_cut(ids, 10, strength)
    assert [p[0] for p in pieces] == [0, 9, 14] and list(chain(*pieces)) == ids
    assert even_cut(ids, 20, strength) == [ids]
    # no punctuation: a window between words, near an even cut
    words = [0 if i % 2 else 1 for i in range(20)]
    words[0] = 0
    pieces = even_cut(ids, 8, words)
    assert all(len(p) <= 8 for p in pieces) and list(chain(*pieces)) == ids
    assert all(words[p[0]] for p in pieces[1:])
    # no break at all: windows all the same
    pieces = even_cut(ids, 7, [0] * 20)
    assert all(len(p) <= 7 for p in pieces) and list(chain(*pieces)) == ids


def test_breaks_are_after_clauses_before_words_and_connectives_whole_words(tokenizers):
    en = tokenizers[0]
    ids = tok.encode(en, ["Tom runs, and Mary sleeps and my father eats, 1,000 android."])[0]
    texts = [tok.detokenize(en, [[i]])[0] for i in ids]
    strength, connective = breaks(en, ids, JOINS)
    clauses = ["".join(texts[p:]) for p in range(len(ids)) if strength[p] >= 2]
    assert clauses == [" and Mary sleeps and my father eats, 1,000 android.", " 1,000 android."]
    assert [texts[p] for p in range(len(ids)) if connective[p]] == [" and"]  # not "and Mary"


def test_source_pieces_are_the_clauses_given_as_sentences_and_joined_back(tokenizers):
    en = tokenizers[0]
    texts = ["Tom runs, and Mary sleeps.", "Tom runs and Mary sleeps.", "Tom runs, please."]
    pieces = source_pieces(en, texts, 9, "", JOINS)  # no piece under 3 tokens
    assert pieces.counts == [2, 1, 1]
    given = tok.detokenize(en, pieces.ids)
    assert given == ["Tom runs", "Mary sleeps.", texts[1], texts[2]]
    found = [[("Tom corre.", -1.0)], [("Mary duerme.", -3.0)], [("x", 0.0)], [("y", 0.0)]]
    assert pieces.joined(found) == [
        [("Tom corre, y Mary duerme.", -2.0)],
        [("x", 0.0)],
        [("y", 0.0)],
    ]
    # a text of two sentences: cut after the first, whose next piece starts a sentence
    pieces = source_pieces(en, ["Tom runs. The dog sleeps, and my father eats."], 9, "", JOINS)
    assert tok.detokenize(en, pieces.ids) == ["Tom runs.", "The dog sleeps", "My father eats."]
    found = [[("Tom corre.", 0.0)], [("El perro duerme.", 0.0)], [("Mi padre come.", 0.0)]]
    assert pieces.joined(found)[0][0][0] == "Tom corre. El perro duerme, y mi padre come."
    # without connectives a sentence that fits stays whole; one too long is cut at clauses
    assert source_pieces(en, texts, 9).counts == [1, 1, 1]
    long = ", ".join(["Tom runs", "Mary sleeps", "the dog eats", "my father sings"]) + "."
    pieces = source_pieces(en, [long], 10)
    assert tok.detokenize(en, pieces.ids) == [
        "Tom runs",
        "Mary sleeps",
        "The dog eats",
        "My father sings.",
    ]


def test_a_run_folder_gives_its_translator_the_connectives_of_its_training_store(
    tokenizers, tmp_path
):
    pairs = corpus()
    data = tmp_path / "data"
    data.mkdir()
    writer = SplitWriter(data, "train", np.dtype(np.uint16))
    sides = {}
    for side, tokenizer in zip(SIDES, tokenizers):
        ids = tok.encode(tokenizer, [p[SIDES.index(side)] for p in pairs])
        sides[side] = np.array(list(chain(*ids))), np.array([len(x) for x in ids])
    writer.append(sides)
    meta = {"stats": {"tokens": {"train": {"src": 10, "tgt": 10}}}, "store": {}}
    meta["store"]["train"] = writer.close()
    (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert Trained.of(tmp_path, Config(), tokenizers).connectives == JOINS
    (data / "train.tgt.tokens").write_bytes(b"")  # damaged: none, and the ratio as said
    trained = Trained.of(tmp_path, Config(), tokenizers)
    assert trained.connectives == {} and trained.ratio == 1.0
