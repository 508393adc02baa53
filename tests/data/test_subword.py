"""Subword models: unigram beside BPE, and seeded BPE-dropout for training batches."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.corpus import HELD_OUT, PAIRS, TATOEBA_TRAIN, prepare_args, resegmented
from mt import checkpoint
from mt.config import TokenizerConfig
from mt.config_file import load_config
from mt.data import tokenizer as tok
from mt.data.corpus import normalize
from mt.data.dropout import BpeDropout, dropout_epochs
from mt.data.prepare import prepare
from mt.data.store import Sentences
from mt.training.trainer import train


def texts_for_test(limit: int) -> list[str]:
    """Tatoeba's Spanish when the shared data is there (real text), else the tiny corpus."""
    if TATOEBA_TRAIN.is_file():
        with gzip.open(TATOEBA_TRAIN, "rt", encoding="utf-8") as f:
            return [normalize(json.loads(line)["es"]) for line, _ in zip(f, range(limit))]
    return [normalize(t) for _, t in PAIRS if t.strip()]


def test_bpe_dropout_is_seeded_round_trips_and_without_dropout_is_encode():
    texts = [*texts_for_test(3000), "a </s> b  😀\tñ", "x" * 40]
    tokenizer = tok.train_tokenizer(texts, TokenizerConfig(vocab_size=1000, min_frequency=2))
    ids = tok.encode(tokenizer, texts)
    same = resegmented(BpeDropout(tokenizer, 0.0), ids, 0)
    assert [x.tolist() for x in same] == ids  # the merges, applied as `tokenizers` does
    dropout = BpeDropout(tokenizer, 0.1)
    a, b, c = (resegmented(dropout, ids, seed) for seed in (1, 1, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))  # seeded: a resume redoes it
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert (
        tok.detokenize(tokenizer, a) == tok.detokenize(tokenizer, ids) == texts
    )  # round trip exact
    grown = sum(map(len, a)) / sum(map(len, ids))
    assert 1.05 < grown < 1.5  # shorter pieces, about as the paper's p = 0.1 gives


def test_bpe_dropout_streamed_in_small_runs_gives_the_same_ids_and_keeps_a_tag(monkeypatch):
    texts = texts_for_test(600)
    tags = ["<bt>", "<b>"]  # one the start of the other: the longer is matched first
    tokenizer = tok.reserve_tags(
        tok.train_tokenizer(texts, TokenizerConfig(vocab_size=500, min_frequency=2)), tags
    )
    tagged = [f"{tags[i % 3 % 2]} {t}" if i % 3 else t for i, t in enumerate(texts)]
    tagged.append("x<bt>y <b>z")  # a tag inside text is the tag too, as `tokenizers` reads it
    ids = tok.encode(tokenizer, tagged)
    assert [x.tolist() for x in resegmented(BpeDropout(tokenizer, 0.0), ids, 0)] == ids
    dropped = resegmented(BpeDropout(tokenizer, 0.1), ids, 3)
    assert tok.detokenize(tokenizer, dropped) == tok.detokenize(tokenizer, ids)
    tag_ids = {tokenizer.token_to_id(t) for t in tags}
    kept = [[i for i in x.tolist() if i in tag_ids] for x in dropped]
    assert (
        kept == [[i for i in x if i in tag_ids] for x in ids]
        and sum(map(len, kept)) > len(texts) // 2
    )
    monkeypatch.setattr(BpeDropout, "CHUNK", 50)  # words merged together: other draws
    chunked = resegmented(BpeDropout(tokenizer, 0.1), ids, 3)
    monkeypatch.setattr(BpeDropout, "GROUP", 7)  # runs of sentences that cut the chunks
    small = resegmented(BpeDropout(tokenizer, 0.1), ids, 3)
    assert [x.tolist() for x in small] == [x.tolist() for x in chunked]


def test_unigram_trains_round_trips_and_a_vocabulary_too_small_is_refused(
    corpus_file, tmp_path, cli_main
):
    run = tmp_path / "uni"
    args = prepare_args(corpus_file, run, "--set", "tokenizer.model=unigram", "--json")
    code, out, err = cli_main(*args)
    assert code == 0, err
    stats = json.loads(out)
    assert stats["round_trip"]["src"] == stats["round_trip"]["tgt"] == 1.0
    saved = json.loads((run / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "Unigram" and saved["model"]["vocab"][:4][0][0] == "<pad>"
    small = tmp_path / "small"
    args = prepare_args(corpus_file, small, "--set", "tokenizer.model=unigram")
    code, _, err = cli_main(*args, "--set", "tokenizer.vocab_size=260")
    assert code == 2 and "tokenizer.vocab_size: 260 is too small for the unigram alphabet" in err
    assert len(err.splitlines()) == 1 and not small.exists()
    code, _, err = cli_main(*args, "--set", "tokenizer.dropout=0.1")
    assert code == 2 and "BPE-dropout needs tokenizer.model bpe" in err


def test_training_with_bpe_dropout_resumes_exactly(corpus_file, tmp_path):
    def config(run: Path, steps: int):
        return load_config(
            "tiny.yaml",
            [
                f"data.files.train={corpus_file}",
                f"run.dir={run}",
                f"data.valid_size={HELD_OUT}",
                f"data.test_size={HELD_OUT}",
                "train.max_tokens=200",  # 5 batches an epoch: 8 updates cross into epoch 1
                "train.eval_every=100",
                "train.save_every=100",
                "tokenizer.dropout=0.1",
                f"train.max_steps={steps}",
            ],
        )

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(config(straight, 8))
    train(config(resumed, 6))
    result = train(config(resumed, 8))
    assert result["epoch"] >= 1
    a, b = (
        checkpoint.load_weights(r / "checkpoints" / "last" / "model.safetensors")[0]
        for r in (straight, resumed)
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_piece_encoder_gives_encode_ids_for_bpe_and_unigram_tags_and_a_full_memo(monkeypatch):
    tricky = [
        "It's 12,5 km... don't—\"Sí\" ¿no?",
        "<bt> tagged, and <bt>inside x<bt>y",
        "a </s> b <s> 😀 ñ e\u0301 Ünïcödé 中文字 'll 've '",
        "",
        "'s",
        "123abc 4.5 $%& x" * 3,
    ]
    texts = [normalize(t) for t in [*texts_for_test(2000), *tricky]]
    for model in ("bpe", "unigram"):
        cfg = TokenizerConfig(vocab_size=600, min_frequency=2, model=model)
        tokenizer = tok.reserve_tags(tok.train_tokenizer(texts, cfg), ["<bt>"])
        encoder = tok.PieceEncoder(tokenizer)
        assert encoder.by_chunk
        want = tok.flat_ids(tok.encode(tokenizer, texts))
        monkeypatch.setattr(tok.PieceEncoder, "CAPACITY", 300)  # the memo starts again
        for part in (texts[:1000], texts[1000:], texts[1000:]):
            got, lengths = encoder.encode(part)
            ids, n = tok.flat_ids(tok.encode(tokenizer, part))
            assert np.array_equal(got, ids) and np.array_equal(lengths, n)
        last = set("\n".join(texts[1000:]).replace(" ", "\n ").split("\n"))
        assert 0 < len(encoder.memo) <= max(300, len(last))  # one call's chunks at most
        monkeypatch.undo()
        got = tok.PieceEncoder(tokenizer).encode(texts)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    tagged = encoder.encode(["<bt> tagged"])[0]
    assert tagged[0] == tokenizer.token_to_id("<bt>")
    with pytest.raises(ValueError, match="line break"):
        encoder.encode(["two\nlines"])
    spaced = tok.reserve_tags(tok.train_tokenizer(texts, cfg), ["<b t>"])
    assert not tok.PieceEncoder(spaced).by_chunk  # a token with a space: sentence by sentence


def test_an_epoch_of_bpe_dropout_is_the_whole_split_resegmented_in_memory(corpus_file, tmp_path):
    config = load_config(
        "tiny.yaml",
        [
            f"data.files.train={corpus_file}",
            f"run.dir={tmp_path / 'run'}",
            "data.max_length=9",
            f"data.valid_size={HELD_OUT}",
            f"data.test_size={HELD_OUT}",
            "tokenizer.dropout=0.3",
        ],
    )
    prepared = prepare(config)
    train_split = prepared.splits["train"]
    epoch = dropout_epochs(prepared, config)
    for number in (0, 1):
        got = epoch(number)
        rng = np.random.default_rng([config.run.seed, number, 1])
        src, tgt = (
            resegmented(BpeDropout(tokenizer, 0.3), sentences, rng)  # one stream: src, then tgt
            for tokenizer, sentences in (
                (prepared.src_tokenizer, train_split.src),
                (prepared.tgt_tokenizer, train_split.tgt),
            )
        )
        fits = (src.lengths() <= 9) & (tgt.lengths() <= 9)
        assert 0 < fits.sum() < len(fits)  # some pairs keep their usual ids
        for side, dropped in (("src", src), ("tgt", tgt)):
            want = Sentences.mixed(dropped, getattr(train_split, side), fits)
            assert [x.tolist() for x in getattr(got, side)] == [x.tolist() for x in want]
        assert got.corpora == train_split.corpora
    assert len(list((tmp_path / "run" / "data").glob("dropout-*/*"))) == 1  # the last epoch's
