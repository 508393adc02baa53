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
    assert not trained & {english for english, _ in bench_long.HELD_OUT}
    assert bench_long.CONSTRUCTIONS["spaces"] == ()


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
