"""Training examples made of pairs (mt.data.examples): joined as writers join sentences, spans
as placeholders, every pair once an epoch, the same examples from the same seed, a resumed run
the batches of an uninterrupted one."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from mt.config import Config, TokenizerConfig
from mt.data import tokenizer as tok
from mt.data.batches import Batches, Position
from mt.data.examples import ExampleMaker, Settings
from mt.data.joins import CLAUSES, KINDS, LINKING_ADVERBS, clause_joins, spanish_conjunction
from mt.data.spans import MARKER
from mt.data.store import Split

NAMES = ["Tom", "Mary", "Boston"]
SENTENCES = [  # (English, Spanish), names written on both sides as they are
    ("Tom is here.", "Tom está aquí."),
    ("The cat sleeps.", "El gato duerme."),
    ("I saw Mary in Boston.", "Vi a Mary en Boston."),
    ("We eat at 10:30 with Tom.", "Comemos a las 10:30 con Tom."),
    ("Is it raining?", "¿Está lloviendo?"),
    ("It costs 25 dollars.", "Cuesta 25 dólares."),
    ("Write to ana@example.com today.", "Escribe hoy a ana@example.com."),
    ("The dog ran to Tom.", "El perro corrió hacia Tom."),
    ("Mary reads a book.", "Mary lee un libro."),
    ("Hello {{name}}, you have %d messages.", "Hola {{name}}, tienes %d mensajes."),
    ("Go!", "¡Ve!"),
    ("I think so.", "Eso creo."),
]


@pytest.fixture(scope="module")
def corpus():
    """A split of the sentences many times over, tokenizers with 8 placeholders, and a
    config that joins and masks."""
    pairs = SENTENCES * 40
    cfg = TokenizerConfig(vocab_size=600, placeholders=8, min_frequency=1)
    tokenizers = tok.train_tokenizers([s for s, _ in pairs], [t for _, t in pairs], cfg)
    split = Split(*(tok.encode(t, side) for t, side in zip(tokenizers, zip(*pairs))))
    config = Config()
    config.tokenizer = cfg
    config.data.max_length = 64
    config.train.join, config.train.join_most, config.train.placeholders = 0.6, 4, 0.5
    return split, tokenizers, config


def made(corpus, seed=0, **train) -> tuple[list[str], list[str], Split]:
    split, tokenizers, config = corpus
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, **train))
    maker = ExampleMaker(Settings.of(config), split, tokenizers, config)
    examples = maker.make(split, np.arange(len(split)), np.random.default_rng(seed))
    sides = [
        tok.detokenize(t, [s[i] for i in range(len(s))])
        for t, s in zip(tokenizers, (examples.src, examples.tgt))
    ]
    return sides[0], sides[1], examples


def sentences_of(text: str) -> list[str]:
    return [x.strip() for x in re.findall(r".*?[.!?](?=\s|$)", text)]


def test_sentences_joined_one_after_another_are_the_pairs_themselves(corpus):
    src, tgt, _ = made(corpus, join_clauses=0.0, placeholders=0.0)
    english, spanish = ([p[k] for p in SENTENCES] for k in (0, 1))
    assert sum(len(sentences_of(s)) for s in src) == len(SENTENCES) * 40  # each pair once
    assert any(len(sentences_of(s)) > 1 for s in src)
    for s, t in zip(src, tgt):
        assert all(x.strip() in english for x in sentences_of(s)), s
        assert all(x.strip() in spanish for x in sentences_of(t)), t
        # the k-th sentence of one side is the k-th pair's other side
        pairs = [(x.strip(), y.strip()) for x, y in zip(sentences_of(s), sentences_of(t))]
        assert all(p in SENTENCES for p in pairs)


def test_clauses_join_with_a_junction_lowercased_after_it_but_names_kept(corpus):
    src, tgt, _ = made(corpus, join_clauses=1.0, placeholders=0.0)
    junctions = {j for j, _ in CLAUSES}
    joined = [(s, t) for s, t in zip(src, tgt) if any(j + " " in s for j in junctions)]
    assert len(joined) > 20
    for s, t in joined:
        assert "Tom" in s or "tom" not in s  # a name keeps its capital
        assert ", the " in s or ", The " not in s  # a sentence's first word does not
        assert "mary" not in s and "mary" not in t
    assert any(", and the cat sleeps" in s or " and the cat sleeps" in s for s, _ in joined)
    assert any(", y el gato duerme" in t or " y el gato duerme" in t for _, t in joined)


def test_each_kind_of_junction_is_drawn_its_share_and_each_of_its_entries_drawn(corpus):
    """A semicolon is a junction's alone or with a linking adverb: 1 in 4 of them alone, as
    the kinds' shares say, though the adverbs are 17 entries against the semicolon's one."""
    for joins in (clause_joins("en", "es"), clause_joins("es", "en")):
        assert sum(j.share for j in joins) == pytest.approx(1.0)
        for kind, share in KINDS:
            said = [j for j in joins if j.words[j.languages.index("en")] in dict(kind)]
            assert sum(j.share for j in said) == pytest.approx(share)
    adverbs = [english[1:] + " " for english, _ in LINKING_ADVERBS]
    alone = linking = 0
    seen = set()
    for seed in range(5):
        src, _, _ = made(corpus, seed, join=1.0, join_most=2, join_clauses=1.0, placeholders=0.0)
        for line in src:
            for after in line.split(";")[1:]:
                said = [a for a in adverbs if after.startswith(a)]
                linking, alone = linking + bool(said), alone + (not said)
                seen.update(said)
    assert alone + linking > 150
    assert abs(linking / (alone + linking) - 3 / 4) < 0.1  # 17 / 18 were each entry drawn alike
    assert len(seen) == len(LINKING_ADVERBS)


def inside(sentence: str) -> str:
    """A sentence as it goes on after a junction: its first word lowercased unless a name."""
    word = re.search(r"\w+", sentence)
    if word[0] in NAMES or word[0] == "I":
        return sentence
    return sentence[: word.start()] + sentence[word.start()].lower() + sentence[word.start() + 1 :]


def test_two_pairs_join_as_one_clause_said_alike_on_both_sides_after_a_full_stop(corpus):
    src, tgt, _ = made(corpus, join=1.0, join_most=2, join_clauses=1.0, placeholders=0.0)
    joins = clause_joins("en", "es")
    clauses = 0
    for s, t in zip(src, tgt):
        found = [
            (a, b)
            for a in SENTENCES
            for b in SENTENCES
            if s
            in (f"{a[0]} {b[0]}", *(a[0][:-1] + j.words[0] + " " + inside(b[0]) for j in joins))
        ]
        assert found or s in [x for x, _ in SENTENCES], s
        if not found:
            continue
        (a, b), *_ = found
        if s == f"{a[0]} {b[0]}":  # not a clause: the first does not end in a full stop
            assert not (a[0].endswith(".") and a[1].endswith(".")) and t == f"{a[1]} {b[1]}"
            continue
        clauses += 1
        (j,) = [j for j in joins if s == a[0][:-1] + j.words[0] + " " + inside(b[0])]
        assert t == a[1][:-1] + j.said(1, inside(b[1])) + " " + inside(b[1]), (s, t)
    assert clauses > 100


def test_lowered_starts_give_pairs_as_they_go_on_inside_a_sentence(corpus):
    """train.lowered_starts: that share of the pairs starts lowercased on both sides, names
    and "I" kept, the rest of each side as it is; the others as stored."""
    src, tgt, _ = made(corpus, join=0.0, placeholders=0.0, lowered_starts=1.0)
    assert sorted(zip(src, tgt)) == sorted((inside(s), inside(t)) for s, t in SENTENCES * 40)
    assert ("is it raining?", "¿está lloviendo?") in zip(src, tgt)
    src, tgt, _ = made(corpus, join=0.0, placeholders=0.0, lowered_starts=0.5)
    pairs = set(zip(src, tgt))
    lowered = sum(p not in SENTENCES for p in zip(src, tgt))
    assert 150 < lowered < 250 and ("the cat sleeps.", "el gato duerme.") in pairs
    assert ("The cat sleeps.", "El gato duerme.") in pairs


def test_lowered_starts_encode_the_first_word_again_and_keep_the_rest_of_the_ids(corpus):
    """Only a lowered pair's first word is encoded again: the rest keeps the ids it was
    given, as BPE-dropout segmented it (here one character a token)."""
    _, tokenizers, config = corpus

    def by_character(t, text):
        return [i for character in text for i in tok.encode_going_on(t, [character])[0]]

    stored = Split(
        *([by_character(t, x) for x in side] for t, side in zip(tokenizers, zip(*SENTENCES)))
    )
    src, tgt, examples = made(
        (stored, tokenizers, config), join=0.0, placeholders=0.0, lowered_starts=1.0
    )
    for k, (texts, t) in enumerate(zip((src, tgt), tokenizers)):
        for n, text in enumerate(texts):
            first, space, rest = text.partition(" ")
            expected = tok.encode(t, [first])[0] + by_character(t, space + rest)
            assert list((examples.src, examples.tgt)[k][n]) == expected, text


def test_a_clause_joined_example_given_as_a_piece_is_cut_as_a_long_sentence_is(corpus):
    """train.join_pieces: an example of two pairs joined as clauses is given, where its
    junction has a comma or semicolon, as the clause before it with that mark, or the clause
    after it starting with the junction's words; each side as the other, and each piece as
    mt.decoding.pieces cuts the joined sentence (the same ids)."""
    from mt.decoding.pieces import source_pieces

    src, tgt, examples = made(
        corpus, join=1.0, join_most=2, join_clauses=1.0, join_pieces=1.0, placeholders=0.0
    )
    joins = clause_joins("en", "es")
    english = corpus[1][0]
    ends, starts = 0, 0
    for n, (s, t) in enumerate(zip(src, tgt)):
        for a in SENTENCES:
            for j in joins:
                mark, _ = j.cut(0, "x")
                if mark and s == a[0][:-1] + mark:  # the clause before, its mark kept
                    assert t == a[1][:-1] + j.cut(1, "x")[0], (s, t)
                    ends += 1
        for b in SENTENCES:
            for j in joins:
                after = (j.cut(0, inside(b[0]))[1] + " " + inside(b[0])).strip()
                if j.cut(0, "x")[0] and s == after:  # the clause after, its junction first
                    spanish = inside(b[1])
                    assert t == (j.cut(1, spanish)[1] + " " + spanish).strip(), (s, t)
                    starts += 1
                    if "," not in b[0]:  # cut where the junction is, as training did
                        before = "The dog ran to Tom and I saw Mary in Boston"
                        whole = f"{before}{j.words[0]} {inside(b[0])}"
                        limit = len(tok.encode(english, [whole])[0]) - 1
                        cut = source_pieces(english, [whole], limit)
                        assert list(examples.src[n]) in cut.ids, (whole, s)
    assert ends > 20 and starts > 20
    # whole joined clauses still come: those whose junction has no comma to cut after
    assert any(re.search(r"\w (and|but|because) \w", x) for x in src)


def test_spanish_says_y_as_e_and_o_as_u_before_their_sounds():
    assert [spanish_conjunction("y", w) for w in ("Iglesias", "hijos", "hielo", "casa")] == [
        "e",
        "e",
        "y",
        "y",
    ]
    assert [spanish_conjunction("o", w) for w in ("otro", "hoy", "¿Ocho?", "siete")] == [
        "u",
        "u",
        "u",
        "o",
    ]
    joins = {j.words: j for j in clause_joins("en", "es")}
    assert joins[(", and", ", y")].said(1, "invierno") == ", e"
    assert joins[(", and", ", y")].said(0, "invierno") == ", and"
    spanish_first = {j.words: j for j in clause_joins("es", "en")}
    assert spanish_first[(", y", ", and")].said(0, "Isabel") == ", e"
    assert clause_joins("en", "fr") == []


def test_examples_stay_within_the_longest_a_side(corpus):
    _, _, examples = made(corpus, join=1.0, join_most=8)
    assert examples.src.lengths().max() <= 64 and examples.tgt.lengths().max() <= 64
    assert examples.src.lengths().max() > 20  # joined up to the limit


def test_shared_spans_become_placeholders_distinct_in_an_example(corpus):
    src, tgt, _ = made(corpus, placeholders=1.0, join_clauses=0.0)
    masked = [(s, t) for s, t in zip(src, tgt) if "⦅" in s]
    assert masked
    for s, t in masked:
        numbers = MARKER.findall(s)
        assert len(numbers) == len(set(numbers))  # distinct in the example
        assert sorted(numbers) == sorted(MARKER.findall(t))  # the same on both sides
        assert all(1 <= int(k) <= 8 for k in numbers)
    for span in ("10:30", "25", "ana@example.com", "{{name}}", "%d", *NAMES):  # all, at 1.0
        assert not any(span in s or span in t for s, t in zip(src, tgt)), span
    assert any("⦅" in s and "10:30" not in s and "las ⦅" in t for s, t in masked)
    assert len({k for s, _ in masked for k in MARKER.findall(s)}) > 4  # numbered at random


def test_the_same_seed_makes_the_same_examples_and_another_others(corpus):
    assert made(corpus, seed=3)[:2] == made(corpus, seed=3)[:2]
    assert made(corpus, seed=3)[:2] != made(corpus, seed=4)[:2]


def test_a_resumed_run_gets_the_examples_of_an_uninterrupted_one(corpus):
    split, tokenizers, config = corpus
    maker = ExampleMaker(Settings.of(config), split, tokenizers, config)
    going = Batches(split, 300, 7, Position(), examples=maker)
    for _ in range(5):
        next(going)
    saved = dataclasses.replace(going.position)
    expected = [next(going) for _ in range(40)]  # into the next epoch
    resumed = Batches(split, 300, 7, saved, examples=maker)
    for a, b in zip(expected, (next(resumed) for _ in range(40))):
        assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3]))
