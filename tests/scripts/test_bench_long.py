"""scripts/bench_long.py: the policies it compares (pN: pieces of a percentile of the
training sources' lengths) and its table, with only the policies a run chose."""

from __future__ import annotations

import importlib.util

from helpers.corpus import ROOT

spec = importlib.util.spec_from_file_location("bench_long", ROOT / "scripts" / "bench_long.py")
bench_long = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_long)


def scored_row(per_line: int, policies: list[str]) -> dict:
    row = {"per_line": per_line, "lines": 16 // per_line, "one_by_one": {"bleu": 40, "length": 1}}
    for policy in policies:
        row[policy] = {"bleu": 30.0, "length": 0.9}
        row[f"short_{policy}"] = 0
    return row


def result(policies: list[str]) -> dict:
    return {
        "model": "m", "beam": 5, "length_ratio": 1.0, "carried": 17, "max_length": 64,
        "joined": [scored_row(n, policies) for n in (1, 2)],
        "longest": {"sentences": 64, "words": 410, **dict.fromkeys(policies, 0.9)},
    }  # fmt: skip


def test_a_policy_pn_is_pieces_of_a_percentile():
    assert bench_long.percentile_of("p98") == 98
    assert bench_long.percentile_of("p99.5") == 99.5
    assert bench_long.percentile_of("guard") is None
    assert bench_long.percentile_of("p") is None
    assert bench_long.percentile_of("p9.9.9") is None


def test_the_table_has_a_column_a_policy_chosen_and_the_firing_of_those_run():
    chosen = {**result(["today", "guard", "p95"]), "policies": ["today", "guard", "p95"]}
    chosen |= {"piece_tokens": {"p95": 14}, "split": "valid"}
    lines = bench_long.render(chosen)
    header = next(line for line in lines if line.startswith("| per line"))
    columns = "one by one | today | pieces of 17 + guard | pieces of 14 (p95) + guard"
    assert header == f"| per line | lines | {columns} |"
    assert "Tatoeba valid sentences" in lines[2]
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert all(row.count("|") == header.count("|") for row in rows)
    # a result from before --policies: every policy, both firing columns
    every = bench_long.render(result(list(bench_long.POLICIES)))
    header = next(line for line in every if line.startswith("| per line"))
    fires = "fires (still short) at 64 | fires (still short) at 17"
    assert header.endswith(f"| pieces of 17 + guard | {fires} |")


def test_joined_sentences_start_inside_as_the_corpus_writes_their_first_word_there():
    inside = bench_long.Inside(["Yes, I saw the cat and Tom.", "Then the dog ran, ¿qué?"])
    sentences = ["Tom left.", "The cat ran!", "I sat?", "¿Qué pasa?"]
    line = bench_long.joined(sentences, "and", inside)
    assert line == "Tom left, the cat ran, I sat, and ¿qué pasa?"
    assert bench_long.joined(sentences, "and") == "Tom left, The cat ran, I sat, and ¿Qué pasa?"
    assert bench_long.joined(["One."], "and", inside) == "One."
