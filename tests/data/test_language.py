"""Language identification (mt.data.language) and data.filter_language in `mt prepare`."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import (
    PAIRS,
    TATOEBA_TEST,
    TATOEBA_TRAIN,
    needs_shared,
    prepare_args,
    write_jsonl,
)
from mt.config import Config, DataConfig
from mt.data import language
from mt.data.prepare import CACHE_VERSION, fingerprint
from mt.errors import ConfigError

pytest.importorskip("py3langid")

_spec = importlib.util.spec_from_file_location(
    "bench_langid", Path(__file__).resolve().parents[2] / "scripts" / "bench_langid.py"
)
bench_langid = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_langid)

SPANISH = "¿Dónde está la estación de tren más cercana?"
ENGLISH = "Where is the nearest train station?"


def test_it_ranks_the_languages_it_is_given_with_confidences_that_sum_to_one():
    ident = language.identifier(("en", "es"))
    for text, want in ((SPANISH, "es"), (ENGLISH, "en")):
        ranked = ident.rank(text)
        assert ranked[0][0] == want
        assert {code for code, _ in ranked} == {"en", "es"}
        assert sum(c for _, c in ranked) == pytest.approx(1.0)
        assert ranked[0][1] > 0.9
    # nothing to go by: a tie, which the first language given wins
    assert language.identifier(("es", "en")).rank("!!!") == [("es", 0.5), ("en", 0.5)]
    assert language.identifier(("en", "es")).rank("!!!") == [("en", 0.5), ("es", 0.5)]
    # a text of two languages: the one most of its characters are in, and by how much
    mixed = f"{ENGLISH} Me gustan mucho los gatos negros y los perros pequeños de mi vecino."
    assert [code for code, _ in ident.rank(mixed)] == ["es", "en"]
    assert 0.55 < ident.rank(mixed)[0][1] < 0.8
    mixed = f"{SPANISH}\nI like the black cats and the small dogs of my neighbour so much."
    assert [code for code, _ in ident.rank(mixed)] == ["en", "es"]


def test_an_unknown_language_is_one_clear_line():
    with pytest.raises(ConfigError, match="'xx' is not a language the identifier knows"):
        language.identifier(("en", "xx"))
    with pytest.raises(ConfigError, match=r"^data\.filter_language: 'xx' is not a language"):
        language.filter_languages(DataConfig(filter_language=True, tgt_lang="xx"))
    assert language.filter_languages(DataConfig()) is None
    assert language.filter_languages(DataConfig(filter_language=True)) == ("en", "es")


def test_prepare_refuses_a_language_it_cannot_identify_before_any_work(cli_main, tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", PAIRS, tgt="xx")
    args = prepare_args(corpus, tmp_path / "run", "--set", "data.filter_language=true")
    code, out, err = cli_main(*args, "--set", "data.tgt_lang=xx")
    assert (code, out) == (2, "")
    assert err == "mt: error: data.filter_language: 'xx' is not a language the identifier knows\n"
    assert not (tmp_path / "run").exists()


def test_the_filter_drops_copies_and_sides_in_the_other_language():
    src = [ENGLISH, SPANISH, ENGLISH, "Tom.", "I am very happy today."]
    tgt = [SPANISH, SPANISH, "Where is the  nearest TRAIN station?", "Tom.", "Hoy estoy muy feliz."]
    want = [language.KEPT, language.COPY, language.COPY, language.COPY, language.KEPT]
    assert language.filter_pairs(src, tgt, ("en", "es")).tolist() == want
    english_target = language.filter_pairs([ENGLISH], ["I want to go home now."], ("en", "es"))
    spanish_source = language.filter_pairs([SPANISH], ["I want to go home now."], ("en", "es"))
    assert english_target.tolist() == spanish_source.tolist() == [language.WRONG_LANGUAGE]
    # a back-translation corpus's tag before its sources is not their text
    tagged = [f"<bt> {s}" for s in src]
    assert language.filter_pairs(tagged, tgt, ("en", "es")).tolist() == want


def test_prepare_drops_and_counts_them_and_the_key_is_in_the_fingerprint(cli, tmp_path):
    bad = [
        ("Me gustan mucho los gatos negros.", "Me gustan mucho los gatos negros."),  # copy
        ("¿Dónde está la biblioteca de la ciudad?", "¿Dónde está la biblioteca?"),  # es source
        ("The weather is very nice today.", "The weather is nice in the city today."),
    ]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", PAIRS + bad)
    held = write_jsonl(tmp_path / "held.jsonl", PAIRS[:4])
    files = ["--set", f"data.files.valid={held}", "--set", f"data.files.test={held}"]

    def prepare(run: str, *extra: str) -> dict:
        result = cli(*prepare_args(corpus, tmp_path / run), *files, *extra, "--json")
        assert result.exit_code == 0, (result.exception, result.stderr)
        return json.loads(result.stdout)

    off = prepare("off")
    on = prepare("on", "--set", "data.filter_language=true")
    assert "language" not in off["dropped"] and "copy" not in off["dropped"]
    assert (on["dropped"]["language"], on["dropped"]["copy"]) == (2, 1)
    assert on["pairs"]["train"] == off["pairs"]["train"] - 3
    assert on["fingerprint"] != off["fingerprint"]
    result = cli(
        *prepare_args(corpus, tmp_path / "on"), *files, "--set", "data.filter_language=true"
    )
    assert "dropped: empty 2, duplicate 1, language 2, copy 1, too_long 0, ratio 0" in result.stdout


@pytest.mark.parametrize(
    "key", ["data.filter_language", "data.both_directions", "tokenizer.placeholders"]
)
def test_a_key_added_later_off_keeps_the_fingerprint_of_configs_from_before_it(key):
    """Runs prepared before data.filter_language, data.both_directions and
    tokenizer.placeholders existed reuse their data; any of them on is another store."""
    config = Config()
    before = dataclasses.asdict(config.data)
    del before["filter_language"], before["both_directions"], before["workers"]
    tokenizer = {k: v for k, v in dataclasses.asdict(config.tokenizer).items() if k != "dropout"}
    del tokenizer["model"], tokenizer["placeholders"]
    inputs = {"version": CACHE_VERSION, "seed": config.run.seed, "data": before}
    inputs["tokenizer"] = tokenizer
    old = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    assert fingerprint(config) == old
    section, name = key.split(".")
    setattr(getattr(config, section), name, 16 if name == "placeholders" else True)
    assert fingerprint(config) != old


@needs_shared
def test_on_tatoeba_it_identifies_99_percent_and_the_filter_drops_corrupted_pairs():
    rows = bench_langid.read_rows(TATOEBA_TEST)[:500]
    ident = language.identifier(("en", "es"))
    right = sum(ident.rank(r[lang])[0][0] == lang for r in rows for lang in ("en", "es"))
    assert right / (2 * len(rows)) >= 0.99
    train = bench_langid.read_rows(TATOEBA_TRAIN)[::40]  # ~2,800 pairs
    corrupted, kinds = bench_langid.corrupt(train, 0.05, seed=1)
    assert np.count_nonzero(kinds) == int(len(train) * 0.05)
    out = bench_langid.filter_outcome(corrupted, kinds)
    caught = out["spanish_source"]["dropped"] + out["copy"]["dropped"]
    assert caught >= 0.95 * np.count_nonzero(kinds)
    assert out["clean"]["dropped"] <= 0.005 * out["clean"]["pairs"]
