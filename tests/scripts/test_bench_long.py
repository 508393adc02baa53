"""scripts/bench_long.py: the constructions it joins sentences in, held out from training, the
one-by-one translations joined alike, and the spans it puts in and counts."""

from __future__ import annotations

import importlib.util

from helpers.corpus import ROOT
from mt.data.joins import CLAUSES

spec = importlib.util.spec_from_file_location("bench_long", ROOT / "scripts" / "bench_long.py")
bench_long = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_long)

PAIRS = [
    ("Tom left.", "Tom se fue."),
    ("The cat ran.", "El gato corrió."),
    ("Is it late?", "¿Es tarde?"),
    ("I sat.", "Me senté."),
]


def test_the_held_out_junctions_are_none_that_training_joins_with():
    trained = {english for english, _ in CLAUSES}
    assert not trained & {english for english, *_ in bench_long.HELD_OUT}
    # said otherwise: the same English, other Spanish words
    assert all(len(set(j)) == 3 for j in bench_long.HELD_OUT)
    assert bench_long.CONSTRUCTIONS["spaces"] == ()
    # the taught construction: every junction of training that has words, and no other
    assert {j[0] for j in bench_long.TAUGHT} == trained - {";"}


def test_a_junction_joins_two_sentences_that_end_in_full_stops_on_both_sides():
    inside = bench_long.Inside(["Yes, I saw the cat and Tom.", "Sí, vi el gato y a Tom."])
    lines = bench_long.joined_lines(PAIRS, 4, ((", and yet", ", y sin embargo"),), (inside,) * 2, 1)
    ((source, reference, chosen),) = lines
    assert source == "Tom left, and yet the cat ran, and yet is it late? I sat."
    assert (
        reference == "Tom se fue, y sin embargo el gato corrió, y sin embargo ¿es tarde? Me senté."
    )
    assert chosen[2] is None  # after a question: a space
    # the translations one by one, joined alike
    singles = ["Tom partió.", "El gato huyó.", "¿Es tarde?", "Me senté."]
    assert bench_long.joined(singles, chosen, 1, inside) == (
        "Tom partió, y sin embargo el gato huyó, y sin embargo ¿es tarde? Me senté."
    )
    # clause by clause: each clause after a junction a sentence opened by its words, its
    # translation put after the junction's comma
    assert bench_long.clause_sentences([p[0] for p in PAIRS], chosen, inside) == [
        "Tom left.",
        "And yet the cat ran.",
        "And yet is it late?",
        "I sat.",
    ]
    clauses = ["Tom partió.", "Y sin embargo el gato huyó.", "Y aún así, ¿es tarde?", "Me senté."]
    assert bench_long.joined(clauses, bench_long.punctuation_of(chosen), 1, inside) == (
        "Tom partió, y sin embargo el gato huyó, y aún así, ¿es tarde? Me senté."
    )
    # one by one, the junctions said otherwise: the same translations, other Spanish words
    otherwise = (", and yet", ", y sin embargo", ", pero aun así")
    (said,) = bench_long.said_otherwise([[otherwise, None]])
    assert bench_long.joined(singles[:3], said, 1, inside) == (
        "Tom partió, pero aun así el gato huyó. ¿Es tarde?"
    )
    # Spanish says "y" as "e" before the sound i, as training does
    spanish = bench_long.joined(["Llegó.", "Iba a llover."], [(", and", ", y")], 1, inside)
    assert spanish == "Llegó, e iba a llover."
    spaces = bench_long.joined_lines(PAIRS, 2, (), (inside,) * 2, 1)
    assert [s for s, _, _ in spaces] == ["Tom left. The cat ran.", "Is it late? I sat."]


def test_a_span_put_in_counts_when_it_comes_back_once_and_whole():
    inside = bench_long.Inside([])
    lines = bench_long.span_lines(PAIRS * 3, (inside,) * 2, 1)
    kinds = [k for k, *_ in bench_long.SPAN_KINDS]
    assert len(lines) == 12 and len({line[2] for line in lines}) > 6
    for (source, reference, span), kind in zip(lines, kinds * 2):
        assert span in source and span in reference, kind
    assert bench_long.carried_once("10:30", "A las 10:30, sí.")
    assert not bench_long.carried_once("10", "A las 10:30 y 10.")
    assert not bench_long.carried_once("3", "Son 13.")
    assert not bench_long.carried_once("%d", "Hay %d y %d.")


def test_a_result_renders_for_the_report_every_policy_a_column():
    row = {"lines": 2, "one_by_one": {"bleu": 30.0}, "model": {"bleu": 20.5}}
    result = {
        "model": "run",
        "beam": 5,
        "split": "test",
        "joined": {"semicolons": [{**row, "per_line": 2, "rules": {"bleu": 25.25}}]},
        "longest": {"sentences": 3, "words": 40, "model": 0.95},
        "spans": {"sentences": 4, "model": {"kept": 0.995, "bleu": 40.0}},
        "whole": {"lines": 9, "model": {"bleu": 27.1}},
    }
    lines = bench_long.render(result)
    assert "| 2 | 30.00 | 20.50 | 25.25 |" in lines
    assert "| per line | one by one | model | rules |" in lines
    assert "The 40-word line: words out per word in: model 0.950." in lines
    assert "Spans (model): 99.50% kept verbatim exactly once, BLEU 40.00." in lines
    assert "whole: 9 lines, BLEU model 27.10." in lines


def test_lines_are_scored_cased_and_lowercased_and_capitals_after_semicolons_counted():
    found = bench_long.scored(["Llegué; Lo siento; ¿Vienes?"], ["Llegué; lo siento; ¿vienes?"])
    assert found["bleu_lowercased"] == 100.0 and found["bleu"] < 100.0
    assert found["capitals_after_semicolons"] == 2
    assert bench_long.capitals_after_semicolons(["a; b; 3 c; Tom", "x;Y"]) == 1
