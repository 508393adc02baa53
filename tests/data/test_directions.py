"""One model for both directions (data.both_directions): prepare stores every pair both ways,
each source led by the token of the language it goes to; validation translates each
direction with its own token; a model opened to decode is turned to the direction
decode.target_language asks, refused in one line for a language it does not translate into;
`mt evaluate` on the run's own split reads the pairs of that direction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import run_mt, tiny_config
from mt.config_file import load_config
from mt.data import tokenizer as tok
from mt.data.directions import oriented, turned
from mt.data.prepare import prepare
from mt.decoding.engine import open_translator
from mt.decoding.evaluate import evaluation_set
from mt.errors import ConfigError
from mt.training import validation
from mt.training.trainer import train


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model of both directions, trained a few updates."""
    tmp = tmp_path_factory.mktemp("both")
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    train(tiny_config(corpus, tmp / "run", "train.max_steps=30", "data.both_directions=true"))
    return tmp / "run"


def test_prepare_stores_each_pair_both_ways_led_by_the_language_it_goes_to(
    tmp_path: Path, run: Path
):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", PAIRS)
    one_way = prepare(tiny_config(corpus, tmp_path / "one"))
    both = prepare(load_config(run / "config.yaml"))
    tokenizer = both.src_tokenizer
    into_es, into_en = (tokenizer.token_to_id(t) for t in (">>es<<", ">>en<<"))
    assert None not in (into_es, into_en)
    forward, train = len(one_way.splits["train"]), both.splits["train"]
    assert len(train) == 2 * forward
    for i in range(forward):
        src, tgt = train.src[i], train.tgt[i]
        back_src, back_tgt = train.src[forward + i], train.tgt[forward + i]
        assert (src[0], back_src[0]) == (into_es, into_en)
        assert np.array_equal(back_src[1:], tgt) and np.array_equal(back_tgt, src[1:])
    for name in ("valid", "test"):
        split, held = both.splits[name], len(one_way.splits[name])
        assert split.targets == ["es"] * held + ["en"] * held
        assert split.src_text[held:] == split.tgt_text[:held]
        ids = tok.encode(tokenizer, split.src_text[held:][:1])[0]
        assert list(split.src[held]) == [into_en, *ids]
    assert set(one_way.splits["valid"].targets) == {""}  # a one-way run's: its one direction


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tokenizer.joint=false"], "data.both_directions: needs tokenizer.joint: true"),
        (["data.files.train=[{path: X, tag: <bt>}]"], "a tagged corpus .* reads one way"),
    ],
)
def test_what_both_directions_cannot_go_with_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("tatoeba_cpu_both.yaml", overrides)


def test_the_shipped_config_is_the_recipe_both_ways_in_both_budgets():
    both, one = load_config("tatoeba_cpu_both.yaml"), load_config("tatoeba_cpu.yaml")
    assert both.data.both_directions and not one.data.both_directions
    assert both.train.max_minutes == 2 * one.train.max_minutes
    assert (both.model, both.tokenizer) == (one.model, one.tokenizer)


def test_oriented_turns_the_languages_to_the_target_and_refuses_others():
    config = load_config("tatoeba_cpu_both.yaml")
    forward = oriented(config)
    assert (forward.data.src_lang, forward.data.tgt_lang, forward.decode.target_language) == (
        "en",
        "es",
        "es",
    )
    backward = turned(forward)
    assert (backward.data.src_lang, backward.data.tgt_lang) == ("es", "en")
    assert backward.decode.target_language == "en"
    assert oriented(backward).data.src_lang == "es"  # already turned: as it is
    assert turned(backward).data.src_lang == "en"
    config.decode.target_language = "fr"
    with pytest.raises(ConfigError, match=r"decode\.target_language: fr: this model translates"):
        oriented(config)
    one = load_config("tatoeba_cpu.yaml")
    assert oriented(one) is one and turned(one) is None


def test_validation_translates_each_direction_with_its_token(run: Path, monkeypatch):
    from mt.decoding.engine import Translator

    seen, real = [], Translator.translate_nbest

    def recording(self, texts, decode=None, *args, **kwargs):
        seen.append((decode.target_language, list(texts)))
        return real(self, texts, decode, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_nbest", recording)
    config = load_config(run / "config.yaml", ["train.eval_sentences=0"])  # all of them
    data = prepare(config, write=False)
    translator = open_translator(run, device="cpu")
    record, _ = validation.validation_record(
        translator.model, data, config, translator.device, translator.trained
    )
    valid, half = data.splits["valid"], len(data.splits["valid"]) // 2
    # each direction's sentences, then the lines the length carried is measured on
    assert seen[0] == ("es", valid.src_text[:half])
    assert ("en", valid.tgt_text[:half]) in seen
    assert {language for language, _ in seen} == {"es", "en"}
    assert record["sentences"] == len(valid)


def test_a_model_of_both_directions_decodes_into_the_language_asked(run: Path):
    forward = open_translator(run, device="cpu")
    backward = open_translator(run, device="cpu", decode=["decode.target_language=en"])
    assert (forward.config.data.src_lang, backward.config.data.src_lang) == ("en", "es")
    turned_one = forward.turned()
    assert turned_one.model is forward.model  # the same weights, not a second copy
    assert turned_one.translate(["Hola."]) == backward.translate(["Hola."])
    assert backward.turned().translate(["Hello."]) == forward.translate(["Hello."])
    # each direction's own half of the run's test split
    _, sources, references = evaluation_set(run, backward.config, "test", None, None, None)
    _, forward_sources, forward_references = evaluation_set(
        run, forward.config, "test", None, None, None
    )
    assert (sources, references) == (forward_references, forward_sources)


def test_mt_translate_refuses_a_language_the_model_does_not_translate_into(run: Path):
    done = run_mt(
        "translate", "--checkpoint", str(run), "Hello.", "--set", "decode.target_language=fr"
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mt: error: decode.target_language: fr: this model translates into es or en"
    ]
