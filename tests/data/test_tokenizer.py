"""The BPE tokenizers: fixed special ids, no BOS or EOS added, odd Unicode and special-token
strings round-trip, NFC, separate vocabularies, every Tatoeba test sentence."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from helpers.corpus import (
    PAIRS,
    TATOEBA_TEST,
    TATOEBA_TRAIN,
    needs_shared,
)
from mt.config import TokenizerConfig
from mt.config_file import load_config
from mt.data import tokenizer as tok
from mt.data.corpus import normalize
from mt.data.prepare import prepare
from mt.data.scan import clean
from mt.data.tokenizer import SPECIAL_TOKENS

ODD = [
    "Emoji: 😀👍🏽 👨‍👩‍👧 🇪🇸!",
    "CJK: 東京は日本の首都です。 한국어 텍스트",
    "Combining marks that stay decomposed: q\u0303 x\u0301\u0323 a\u20dd",
    "Greek, Cyrillic, Arabic: αβγ Привет مرحبا",
    "Symbols: € £ ¥ © ® ™ ° ± × ÷ ∑ ∞ ≠ ≤ ½ – — … « » „ “ ” ‘ ’",
    "Zero-width joiner\u200d and non-joiner\u200c and soft\u00adhyphen",
    "Math 𝔸𝕓𝕔 and old italic 𐌀𐌁",
    "ÀÉÎÕÜ ñÑ çÇ ¿¡",
    "x",
]

try:
    from mt.data.tokenizer import BOS, EOS, PAD
except ImportError:  # the model module may not exist yet: the ids are fixed by the tokenizer
    PAD, BOS, EOS = 0, 1, 2


@pytest.fixture(scope="module")
def tiny_tokenizer() -> Tokenizer:
    texts = [text for pair in clean(PAIRS, {}) for text in pair]
    return tok.train_tokenizer(texts, TokenizerConfig(vocab_size=400, min_frequency=1))


def test_special_tokens_have_fixed_ids(tiny_tokenizer: Tokenizer):
    assert SPECIAL_TOKENS == ("<pad>", "<s>", "</s>", "<unk>")
    assert [tiny_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert tuple(tiny_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS[:3]) == (PAD, BOS, EOS)
    assert tiny_tokenizer.get_vocab_size() <= 400


def test_encode_adds_no_bos_or_eos(tiny_tokenizer: Tokenizer):
    ids = tok.encode(tiny_tokenizer, ["Hola."])[0]
    assert ids and not set(ids) & {0, 1, 2, 3}


def test_odd_unicode_round_trips_without_unk(tiny_tokenizer: Tokenizer):
    texts = [normalize(t) for t in ODD]
    ids = tok.encode(tiny_tokenizer, texts)
    assert not any(3 in seq for seq in ids)
    assert tok.detokenize(tiny_tokenizer, ids) == texts
    assert tok.round_trip_rate(tiny_tokenizer, texts) == 1.0


def test_special_token_strings_in_text_are_plain_text(tiny_tokenizer: Tokenizer):
    texts = ["Write <s> and </s>, not <pad> or <unk>."]
    for tokenizer in (tiny_tokenizer, Tokenizer.from_str(tiny_tokenizer.to_str())):  # reloaded
        ids = tok.encode(tokenizer, texts)
        assert not set(ids[0]) & {0, 1, 2, 3}
        assert tok.detokenize(tokenizer, ids) == texts


def test_saved_tokenizer_opens_with_the_tokenizers_library(tiny_tokenizer: Tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(tiny_tokenizer.to_str(pretty=True), encoding="utf-8")
    loaded = Tokenizer.from_file(str(path))
    texts = [normalize(t) for t in ODD] + [a for a, _ in PAIRS[:10]]
    assert tok.encode(loaded, texts) == tok.encode(tiny_tokenizer, texts)
    assert [loaded.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert loaded.decode(loaded.encode("¿Dónde está?").ids) == "¿Dónde está?"


def test_a_word_has_the_same_tokens_opening_a_text_as_inside_one(tiny_tokenizer: Tokenizer):
    """A space is put before the text (not after an added token inside it) and taken off
    again: a clause after a junction reads as the sentences the model learned from."""
    tokenizer = tok.reserve_tags(Tokenizer.from_str(tiny_tokenizer.to_str()), ["⦅1⦆"])
    assert tok.prepends_space(tokenizer)
    alone, inside = tok.encode(tokenizer, ["the house is big.", "I saw it; the house is big."])
    assert inside[-len(alone) :] == alone
    glued = ["⦅1⦆.", "a⦅1⦆b", "⦅1⦆ is big.", "¿Dónde?"]
    assert tok.detokenize(tokenizer, tok.encode(tokenizer, glued)) == glued
    assert tok.encode(tokenizer, ["⦅1⦆."])[0] == [
        tokenizer.token_to_id("⦅1⦆"),
        *tok.encode_going_on(tokenizer, ["."])[0],
    ]
    # a text that goes on a sentence: as the sentence's own tokens, glued or after a space
    whole = tok.encode(tokenizer, ["Tom came, but the house is big."])[0]
    going_on = tok.encode_going_on(tokenizer, [", but the house is big.", " the house is big.", ""])
    assert whole[-len(going_on[0]) :] == going_on[0] and whole[-len(going_on[1]) :] == going_on[1]
    assert (
        going_on[2] == [] and going_on[0] != tok.encode(tokenizer, [", but the house is big."])[0]
    )
    # encoded a space-led chunk at a time, as prepare does, a text gets its whole ids
    texts = [a for a, _ in PAIRS[:20]]
    encoder = tok.PieceEncoder(tokenizer)
    whole_ids = list(itertools.chain(*tok.encode(tokenizer, texts)))
    assert encoder.by_chunk and encoder.encode(texts)[0].tolist() == whole_ids


def test_the_tokenizer_normalises_to_nfc(tiny_tokenizer: Tokenizer):
    assert tok.encode(tiny_tokenizer, ["cafe\u0301"]) == tok.encode(tiny_tokenizer, ["caf\u00e9"])


def test_separate_vocabularies_write_two_files(corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    config = load_config(
        "tiny",
        [
            f"data.files.train={corpus_file}",
            f"run.dir={run_dir}",
            "tokenizer.joint=false",
            "tokenizer.vocab_size=300",
            "data.valid_size=5",
            "data.test_size=5",
        ],
    )
    prepared = prepare(config)
    en, es = run_dir / "tokenizer.en.json", run_dir / "tokenizer.es.json"
    assert en.is_file() and es.is_file() and not (run_dir / "tokenizer.json").exists()
    en_tok, es_tok = Tokenizer.from_file(str(en)), Tokenizer.from_file(str(es))
    assert en_tok.get_vocab() != es_tok.get_vocab()
    assert en_tok.to_str() == prepared.src_tokenizer.to_str()
    assert es_tok.to_str() == prepared.tgt_tokenizer.to_str()
    again = prepare(config)
    assert again.reused and again.stats == prepared.stats


def read_jsonl_gz(path: Path, limit: int | None = None) -> list[tuple[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = (json.loads(line) for line in itertools.islice(f, limit))
        return [(r["en"], r["es"]) for r in rows]


@needs_shared
def test_every_tatoeba_test_sentence_round_trips():
    train = clean(read_jsonl_gz(TATOEBA_TRAIN, 20_000), {})
    tokenizer = tok.train_tokenizer(
        [text for pair in train for text in pair], TokenizerConfig(vocab_size=4000)
    )
    texts = [text for pair in clean(read_jsonl_gz(TATOEBA_TEST), {}) for text in pair]
    assert len(texts) > 3000
    ids = tok.encode(tokenizer, texts)
    assert not any(3 in seq for seq in ids)  # no <unk>, ever
    back = tok.detokenize(tokenizer, ids)
    assert [t for t, b in zip(texts, back) if t != b] == []
    assert tok.round_trip_rate(tokenizer, texts) == 1.0
