"""The prepare pipeline behind `mt prepare` and the start of `mt train`, in bounded memory:
the corpus streams through in chunks (`corpus.CHUNK` pairs), read three times.

    scan:   normalise every pair; hash it (64 bits, for duplicates) and its source sentence
            (seeded, for the held-out cut); 16 bytes a pair are all that is kept
    split_codes: a code per pair: empty, duplicate, valid, test, train, or train in the sample
    sample: read the seeded sample of train, learn BPE or unigram from it (or take the
            tokenizers of train.init)
    encode: normalise again, encode in large batches (`data.workers` processes), filter train
            by length and ratio, append to the token store (mt.data.store)

The scan and the decisions are `mt.data.scan`; the worker processes `mt.data.workers`.

The store lives in `<run.dir>/data/`, keyed by a fingerprint of everything that shapes it,
so a second run reuses it and a changed setting rebuilds it; it is built in a temporary
folder that replaces the old one only when complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from ..config import Config, DataConfig
from ..config_file import dump_config
from ..errors import ConfigError, InputError, MtError
from ..files import atomic_path, atomic_write_text, remove
from ..run_folder import (
    CONFIG,
    META,
    README,
    RUN_README,
    data_dir,
    held_out_text,
    tokenizer_files,
)
from . import language
from . import tokenizer as tok
from .corpus import (
    SPLITS,
    Chunk,
    Corpus,
    Pair,
    corpora,
    corpus_tags,
    entry_files,
    normalize,
)
from .directions import lead_tokens
from .encode import encode_chunk, read_held_out, store_dtype, write_held_out
from .old_corpus import Base, old_corpus
from .scan import (
    DUPLICATE,
    HELD_OUT,
    HELD_SOURCE,
    SAMPLED,
    TRAIN,
    clean,
    held_out_ranges,
    merge,
    sample,
    scan,
    split_codes,
)
from .store import Split, SplitWriter, open_split
from .workers import Meter, workers

CACHE_VERSION = 4  # bump when the cache layout or the pipeline's output changes
NEW_KEYS_OFF = (("filter_language", False), ("both_directions", False))


@dataclass
class Prepared:
    splits: dict[str, Split]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    stats: dict[str, Any]
    reused: bool


def fingerprint(config: Config) -> str:
    """Hash of everything that shapes the prepared data: settings, seed and input files
    (not data.workers: any number of them writes the same store)."""
    data = config.data
    inputs: dict[str, Any] = {
        "version": CACHE_VERSION,
        "seed": config.run.seed,
        # keys added later hash, when off, as they did before they existed
        "data": {
            k: v
            for k, v in dataclasses.asdict(data).items()
            if k != "workers" and (k, v) not in NEW_KEYS_OFF
        },
        # dropout does not shape the cache; bpe, and no placeholders, hash as they did before
        # tokenizer.model and tokenizer.placeholders existed
        "tokenizer": {
            k: v
            for k, v in dataclasses.asdict(config.tokenizer).items()
            if k != "dropout" and (k, v) not in (("model", "bpe"), ("placeholders", 0))
        },
    }
    if corpus_tags(data):  # held-out pairs cut from the untagged corpora only
        inputs["held_out"] = "untagged"
    if config.train.init:  # its tokenizers, and its corpus where old_share mixes some in
        inputs["init"] = [config.train.init, config.train.old_share]
    if data.source == "files":
        inputs["files"] = {
            name: [
                _file_id(f) for e in getattr(data.files, name) or [] for f in entry_files(e, data)
            ]
            for name in SPLITS
        }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def inputs_of(config: Config) -> dict[str, Any]:
    """What a run's weights are bound to: the data fingerprint and the sha256 of each tokenizer
    file in the run folder (None where absent). Saved with every checkpoint; a resume compares
    them before anything is rebuilt, so a changed corpus never re-learns the vocabulary under
    trained weights."""
    files = tokenizer_files(
        Path(config.run.dir), config.data.src_lang, config.data.tgt_lang, config.tokenizer.joint
    )
    return {
        "data_fingerprint": fingerprint(config),
        "tokenizers": {p.name: _sha256(p.read_bytes()) if p.is_file() else None for p in files},
    }


def prepare(
    config: Config,
    rebuild: bool = False,
    write: bool = True,
    base: Callable[[Config], Base | None] | None = None,
) -> Prepared:
    """Load the cached data of this config, or build and cache it; then (with `write`, which
    only one process of a run may do) describe the run folder: config.yaml and README.md.
    Nothing is written before the data step has succeeded. `base` (`finetune.base`) reads a
    fine-tuned run's starting point, only when the cache is built: a resumed run that reuses
    it does not need train.init's checkpoint."""
    run_dir = Path(config.run.dir)
    cache = data_dir(run_dir)
    fp = fingerprint(config)
    tok_files = tokenizer_files(
        run_dir, config.data.src_lang, config.data.tgt_lang, config.tokenizer.joint
    )
    prepared = None if rebuild else _load_cache(cache, fp, tok_files)
    if prepared is None and not write:
        raise MtError(f"{cache}: no prepared data for this config; run mt prepare first")
    if prepared is None:
        prepared = _build_cache(config, fp, cache, tok_files, base)
    if write:
        atomic_write_text(run_dir / CONFIG, dump_config(config))
        atomic_write_text(run_dir / README, RUN_README.format(tokenizer=tok_files[0].name))
    return prepared


def _build_cache(
    config: Config,
    fp: str,
    cache: Path,
    tok_files: tuple[Path, Path],
    base: Callable[[Config], Base | None] | None,
) -> Prepared:
    """Build the store in a temporary folder that replaces `cache` when complete, then the
    tokenizer files; a failure leaves no run folder that was not there before."""
    created = not cache.parent.exists()
    try:
        with atomic_path(cache) as tmp:
            tmp.mkdir()
            meta, tokenizers = _build(config, fp, tmp, base(config) if base else None)
            texts = tok.tokenizers_to_str(tokenizers, tok_files)
            meta["tokenizers"] = {p.name: _sha256(t.encode()) for p, t in zip(tok_files, texts)}
            (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except BaseException:
        if created:
            remove(cache.parent)
        raise
    for path, text in zip(tok_files, texts):  # after the store: a failure leaves it stale
        atomic_write_text(path, text)
    prepared = _load_cache(cache, fp, tok_files)
    if prepared is None:
        raise MtError(f"{cache}: the data just prepared cannot be read back")
    prepared.reused = False
    return prepared


def _build(
    config: Config, fp: str, folder: Path, base: Base | None
) -> tuple[dict[str, Any], tuple[Tokenizer, Tokenizer]]:
    """Write the store into `folder`; its description (meta.json) and the tokenizers."""
    data, seed = config.data, config.run.seed
    language.filter_languages(data)  # before any work: a language it does not know is refused
    found = corpora(data)
    train = found.pop("train")
    watched = {f: _file_id(f) for c in [*train, *itertools.chain(*found.values())] for f in c.files}
    drops = {"empty": 0}
    held = {  # given whole: small
        name: clean(
            [pair for c in found[name] for chunk in c.read() for pair in zip(*chunk)], drops
        )
        for name in HELD_OUT
        if name in found
    }
    with workers(data.workers) as run:
        scanned = scan(train, run, seed, folder)
        cut = held_out_ranges(
            scanned, {n: getattr(data, f"{n}_size") for n in HELD_OUT if n not in held}
        )
        if base and config.train.old_share:
            kept = int(np.count_nonzero(split_codes(scanned, cut) == TRAIN))
            train.append(old_corpus(base.data, config, kept, cut, held, run, folder))
            scanned = merge(scanned, scan(train[-1:], run, seed, folder))
    _check_unchanged(watched)
    codes, raw = split_codes(scanned, cut), scanned["raw"]
    drops["empty"] += len(codes) - int(np.count_nonzero(scanned["nonempty"]))
    drops["duplicate"] = int(np.count_nonzero(codes == DUPLICATE))
    if scanned["tagged"] and cut:  # tagged pairs whose source is held out
        drops["held_out_source"] = int(np.count_nonzero(codes == HELD_SOURCE))
    del scanned
    if not np.any(codes == TRAIN):
        raise MtError("no training pairs are left after cleaning")
    sample(codes, config.tokenizer.sample, seed)
    tokenizers = base.tokenizers if base else _train_tokenizers(train, codes, raw, config)
    for tag in corpus_tags(data):
        if tokenizers[0].token_to_id(tag) is None:  # train.init's tokenizer, made without it
            raise ConfigError(f"data.files.train: tag {tag}: not a token of train.init's tokenizer")
    for lead in lead_tokens(data):
        if tokenizers[0].token_to_id(lead) is None:
            raise ConfigError(
                f"data.both_directions: {lead} is not a token of train.init's tokenizer"
            )
    layout, sizes, cut_pairs = _encode(train, codes, raw, tokenizers, data, folder, drops)
    _check_unchanged(watched)
    held = {**cut_pairs, **held}
    store = {"train": layout}
    store.update({n: write_held_out(folder, n, held[n], tokenizers, data) for n in HELD_OUT})
    stats = _stats(fp, store, drops, held, tokenizers)
    return {"fingerprint": fp, "stats": stats, "store": store, "corpora": sizes}, tokenizers


def _stats(
    fp: str,
    store: dict[str, Any],
    drops: dict[str, int],
    held: dict[str, list[Pair]],
    toks: tuple[Tokenizer, Tokenizer],
) -> dict[str, Any]:
    texts = [[pair[i] for name in HELD_OUT for pair in held[name]] for i in (0, 1)]
    return {
        "fingerprint": fp,
        "pairs": {name: store[name]["pairs"] for name in SPLITS},
        "dropped": drops,
        "tokens": {name: store[name]["tokens"] for name in SPLITS},
        "vocab_size": {"src": toks[0].get_vocab_size(), "tgt": toks[1].get_vocab_size()},
        "round_trip": {
            "src": tok.round_trip_rate(toks[0], texts[0]),
            "tgt": tok.round_trip_rate(toks[1], texts[1]),
            "sentences": len(texts[0]) + len(texts[1]),
        },
    }


def _train_tokenizers(
    train: list[Corpus], codes: np.ndarray, raw: list[int], config: Config
) -> tuple[Tokenizer, Tokenizer]:
    """Pass 2: the sample's text, read in corpus order, then the tokenizers learnt from it."""
    src, tgt = [], []
    meter = Meter("sample", len(codes))
    for _, (raw_src, raw_tgt), part in _coded(train, codes, raw):
        for i in np.flatnonzero(part == SAMPLED).tolist():
            src.append(normalize(raw_src[i]))
            tgt.append(normalize(raw_tgt[i]))
        meter.update(len(part))
    meter.close()
    reserved = corpus_tags(config.data) + lead_tokens(config.data)
    return tok.train_tokenizers(src, tgt, config.tokenizer, reserved)


def _encode(
    train: list[Corpus],
    codes: np.ndarray,
    raw: list[int],
    tokenizers: tuple[Tokenizer, Tokenizer],
    data: DataConfig,
    folder: Path,
    drops: dict[str, int],
) -> tuple[dict[str, Any], list[list[Any]], dict[str, list[Pair]]]:
    """Pass 3, in `data.workers` processes: train encoded into the store, filtered by
    language (data.filter_language), length and ratio; its layout, each corpus's (pairs,
    weight), and the held-out pairs cut."""
    writer = SplitWriter(folder, "train", store_dtype(tokenizers))
    held: dict[str, list[Pair]] = {name: [] for name in HELD_OUT}
    sizes = [[0, corpus.weight] for corpus in train]
    meter = Meter("encode", len(codes))
    languages = language.filter_languages(data)
    counted = (("language", "copy") if languages else ()) + ("too_long", "ratio")
    drops.update(dict.fromkeys(counted, 0))
    limits = data.max_length, data.max_ratio, languages
    leads = tuple(tokenizers[0].token_to_id(lead) for lead in lead_tokens(data)) or None
    with workers(data.workers, tokenizers) as run:
        work = ((chunk, part, *limits, i, leads) for i, chunk, part in _coded(train, codes, raw))
        for out in run(encode_chunk, work):
            writer.append(out["train"])
            sizes[out["corpus"]][0] += len(out["train"]["src"][1])
            for key in counted:
                drops[key] += out[key]
            for name in HELD_OUT:
                held[name] += out[name]
            meter.update(out["pairs"])
    meter.close()
    return writer.close(), sizes, held


def _coded(
    train: list[Corpus], codes: np.ndarray, raw: list[int]
) -> Iterator[tuple[int, Chunk, np.ndarray]]:
    """Each corpus's chunks again, with their pairs' codes; a corpus that does not give as
    many pairs as it did in the scan changed meanwhile."""
    at = 0
    for i, (corpus, count) in enumerate(zip(train, raw)):
        seen = 0
        for chunk in corpus.read():
            seen += len(chunk[0])
            if seen > count:
                break
            yield i, chunk, codes[at : at + len(chunk[0])]
            at += len(chunk[0])
        if seen != count:
            raise InputError(f"{corpus.name}: {_CHANGED}")


_CHANGED = "changed while it was being prepared; prepare again"


def _check_unchanged(watched: dict[str, list[Any]]) -> None:
    for file, seen in watched.items():
        if _file_id(file) != seen:
            raise InputError(f"data.files: {file}: {_CHANGED}")


def _load_cache(cache: Path, fp: str, tok_files: tuple[Path, Path]) -> Prepared | None:
    try:
        meta = json.loads((cache / META).read_text(encoding="utf-8"))
        if meta["fingerprint"] != fp or any(
            not p.is_file() or _sha256(p.read_bytes()) != meta["tokenizers"].get(p.name)
            for p in tok_files
        ):
            return None
        splits = {name: open_split(cache, name, meta["store"][name]) for name in SPLITS}
        for name in HELD_OUT:
            pairs, splits[name].targets = read_held_out(held_out_text(cache, name))
            splits[name].src_text = [src for src, _ in pairs]
            splits[name].tgt_text = [tgt for _, tgt in pairs]
            if len(pairs) != len(splits[name]):
                return None
        splits["train"].corpora = [(int(n), w) for n, w in meta["corpora"]]
        src_tok, tgt_tok = tok.tokenizers_from_files(tok_files)
    except (OSError, KeyError, ValueError, TypeError, EOFError, MtError):
        return None  # missing or damaged cache: rebuild it
    return Prepared(splits, src_tok, tgt_tok, meta["stats"], reused=True)


def _file_id(path: str) -> list[Any]:
    try:
        stat = Path(path).stat()
    except OSError as e:
        raise InputError(f"data.files: {path}: {e.strerror}") from None
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
