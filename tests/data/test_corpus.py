"""Corpora of any size: aligned plain text, several corpora with weights, a streaming prepare
in worker processes, and what bad input or a failing disk does to it."""

from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from helpers.corpus import PAIRS, load_raw, write_jsonl
from mt.config_file import load_config
from mt.data import corpus as corpus_module
from mt.data import prepare as data_module
from mt.data import scan, store
from mt.data.batches import Batches, Position
from mt.data.prepare import prepare
from mt.errors import ConfigError, InputError, MtError


def aligned(folder: Path, pairs, name: str = "c", newline: str = "\n", gz: bool = False):
    """`pairs` as `name.en` and `name.es` (gzipped with `gz`): the entry for data.files."""
    entry = {}
    for lang, side in (("en", 0), ("es", 1)):
        path = folder / f"{name}.{lang}{'.gz' if gz else ''}"
        data = "".join(pair[side] + newline for pair in pairs).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        entry[lang] = str(path)
    return entry


def flow(entry) -> str:
    """An entry as YAML flow, for --set."""
    return "{" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}"


def config(tmp_path: Path, *entries, run: str = "run", sets: tuple[str, ...] = ()):
    train = f"data.files.train=[{', '.join(flow(e) for e in entries)}]"
    return load_config("tiny", [train, f"run.dir={tmp_path / run}", *sets])


def clean_pairs():
    return scan.clean(PAIRS, {})


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("gz", [False, True])
def test_aligned_text_reads_line_by_line_in_chunks(newline, gz, tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 7)  # chunk boundaries inside the corpus
    pairs = [(s.replace("\n", " "), t.replace("\n", " ")) for s, t in PAIRS]
    cfg = config(tmp_path, aligned(tmp_path, pairs, newline=newline, gz=gz))
    raw = load_raw(cfg.data)["train"]
    assert len(raw) == len(pairs)
    assert [tuple(" ".join(x.split()) for x in p) for p in raw] == [
        tuple(" ".join(x.split()) for x in p) for p in pairs
    ]
    assert all("\r" not in s + t for s, t in scan.clean(raw, {}))


def test_blank_lines_are_empty_pairs_dropped_and_counted(tmp_path):
    pairs = [("Hello.", "Hola."), ("", "Nada."), ("Nothing.", "  "), ("Bye.", "Adiós.")] * 10
    pairs += [(f"Sentence {i}.", f"Frase {i}.") for i in range(40)]
    cfg = config(tmp_path, aligned(tmp_path, pairs), sets=("data.valid_size=5", "data.test_size=5"))
    stats = prepare(cfg).stats
    assert stats["dropped"]["empty"] == 20
    assert stats["dropped"]["duplicate"] == 18  # Hello and Bye, nine times each again
    assert sum(stats["pairs"].values()) == 42


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    entry = aligned(tmp_path, PAIRS[:10])
    Path(entry["es"]).write_text("Una.\n" * 12, encoding="utf-8")
    with pytest.raises(InputError) as info:
        prepare(config(tmp_path, entry))
    message = str(info.value)
    assert "\n" not in message
    assert f"{entry['en']} has 10 lines and {entry['es']} 12" in message


def test_not_utf8_names_the_file_and_the_line(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "CHUNK", 4)
    entry = aligned(tmp_path, PAIRS[:10])
    lines = Path(entry["es"]).read_bytes().split(b"\n")
    lines[6] = b"caf\xe9"  # Latin-1, on line 7 (in the second chunk)
    Path(entry["es"]).write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as info:
        prepare(config(tmp_path, entry))
    assert f"{entry['es']}:7: not UTF-8 text" in str(info.value)


def test_an_empty_corpus_file_is_refused(tmp_path):
    entry = aligned(tmp_path, PAIRS[:10])
    Path(entry["en"]).write_bytes(b"")
    with pytest.raises(InputError, match=f"{entry['en']}: an empty file"):
        prepare(config(tmp_path, entry))


@pytest.mark.parametrize(
    "sets, culprit",
    [
        (["data.workers=-1"], "data.workers: must be in [0, 256]"),
        (["data.workers=1000"], "data.workers: must be in [0, 256]"),
        (["tokenizer.sample=0"], "tokenizer.sample: must be positive"),
        (["data.files.train=[{path: CORPUS, weight: 0}]"], "weight: must be a positive number"),
        (["data.files.train=[{path: CORPUS, weight: -2}]"], "weight: must be a positive number"),
        (["data.files.train=[{en: CORPUS}]"], "a corpus is a path"),
        (["data.files.valid=[{path: CORPUS, weight: 2}]"], "only training corpora have weights"),
        (["data.files.train=[{en: CORPUS, es: /no/such.es}]"], "no such file: /no/such.es"),
    ],
)
def test_bad_corpus_settings_are_one_line_with_status_2(sets, culprit, cli_main, tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", PAIRS)
    sets = [s.replace("CORPUS", str(corpus)) for s in sets]
    args = ["prepare", "--config", "tiny", "--set", f"data.files.train={corpus}"]
    code, out, err = cli_main(*args, *(a for s in sets for a in ("--set", s)))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("mt: error: ") and culprit in err


def test_workers_write_the_very_store_that_one_process_writes(tmp_path):
    pairs = [(f"Sentence number {i}.", f"Frase número {i}.") for i in range(3000)]
    entry = aligned(tmp_path, pairs)
    runs = {
        n: prepare(config(tmp_path, entry, run=f"w{n}", sets=(f"data.workers={n}",)))
        for n in (1, 2)
    }
    assert runs[1].stats == runs[2].stats  # the fingerprint too: workers do not shape it
    for name in sorted(os.listdir(tmp_path / "w1" / "data")):
        assert (tmp_path / "w1" / "data" / name).read_bytes() == (
            tmp_path / "w2" / "data" / name
        ).read_bytes(), name


def test_the_store_round_trips_the_encoded_corpus(tmp_path):
    pairs = clean_pairs()
    prepared = prepare(config(tmp_path, aligned(tmp_path, pairs), sets=("data.max_length=1000",)))
    train = prepared.splits["train"]
    assert isinstance(train.src, store.Sentences) and train.src.ids.dtype == np.uint16
    held = {s for name in ("valid", "test") for s in prepared.splits[name].src_text}
    expected = [p for p in dict.fromkeys(pairs) if p[0] not in held]
    tokenizer = prepared.src_tokenizer
    assert [list(x) for x in train.src] == [
        tokenizer.encode(s, add_special_tokens=False).ids for s, _ in expected
    ]
    meta = json.loads((tmp_path / "run" / "data" / "meta.json").read_text())
    assert meta["store"]["train"]["pairs"] == len(expected) == len(train)


def test_sentences_gather_by_index_as_sentence_by_sentence():
    rng = np.random.default_rng(0)
    a, b = (store.Sentences.of([rng.integers(4, 99, rng.integers(0, 6)) for _ in range(200)])
            for _ in range(2))  # fmt: skip
    index = rng.permutation(200)[:50]
    ids, lengths = a.take(index)
    assert np.array_equal(ids, np.concatenate([a[i] for i in index]))
    assert lengths.tolist() == [len(a[i]) for i in index]
    first = rng.random(200) < 0.7  # BPE-dropout keeps the sentences that still fit
    mixed = store.Sentences.mixed(a, b, first)
    assert all(np.array_equal(mixed[i], a[i] if first[i] else b[i]) for i in range(200))


def test_the_scan_dedups_and_cuts_as_one_sort_of_all_its_hashes_would(monkeypatch):
    monkeypatch.setattr(scan, "STEP", 1000)  # many steps
    rng = np.random.default_rng(1)
    distinct = rng.integers(0, 2**64, 20_000, dtype=np.uint64)
    pair = distinct[rng.integers(0, len(distinct), 50_000)]  # duplicates anywhere
    src = distinct[rng.integers(0, 3_000, len(distinct))][np.searchsorted(np.sort(distinct), pair)]
    first = np.zeros(len(pair), bool)
    first[np.unique(pair, return_index=True)[1]] = True  # stable: the first occurrence
    assert np.array_equal(scan._first(pair), first)
    scanned = {"pair": pair, "src": src, "first": first, "nonempty": np.ones(len(pair), bool)}
    scanned["tagged"] = []  # no tagged corpus
    sizes = {"valid": 500, "test": 700}
    hashes = np.sort(src[first])  # every distinct pair's source hash
    cut, lo, at = {}, 0, 0
    for name, size in sizes.items():
        hi = int(hashes[at + size])
        cut[name], lo, at = (lo, hi), hi, int(np.searchsorted(hashes, hi))
    assert scan.held_out_ranges(scanned, sizes) == cut
    assert scan.split_codes(scanned, cut).dtype == np.uint8  # a byte a pair


def test_a_store_without_token_counts_counts_its_tokens_and_damaged_ones_rebuild(tmp_path):
    cfg = config(tmp_path, aligned(tmp_path, clean_pairs()))
    counts = prepare(cfg).splits["train"].tgt.counts()
    folder = tmp_path / "run" / "data"
    (folder / "train.tgt.counts").unlink()  # as prepared before counts were kept
    again = prepare(cfg)
    assert again.reused and np.array_equal(again.splits["train"].tgt.counts(), counts)
    (folder / "train.src.counts").write_bytes(np.zeros(3, np.int64).tobytes())
    assert not prepare(cfg).reused


def mapped_kib(path: Path) -> int:
    """KiB of `path` that this process has mapped (its RSS in /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_a_batch_leaves_none_of_the_store_mapped(tmp_path):
    train = prepare(config(tmp_path, aligned(tmp_path, clean_pairs()))).splits["train"]
    files = [tmp_path / "run" / "data" / f"train.{side}.{k}" for side in ("src", "tgt")
             for k in ("tokens", "offsets")]  # fmt: skip
    train.src.ids.sum(), train.tgt.offsets.sum()  # read: mapped
    assert mapped_kib(files[0]) > 0 and mapped_kib(files[3]) > 0
    batch = next(Batches(train, 256, 0, Position(), prefetch=False))
    assert len(batch[0]) and [mapped_kib(f) for f in files] == [0, 0, 0, 0]


def test_several_corpora_keep_their_weights_in_the_store(tmp_path):
    first = aligned(tmp_path, [(f"One {i}.", f"Uno {i}.") for i in range(60)], "a")
    second = aligned(tmp_path, [(f"Two {i}.", f"Dos {i}.") for i in range(30)], "b")
    sizes = ("data.valid_size=5", "data.test_size=5")
    prepared = prepare(config(tmp_path, first, {**second, "weight": 3}, sets=sizes))
    train = prepared.splits["train"]
    sizes = [n for n, _ in train.corpora]
    assert [w for _, w in train.corpora] == [None, 3] and sum(sizes) == len(train)
    assert 50 <= sizes[0] < 60 and 20 <= sizes[1] < 30  # held-out pairs come from both


def test_a_corpus_changing_while_it_is_prepared_is_refused_and_the_cache_kept(
    tmp_path, monkeypatch
):
    entry = aligned(tmp_path, clean_pairs())
    cfg = config(tmp_path, entry)
    prepare(cfg)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run" / "data").iterdir()}
    sample = data_module.sample

    def grow(*args):  # between the scan and the encoding
        for lang, text in (("en", "More.\n"), ("es", "Más.\n")):
            with open(entry[lang], "a", encoding="utf-8") as f:
                f.write(text)
        return sample(*args)

    monkeypatch.setattr(data_module, "sample", grow)
    with pytest.raises(InputError, match="changed while it was being prepared"):
        prepare(cfg, rebuild=True)
    after = {p.name: p.read_bytes() for p in (tmp_path / "run" / "data").iterdir()}
    assert after == before


def test_a_full_disk_while_encoding_leaves_the_previous_cache(tmp_path, monkeypatch):
    cfg = config(tmp_path, aligned(tmp_path, clean_pairs()))
    prepare(cfg)
    folder = tmp_path / "run" / "data"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def no_space(self, sides):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store.SplitWriter, "append", no_space)
    with pytest.raises(MtError) as info:
        prepare(cfg, rebuild=True)
    assert "No space left on device (disk full)" in str(info.value)
    assert "\n" not in str(info.value) and not isinstance(info.value, ConfigError)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".data")) == []
