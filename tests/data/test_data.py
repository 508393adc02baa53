"""Corpus loading in every format, cleaning, splitting, batching, collation and tokenizers."""

from __future__ import annotations

import csv
import gzip
import json
import random
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.corpus import (
    EMPTY_PAIRS,
    PAIRS,
    dedup,
    epoch_plan,
    load_raw,
    needs_shared,
    write_jsonl,
)
from mt.config_file import load_config
from mt.data import tokenizer as tok
from mt.data.batches import Batches, Position, collate, token_batches
from mt.data.corpus import normalize, read_pairs_jsonl
from mt.data.encode import length_filter
from mt.data.prepare import prepare
from mt.data.scan import clean, source_key
from mt.data.store import Split, open_split
from mt.errors import ConfigError, MtError

try:
    from mt.data.tokenizer import BOS, EOS, PAD
except ImportError:  # the model module may not exist yet: the ids are fixed by the tokenizer
    PAD, BOS, EOS = 0, 1, 2


def files_config(*paths: Path, **sets: object):
    overrides = [f"data.files.train=[{', '.join(str(p) for p in paths)}]"]
    overrides += [f"{key.replace('__', '.')}={value}" for key, value in sets.items()]
    return load_config("tiny", overrides)


def raw_train(*paths: Path) -> list[tuple[str, str]]:
    return load_raw(files_config(*paths).data)["train"]


# ---------------------------------------------------------------------------- file formats


def test_flat_jsonl(corpus_file: Path):
    assert raw_train(corpus_file) == PAIRS


def test_nested_translation_jsonl_gz(tmp_path: Path):
    path = tmp_path / "nested.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, (en, es) in enumerate(PAIRS):
            row = {"id": str(i), "translation": {"en": en, "es": es}}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    assert raw_train(path) == PAIRS


def test_json_array(tmp_path: Path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps([{"en": a, "es": b} for a, b in PAIRS]), encoding="utf-8")
    assert raw_train(path) == PAIRS


def test_csv_keeps_quotes_commas_and_newlines(tmp_path: Path):
    path = tmp_path / "corpus.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["en", "es"])
        writer.writerows(PAIRS)
        writer.writerow(['Yes, he said: "fine".', "Sí, dijo: «bien»."])
    assert raw_train(path) == [*PAIRS, ('Yes, he said: "fine".', "Sí, dijo: «bien».")]


def test_tsv_keeps_double_quotes_literally(tmp_path: Path):
    pairs = [(normalize(a), normalize(b)) for a, b in PAIRS]  # TSV cannot hold tabs or newlines
    pairs.append(('"Quoted" at the start.', 'Comillas "dentro" y al final"'))
    path = tmp_path / "corpus.tsv"
    path.write_text("en\tes\n" + "".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    assert raw_train(path) == pairs


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_sentences_that_look_like_missing_values_are_kept(suffix: str, tmp_path: Path):
    sep = "," if suffix == ".csv" else "\t"
    rows = [("None", "Ninguno"), ("NA", "NA"), ("null", "nulo"), ("NaN", "NaN")]
    path = tmp_path / f"words{suffix}"
    path.write_text(f"en{sep}es\n" + "".join(f"{a}{sep}{b}\n" for a, b in rows), "utf-8")
    assert raw_train(path) == rows


def test_parquet(tmp_path: Path):
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.Table.from_pylist([{"en": a, "es": b} for a, b in PAIRS]), path)
    assert raw_train(path) == PAIRS


def test_list_of_paths_is_concatenated_in_order(tmp_path: Path):
    first = write_jsonl(tmp_path / "a.jsonl", PAIRS[:20])
    second = write_jsonl(tmp_path / "b.jsonl", PAIRS[20:])
    assert raw_train(first, second) == PAIRS
    assert raw_train(second, first) == PAIRS[20:] + PAIRS[:20]


def test_other_language_codes(tmp_path: Path):
    path = write_jsonl(tmp_path / "es-en.jsonl", [(b, a) for a, b in PAIRS], "es", "en")
    config = files_config(path, data__src_lang="es", data__tgt_lang="en")
    assert load_raw(config.data)["train"] == [(b, a) for a, b in PAIRS]


def test_each_file_is_a_corpus_of_its_own_format(corpus_file: Path, tmp_path: Path):
    other = tmp_path / "more.csv"
    other.write_text("en,es\nHi.,Hola.\n", encoding="utf-8")
    assert raw_train(corpus_file, other) == [*PAIRS, ("Hi.", "Hola.")]


def test_unknown_extension_is_a_config_error(tmp_path: Path):
    path = tmp_path / "corpus.txt"
    path.write_text("Hi.\tHola.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"data\.files\.train: .*corpus\.txt"):
        raw_train(path)


def test_missing_columns_name_the_file_and_columns(tmp_path: Path):
    path = write_jsonl(tmp_path / "fr.jsonl", PAIRS[:3], "en", "fr")
    with pytest.raises(MtError) as info:
        raw_train(path)
    message = str(info.value)
    assert str(path) in message and "'es'" in message and "columns: en, fr" in message


def test_unparsable_file_is_a_one_line_error(tmp_path: Path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"en": "Hi.", "es": "Hola."}\n{"en": "oops\n', encoding="utf-8")
    with pytest.raises(MtError) as info:
        raw_train(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_read_pairs_jsonl_normalises_and_names_bad_lines(tmp_path: Path):
    path = write_jsonl(tmp_path / "eval.jsonl", PAIRS[19:23])
    pairs = read_pairs_jsonl(path, "en", "es")
    assert pairs[1] == ("The cat sleeps on the sofa.", "El gato duerme en el sofá.")
    assert pairs[3] == ("The caf\u00e9 is closed.", "El caf\u00e9 está cerrado.")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"en": "a", "es": "b"}\n{"en": "c"}\n', encoding="utf-8")
    with pytest.raises(MtError, match=r"bad\.jsonl:2: expected an object with 'en' and 'es'"):
        read_pairs_jsonl(bad, "en", "es")


# ---------------------------------------------------------------------------- cleaning


def test_normalize_composes_and_collapses_whitespace():
    assert normalize("cafe\u0301") == "caf\u00e9"
    assert unicodedata.is_normalized("NFC", normalize("El cafe\u0301 está cerrado."))
    assert normalize("  a\t\tb \n c\u00a0d  ") == "a b c d"
    assert normalize(None) == "" and normalize(" \t\n") == ""
    assert normalize("¿Qué tal? 😀") == "¿Qué tal? 😀"


def test_clean_drops_and_counts_empty_sides(corpus_file: Path):
    drops: dict[str, int] = {}
    cleaned = clean(raw_train(corpus_file), drops)
    assert drops == {"empty": EMPTY_PAIRS}
    assert len(cleaned) == len(PAIRS) - EMPTY_PAIRS
    assert ("The cat sleeps on the sofa.", "El gato duerme en el sofá.") in cleaned
    assert ("The caf\u00e9 is closed.", "El caf\u00e9 está cerrado.") in cleaned
    for src, tgt in cleaned:
        for text in (src, tgt):
            assert text and text == " ".join(text.split())
            assert unicodedata.is_normalized("NFC", text)
    clean([("a", " ")], drops)
    assert drops["empty"] == EMPTY_PAIRS + 1  # counts accumulate


def test_dedup_keeps_first_occurrences_in_order():
    pairs = [("a", "1"), ("b", "2"), ("a", "1"), ("a", "3"), ("b", "2")]
    assert dedup(pairs) == [("a", "1"), ("b", "2"), ("a", "3")]
    cleaned = clean(PAIRS, {})
    assert len(cleaned) - len(dedup(cleaned)) == 1


def test_length_filter_counts():
    src = np.array([3, 10, 4, 1, 2, 6, 0])
    tgt = np.array([3, 4, 11, 4, 8, 2, 1])
    drops: dict[str, int] = {}
    keep = length_filter(src, tgt, max_length=10, max_ratio=3.0, drops=drops)
    # 10/4 = 2.5 kept; 11 too long; 4/1 = 4 and 8/2 = 4 ratio; 6/2 = 3 kept; 0 vs 1 kept
    assert np.flatnonzero(keep).tolist() == [0, 1, 5, 6]
    assert drops == {"too_long": 1, "ratio": 2}


def test_prepare_filters_train_by_length_and_ratio(corpus_file: Path, tmp_path: Path):
    def run(name: str, *sets: str):
        config = load_config(
            "tiny",
            [
                f"data.files.train={corpus_file}",
                f"run.dir={tmp_path / name}",
                "data.valid_size=4",
                "data.test_size=4",
                *sets,
            ],
        )
        return prepare(config)

    loose = run("loose", "data.max_length=1000", "data.max_ratio=1000")
    strict = run("strict", "data.max_length=8", "data.max_ratio=1.2")
    dropped = strict.stats["dropped"]
    assert loose.stats["dropped"]["too_long"] == loose.stats["dropped"]["ratio"] == 0
    assert dropped["too_long"] > 0 and dropped["ratio"] > 0
    n_loose, n_strict = loose.stats["pairs"]["train"], strict.stats["pairs"]["train"]
    assert n_strict == n_loose - dropped["too_long"] - dropped["ratio"]
    for s, t in zip(strict.splits["train"].src, strict.splits["train"].tgt):
        assert 0 < len(s) <= 8 and 0 < len(t) <= 8
        assert max(len(s), len(t)) / min(len(s), len(t)) <= 1.2
    # held-out splits are never filtered
    assert strict.stats["pairs"]["valid"] == loose.stats["pairs"]["valid"] == 4


# ---------------------------------------------------------------------------- splitting


def grouped_corpus(n_groups: int = 400, seed: int = 0) -> list[tuple[str, str]]:
    """Pairs in shuffled order; sources repeat 1-4 times, some differing in case or spacing."""
    rng = random.Random(seed)
    pairs = []
    for g in range(n_groups):
        for k in range(rng.choice([1, 1, 1, 2, 3, 4])):
            src = f"Sentence number {g}." if k % 2 == 0 else f"sentence  NUMBER {g}."
            pairs.append((src, f"Frase {g}, versión {k}."))
    rng.shuffle(pairs)
    return pairs


SIZES = {"valid": 50, "test": 60}


def key(text: str) -> str:
    """The same source sentence, independently of `source_key`: case and spacing ignored."""
    return " ".join(text.lower().split())


def test_source_key_ignores_case_and_spacing():
    assert source_key("  How   ARE\tyou? ") == source_key("how are you?")
    assert source_key("How are you?") != source_key("How are you!")


def streamed(pairs, tmp_path: Path, seed: int = 3, name: str = "run", **sizes: int):
    """`prepare` of `pairs` (written as aligned text) with loose limits: its splits as text."""
    (tmp_path / "c.en").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    (tmp_path / "c.es").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    sets = [f"data.{key}_size={size}" for key, size in (sizes or SIZES).items()]
    files = f"data.files.train=[{{en: {tmp_path / 'c.en'}, es: {tmp_path / 'c.es'}}}]"
    loose = ["data.max_length=1000", "data.max_ratio=1000", *sets]
    config = load_config("tiny", [files, f"run.dir={tmp_path / name}", f"run.seed={seed}", *loose])
    prepared = prepare(config)
    train, toks = prepared.splits["train"], (prepared.src_tokenizer, prepared.tgt_tokenizer)
    texts = {
        "train": list(
            zip(*(tok.detokenize(t, side) for t, side in zip(toks, (train.src, train.tgt))))
        )
    }
    for held in SIZES:
        texts[held] = list(zip(prepared.splits[held].src_text, prepared.splits[held].tgt_text))
    return texts, prepared.stats


def test_streaming_split_and_dedup_keep_the_old_rules_without_leakage(tmp_path: Path):
    pairs = grouped_corpus()
    pairs += pairs[:30]  # duplicates, dropped wherever they are
    split, stats = streamed(pairs, tmp_path)
    assert stats["dropped"]["duplicate"] == 30
    for name, size in SIZES.items():  # the size asked, less the rest of a group at the end
        assert size - 3 <= len(split[name]) <= size
    held = {key(s) for name in SIZES for s, _ in split[name]}
    assert not {key(s) for s, _ in split["train"]} & held  # no leak
    assert not {key(s) for s, _ in split["valid"]} & {key(s) for s, _ in split["test"]}
    # the old rules: duplicates dropped (the first kept), whole groups held out, row order kept
    unique = dedup(clean(pairs, {}))
    assert split["train"] == [p for p in unique if key(p[0]) not in held]
    for name in SIZES:
        assert split[name] == [p for p in unique if p in set(split[name])]
    assert sum(len(part) for part in split.values()) == len(unique)


def test_streaming_split_depends_only_on_the_seed(tmp_path: Path):
    pairs = grouped_corpus()
    first, _ = streamed(pairs, tmp_path, seed=3, name="a")
    again, _ = streamed(pairs, tmp_path, seed=3, name="b")
    other, _ = streamed(pairs, tmp_path, seed=4, name="c")
    assert first == again and first["valid"] != other["valid"]


def test_split_of_the_tiny_corpus_keeps_groups_whole(tmp_path: Path):
    for seed in range(5):
        split, _ = streamed(clean(PAIRS, {}), tmp_path, seed, f"run{seed}", valid=8, test=8)
        where = {name for name, part in split.items() for s, _ in part if key(s) == "how are you?"}
        assert len(where) == 1  # all four translations of "How are you?" in one split


def test_prepare_has_no_source_leakage(corpus_file: Path, tmp_path: Path):
    config = load_config(
        "tiny",
        [
            f"data.files.train={corpus_file}",
            f"run.dir={tmp_path / 'run'}",
            "data.valid_size=10",
            "data.test_size=10",
        ],
    )
    prepared = prepare(config)
    src_tok = prepared.src_tokenizer
    train_src = set(tok.detokenize(src_tok, prepared.splits["train"].src))
    held_out = prepared.splits["valid"].src_text + prepared.splits["test"].src_text
    assert len(held_out) == 20
    assert not {key(s) for s in held_out} & {key(s) for s in train_src}
    all_keys = {key(s) for s, _ in clean(PAIRS, {})}
    assert {key(s) for s in train_src} | {key(s) for s in held_out} <= all_keys


# ---------------------------------------------------------------------------- batching


def batch_cost(batch: np.ndarray, src: np.ndarray, tgt: np.ndarray) -> int:
    return len(batch) * (int(max(src[batch].max(), tgt[batch].max())) + 1)


@pytest.fixture
def lengths() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = rng.integers(1, 60, size=2000)
    tgt = np.clip(src + rng.integers(-5, 6, size=2000), 1, None)
    src[17] = 700  # one sentence alone exceeds max_tokens
    return src, tgt


def test_token_batches_cover_every_index_once_within_budget(lengths):
    src, tgt = lengths
    for epoch, shuffle in [(0, True), (1, True), (0, False)]:
        batches = token_batches(src, tgt, 512, seed=1, epoch=epoch, shuffle=shuffle)
        flat = np.concatenate(batches)
        assert sorted(flat.tolist()) == list(range(len(src)))
        for batch in batches:
            assert len(batch) > 0
            if batch_cost(batch, src, tgt) > 512:
                assert len(batch) == 1 and 17 in batch


def test_token_batches_are_full(lengths):
    src, tgt = lengths
    batches = token_batches(src, tgt, 512, seed=1, epoch=0)
    total = sum(batch_cost(b, src, tgt) for b in batches)
    assert total <= 512 * len(batches)
    assert len(batches) <= 1.2 * total / 512  # greedy packing leaves little room unused


def test_token_batches_depend_only_on_seed_and_epoch(lengths):
    src, tgt = lengths

    def run(seed: int, epoch: int) -> list[list[int]]:
        return [b.tolist() for b in token_batches(src, tgt, 512, seed=seed, epoch=epoch)]

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1)
    assert run(1, 0) != run(2, 0)
    assert sorted(map(sorted, run(1, 0))) != sorted(map(sorted, run(1, 1)))  # buckets differ too


def test_token_batches_edge_cases():
    assert token_batches(np.zeros(0, int), np.zeros(0, int), 100, 0, 0) == []
    one = token_batches(np.array([500]), np.array([3]), 100, 0, 0)
    assert [b.tolist() for b in one] == [[0]]


@needs_shared
def test_padding_is_small_on_tatoeba(tatoeba_run):
    _, run_dir = tatoeba_run
    meta = json.loads((run_dir / "data" / "meta.json").read_text(encoding="utf-8"))
    train = open_split(run_dir / "data", "train", meta["store"]["train"])
    src, tgt = train.src.lengths(), train.tgt.lengths()
    assert len(src) > 100_000
    batches = epoch_plan(Batches(train, 4096, 1, Position()), 0)  # in maxi-batches
    for side in (src, tgt):
        padded = sum(len(b) * (int(side[b].max()) + 1) for b in batches)
        real = int((side + 1).sum())
        assert 1 - real / padded < 0.10


def test_collate_places_bos_eos_and_padding():
    split = Split(
        src=[np.array([5, 6, 7], np.int32), np.array([8], np.int32)],
        tgt=[np.array([9, 10], np.int32), np.array([11, 12, 13, 14], np.int32)],
    )
    src, tgt_in, tgt_out, _ = collate(split, np.array([1, 0]))
    assert src.tolist() == [[8, EOS, PAD, PAD], [5, 6, 7, EOS]]
    assert tgt_in.tolist() == [[BOS, 11, 12, 13, 14], [BOS, 9, 10, PAD, PAD]]
    assert tgt_out.tolist() == [[11, 12, 13, 14, EOS], [9, 10, EOS, PAD, PAD]]
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int64
    assert (PAD, BOS, EOS) == (0, 1, 2)
