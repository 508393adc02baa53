"""Pieces the model can carry (decode.piece_tokens: through a Translator, the length measured
on it, mt.decoding.trained) and the coverage guard
(mt.decoding.coverage): a translation much shorter than its source predicts is translated
again in smaller pieces, once, and flagged if still short."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

from mt.cli.decoding import _print_translations
from mt.config import Config, DecodeConfig, ModelConfig
from mt.config_checks import check_config
from mt.data import tokenizer as tok
from mt.decoding.coverage import LEAST_SOURCE_TOKENS, Coverage
from mt.decoding.engine import Translator, open_translator
from mt.decoding.pieces import piece_limit
from mt.decoding.trained import DEFAULT_RATIO, Trained
from mt.errors import ConfigError
from mt.text import Layouts, Translations, translate_texts_nbest


def words() -> Tokenizer:
    """A tokenizer of one token a word: lengths in words."""
    tokenizer = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return tokenizer


class Dropping(Translator):
    """A translator that keeps only the first 10 words of a piece of more than 32 words, as
    a model turns a sentence longer than it was trained on into a short one; its pieces: the
    words, decode.piece_tokens at a time, each call's recorded in `pieces`."""

    engine = "fake"

    def __init__(self, ratio: float = 1.0) -> None:
        super().__init__(Config(), "cpu", Path("fake"), (words(), words()))
        self.__dict__["trained"] = Trained(64, ratio)  # as its metadata would say
        self.pieces: list[int] = []

    def _pieces_nbest(self, texts, decode, progress, prefixes, constraints):
        self.pieces.append(decode.piece_tokens)
        size, out = decode.piece_tokens, []
        for text in texts:
            split = text.upper().split()
            pieces = [split[i : i + size] for i in range(0, len(split), size)]
            out.append(
                [(" ".join(w for p in pieces for w in p[: 10 if len(p) > 32 else size]), -1.0)]
            )
        return out

    def _with(self, config):
        raise AssertionError("a model of one direction is never turned")

    def _decode(self, *args):
        raise AssertionError("pieces are decoded by _pieces_nbest")

    def _metadata(self):
        return {}

    @property
    def run_dir(self) -> Path:
        return Path("fake")

    def _described(self):
        return "fake", {}, None


def sentence(count: int) -> str:
    return " ".join(f"w{i}" for i in range(count))


def test_pieces_are_the_carried_length_within_the_positions():
    model = ModelConfig(max_positions=256)
    assert piece_limit(model, DecodeConfig()) == 255  # 0: the positions alone
    assert piece_limit(model, DecodeConfig(piece_tokens=64)) == 64
    assert piece_limit(model, DecodeConfig(piece_tokens=1000)) == 255
    translator = Dropping()
    assert translator.decoding(None).piece_tokens == 64  # through a Translator: carried
    assert translator.decoding(DecodeConfig(piece_tokens=32)).piece_tokens == 32


def test_short_is_judged_on_long_sources_only_against_the_ratio():
    coverage = Coverage(1.2, words(), words())
    long, short = sentence(LEAST_SOURCE_TOKENS), sentence(LEAST_SOURCE_TOKENS - 1)
    half = math.ceil(0.5 * 1.2 * LEAST_SOURCE_TOKENS)  # the shortest not short
    sources = coverage.source_lengths([long, long, short, long])
    assert sources == [LEAST_SOURCE_TOKENS] * 2 + [LEAST_SOURCE_TOKENS - 1, LEAST_SOURCE_TOKENS]
    found = coverage.short(sources, [sentence(half - 1), sentence(half), "", ""], 0.5)
    assert found == [True, False, False, True]
    assert coverage.short(sources[:1], [""], 0) == [False]  # decode.coverage 0: no guard


def test_a_short_translation_is_translated_again_in_half_pieces_once(capsys):
    translator = Dropping()
    long, fine = sentence(60), sentence(30)
    found = translator.translate_nbest([long, fine])
    # 60 words in one piece of 64 came back as 10: again in pieces of 30, which carry them
    assert [hyps[0][0] for hyps in found.nbest] == [long.upper(), fine.upper()]
    assert found.short == [False, False]  # whole the second time
    assert translator.pieces == [64, 30]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 translation(s) much shorter" in err and "0 still" in err


def test_one_still_short_is_flagged_per_text_and_on_stderr(capsys):
    translator = Dropping(ratio=3.0)  # predicts three words out a word in: never met
    texts = ["Hi.", f"{sentence(60)}. And more."]
    found = translate_texts_nbest(translator, texts)
    assert found.short == [False, True]
    layouts = Layouts(texts)  # the verdict of each sentence comes with its translation
    assert translator.translate_nbest(layouts.sentences).short == [False, True, False]
    capsys.readouterr()
    _print_translations(translator, texts, True, None, None, None)
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    assert "warning: line 2: its translation is much shorter than the source predicts" in err
    assert "line 1" not in err and "1 still short" in err
    _print_translations(Dropping(), texts, True, None, None, None)  # whole the second time
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "0 still short" in err and "warning: line" not in err
    assert translate_texts_nbest(Dropping(), texts).short == [False, False]


class Measured:
    """The tokenizer passes of the guard's measure (Dropping tokenizes nothing else): how
    many texts each encoded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.passes: list[int] = []
        encode = tok.encode

        def counted(tokenizer, texts, *args, **options):
            self.passes.append(len(texts))
            return encode(tokenizer, texts, *args, **options)

        monkeypatch.setattr(tok, "encode", counted)


def test_each_sentence_and_translation_is_measured_once(monkeypatch, capsys):
    measured = Measured(monkeypatch)
    texts = ["Hi. Hello.", f"{sentence(60)}. And more.", "Bye."]  # 5 sentences
    _print_translations(Dropping(ratio=3.0), texts, True, None, None, None)
    # the sources, their first translations, then the one whose second try was kept
    assert measured.passes == [5, 5, 1]
    err = capsys.readouterr().err
    assert "line 2" in err and "line 1" not in err and "line 3" not in err
    measured.passes.clear()
    assert translate_texts_nbest(Dropping(), [texts[0], sentence(40)]).short == [False, False]
    assert measured.passes == [3, 3]  # none short: none tried again nor measured again


@pytest.mark.parametrize("ratio, short", [(3.0, [False, True]), (1.0, [False, False])])
def test_translate_s_short_is_the_guard_s_verdict(monkeypatch, ratio, short):
    pytest.importorskip("starlette")
    from helpers.serving import call, serving, wait_ready

    texts = ["Hi. Hello.", f"{sentence(60)}. And more."]  # 4 sentences, the third retried
    with serving(lambda: Dropping(ratio)) as (address, _):
        wait_ready(address)
        measured = Measured(monkeypatch)  # after the warm-up
        status, answer, _ = call(address, "/translate", {"q": texts, "source": "en"})
        assert status == 200 and answer["short"] == short
        assert measured.passes == [4, 4, 1]  # kept, whole or not: measured once more
        status, answer, _ = call(address, "/translate", {"q": texts[1], "source": "en"})
        assert status == 200 and answer["short"] is short[1]
        assert answer["translatedText"].startswith("W0 W1")


@pytest.mark.parametrize(
    "key, value", [("coverage", 1.0), ("coverage", -0.1), ("piece_tokens", -1)]
)
def test_guard_and_pieces_settings_are_checked(key, value):
    config = Config()
    config.decode = dataclasses.replace(config.decode, **{key: value})
    with pytest.raises(ConfigError, match=f"decode.{key}"):
        check_config(config, "test", check_files=False)


def test_an_imported_marian_model_carries_its_own_512_positions(marian_small):
    translator = open_translator(marian_small, device="cpu")
    assert translator.config.model.max_positions == 512
    assert translator.decoding(None).piece_tokens == 511
    assert translator.coverage.ratio == DEFAULT_RATIO  # no training corpus to measure


def test_translate_s_answer_says_which_texts_are_short():
    pytest.importorskip("starlette")
    from mt.serve.api import answer

    found = Translations([[("Hola.", -1.0)], [("Sí.", -2.0)]], [False, True])
    info = {"model": "run", "step": 1}
    listed = answer(found, False, None, info, 5, 0.1)
    assert listed["translatedText"] == ["Hola.", "Sí."] and listed["short"] == [False, True]
    one = found.part(1, 2)
    assert answer(one, True, None, info, 5, 0.1)["short"] is True
