"""Corpus loading, cleaning, leakage-free splitting, encoding and the on-disk cache.

`prepare(config)` is the whole pipeline behind `mt prepare` and the start of `mt train`:

    load (hub or files) -> clean -> split by source sentence -> dedup train
    -> train BPE or unigram on train (or take train.init's) -> encode
    -> filter train by length and ratio -> cache

The cache lives in `<run.dir>/data/`, keyed by a fingerprint of everything that shapes it,
so a second run reuses it and a changed setting rebuilds it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import sys
import unicodedata
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer
from tqdm import tqdm

from . import tokenizer as tok
from .config import Config, DataConfig, dump_config, one_line
from .errors import ConfigError, MtError
from .files import atomic_path, atomic_write_text
from .layout import CONFIG, data_dir
from .tokenizer import BOS, EOS, PAD

CACHE_VERSION = 2  # bump when the cache layout or the pipeline's output changes
SPLITS = ("train", "valid", "test")
Pair = tuple[str, str]


@dataclass
class Split:
    """One split: token ids per sentence (no BOS/EOS) and, for valid/test, the text."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]
    src_text: list[str] = field(default_factory=list)
    tgt_text: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Prepared:
    splits: dict[str, Split]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    stats: dict[str, Any]
    reused: bool


# ---------------------------------------------------------------------------- loading


def _datasets() -> Any:
    """`datasets`, imported only when needed (it is slow to import), quiet off a terminal:
    its bars redraw with \r, which is noise in a log file."""
    import datasets

    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
    return datasets


def load_raw(cfg: DataConfig) -> dict[str, list[Pair]]:
    """The corpus as (source, target) pairs per split that the source provides."""
    datasets = _datasets()

    if cfg.source == "hub":
        try:
            loaded = datasets.load_dataset(cfg.name, cfg.subset)
        except Exception as e:  # hub, network and dataset errors all end up here
            raise MtError(
                f"cannot load {cfg.name} ({cfg.subset}) through Hugging Face datasets: "
                f"{type(e).__name__}: {one_line(e)}; to use local files set data.source: files "
                "and data.files.train: PATH"
            ) from None
        return {name: _pairs(split, cfg, f"{cfg.name}[{name}]") for name, split in loaded.items()}
    raw = {}
    for name in SPLITS:
        files = getattr(cfg.files, name)
        if files:
            raw[name] = _file_pairs(files, cfg, f"data.files.{name}")
    return raw


def _load_files(files: list[str], key: str) -> Any:
    """Read local files with `datasets`' own builders, chosen by extension."""
    datasets = _datasets()

    kinds = {_file_kind(f) for f in files}
    if None in kinds or len(kinds) > 1:
        raise ConfigError(
            f"{key}: {', '.join(files)}: expected files of one format among .jsonl, .json "
            "(optionally .gz), .csv, .tsv, .parquet"
        )
    kind = kinds.pop()
    options: dict[str, Any] = {}
    if kind == "tsv":
        kind, options = "csv", {"delimiter": "\t", "quoting": 3}  # 3: csv.QUOTE_NONE
    if kind == "csv":
        options["keep_default_na"] = False  # a sentence "None", "NA" or "null" is text
    for file in files:
        if Path(file).is_file() and Path(file).stat().st_size == 0:
            raise ConfigError(f"{key}: {file}: an empty file")
    level = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors: a 2nd line of ours
    try:
        return datasets.load_dataset(kind, data_files=files, split="train", **options)
    except Exception as e:
        for file in files:  # `datasets` names no line (or its row): find the first bad one
            if file.lower().removesuffix(".gz").endswith(".jsonl"):
                with suppress(OSError, EOFError, zlib.error):  # not gzip after all: said below
                    for _ in _read_jsonl(Path(file), f"{key}: {file}"):
                        pass
        why = one_line(e.__cause__ or e) or type(e).__name__
        raise ConfigError(f"{key}: cannot read {', '.join(files)}: {why}") from None
    finally:
        datasets.logging.set_verbosity(level)


def _file_pairs(files: list[str], cfg: DataConfig, key: str) -> list[Pair]:
    """The pairs of local corpus files; text that is not UTF-8 is named by file and line."""
    dataset = _load_files(files, key)
    try:
        return _pairs(dataset, cfg, f"{key}: {', '.join(files)}")
    except UnicodeDecodeError:  # `datasets` decodes lazily and names neither file nor line
        for file in files:
            opener = gzip.open if file.endswith(".gz") else open
            with opener(file, "rb") as f:
                decode_text(f.read(), f"{key}: {file}")
        raise ConfigError(f"{key}: {', '.join(files)}: not UTF-8 text") from None


def _file_kind(path: str) -> str | None:
    name = path.lower().removesuffix(".gz")
    for suffix, kind in (
        (".jsonl", "json"),
        (".json", "json"),
        (".csv", "csv"),
        (".tsv", "tsv"),
        (".parquet", "parquet"),
    ):
        if name.endswith(suffix):
            return kind
    return None


def _pairs(dataset: Any, cfg: DataConfig, origin: str) -> list[Pair]:
    """Rows in the flat {"en", "es"} or nested {"translation": {...}} schema as pairs."""
    columns = dataset.column_names
    pairs = None
    if cfg.src_lang in columns and cfg.tgt_lang in columns:
        pairs = list(zip(dataset[cfg.src_lang], dataset[cfg.tgt_lang]))
    elif "translation" in columns:
        rows = dataset["translation"]
        if rows and cfg.src_lang in rows[0] and cfg.tgt_lang in rows[0]:
            pairs = [(r[cfg.src_lang], r[cfg.tgt_lang]) for r in rows]
    if pairs is None:
        raise MtError(
            f"{origin}: no '{cfg.src_lang}' and '{cfg.tgt_lang}' fields "
            f"(columns: {', '.join(columns)})"
        )
    for number, pair in enumerate(pairs, start=1):
        for lang, text in zip((cfg.src_lang, cfg.tgt_lang), pair):
            if not isinstance(text, str | None):  # None: a missing value, cleaned away
                raise ConfigError(
                    f"{origin}: row {number}: '{lang}' is {type(text).__name__}, not text"
                )
    return pairs


# ---------------------------------------------------------------------------- cleaning


def normalize(text: str | None) -> str:
    """Unicode NFC with whitespace runs collapsed to one space and the ends trimmed."""
    return " ".join(unicodedata.normalize("NFC", text or "").split())


def clean(pairs: Sequence[Pair], drops: dict[str, int]) -> list[Pair]:
    """Normalise both sides; drop pairs with an empty side (counted in drops['empty'])."""
    kept = []
    for src, tgt in tqdm(pairs, desc="clean", unit=" pairs", disable=None, leave=False):
        src, tgt = normalize(src), normalize(tgt)
        if src and tgt:
            kept.append((src, tgt))
    drops["empty"] = drops.get("empty", 0) + len(pairs) - len(kept)
    return kept


def source_key(text: str) -> str:
    """What makes two source sentences 'the same' for leakage: case and spacing ignored."""
    return " ".join(text.casefold().split())


def split_by_source(
    pairs: Sequence[Pair], sizes: dict[str, int], seed: int
) -> dict[str, list[Pair]]:
    """Cut held-out splits from `pairs`, keeping every source sentence's pairs together.

    Groups are visited in an order fixed by a seeded hash of their key, so the split is the
    same on every machine and Python version; a group goes whole to one split, hence no source
    sentence of a held-out split occurs in train. Held-out splits are filled to their exact size
    where group sizes allow; original row order is kept inside each split.
    """
    wanted = sum(sizes.values())
    if wanted >= len(pairs):
        names = " + ".join(f"data.{name}_size" for name in sizes)
        raise ConfigError(f"{names} ({wanted}) is not smaller than the corpus ({len(pairs)} pairs)")
    groups: dict[str, list[int]] = {}
    for i, (src, _) in enumerate(pairs):
        groups.setdefault(source_key(src), []).append(i)
    order = sorted(groups, key=lambda k: hashlib.blake2b(f"{seed}\t{k}".encode()).digest())
    chosen: dict[str, list[int]] = {name: [] for name in sizes}
    taken: set[int] = set()
    for name, size in sizes.items():
        for key in order:
            members = groups[key]
            if len(chosen[name]) + len(members) <= size and members[0] not in taken:
                chosen[name] += members
                taken.update(members)
                if len(chosen[name]) == size:
                    break
    out = {name: [pairs[i] for i in sorted(idx)] for name, idx in chosen.items()}
    out["train"] = [p for i, p in enumerate(pairs) if i not in taken]
    return out


def dedup(pairs: Sequence[Pair]) -> list[Pair]:
    """Exact duplicate pairs removed, first occurrence kept."""
    return list(dict.fromkeys(pairs))


# ---------------------------------------------------------------------------- pipeline


def fingerprint(config: Config) -> str:
    """Hash of everything that shapes the prepared data: settings, seed and input files."""
    data = config.data
    inputs: dict[str, Any] = {
        "version": CACHE_VERSION,
        "seed": config.run.seed,
        "data": dataclasses.asdict(data),
        # dropout does not shape the cache; bpe hashes as it did before tokenizer.model existed
        "tokenizer": {
            k: v
            for k, v in dataclasses.asdict(config.tokenizer).items()
            if k != "dropout" and (k, v) != ("model", "bpe")
        },
    }
    if config.train.init:  # its tokenizers, and its corpus where old_share mixes some in
        inputs["init"] = [config.train.init, config.train.old_share]
    if data.source == "files":
        inputs["files"] = {
            name: [_file_id(f) for f in getattr(data.files, name) or []] for name in SPLITS
        }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def inputs_of(config: Config) -> dict[str, Any]:
    """What a run's weights are bound to: the data fingerprint and the sha256 of each tokenizer
    file in the run folder (None where absent). Saved with every checkpoint; a resume compares
    them before anything is rebuilt, so a changed corpus never re-learns the vocabulary under
    trained weights."""
    files = tok.tokenizer_files(
        Path(config.run.dir), config.data.src_lang, config.data.tgt_lang, config.tokenizer.joint
    )
    return {
        "data_fingerprint": fingerprint(config),
        "tokenizers": {p.name: _sha256(p) if p.is_file() else None for p in files},
    }


def prepare(config: Config, rebuild: bool = False, write: bool = True) -> Prepared:
    """Load the cached data of this config, or build and cache it; then (with `write`, which
    only one process of a run may do) describe the run folder: config.yaml and README.md.
    Nothing is written before the data step has succeeded."""
    run_dir = Path(config.run.dir)
    cache = data_dir(run_dir)
    fp = fingerprint(config)
    tok_files = tok.tokenizer_files(
        run_dir, config.data.src_lang, config.data.tgt_lang, config.tokenizer.joint
    )
    prepared = None if rebuild else _load_cache(cache, fp, tok_files)
    if prepared is None and not write:
        raise MtError(f"{cache}: no prepared data for this config; run mt prepare first")
    if prepared is None:
        prepared = _build(config, fp)
        _write_cache(prepared, cache, tok_files)
    if write:
        atomic_write_text(run_dir / CONFIG, dump_config(config))
        atomic_write_text(run_dir / "README.md", RUN_README.format(tokenizer=tok_files[0].name))
    return prepared


RUN_README = """\
# An `mt` run folder

- `config.yaml`: the resolved configuration of the run (every key, defaults included).
- `{tokenizer}` (and its target-side twin if the vocabularies are separate): the byte-level
  BPE (or unigram) tokenizer in the standard `tokenizers` format. Outside `mt`:

      tok = tokenizers.Tokenizer.from_file("{tokenizer}")
      tok.encode_special_tokens = True   # a literal "</s>" in a sentence is text (not saved)
      ids = tok.encode(sentence).ids     # ends with </s> (id 2): what the encoder reads

  Ids 0-3 are <pad> <s> </s> <unk>. The decoder starts from <s>; `tok.decode(ids)` drops
  the special tokens.
- `init.json` (fine-tuned runs only): the checkpoint the run started from.
- `data/`: the cleaned, split and encoded corpus (`meta.json` holds its statistics).
- `metrics.jsonl`: one JSON object a line, `"kind": "train"` or `"valid"`.
- `checkpoints/step-N/`: `model.safetensors` (weights; its metadata holds the config and both
  tokenizers) and `trainer.pt` (optimiser and position, for an exact resume). `last` and
  `best` (by validation BLEU) point at step folders.
"""


def _build(config: Config, fp: str) -> Prepared:
    data = config.data
    raw = load_raw(data)
    if "train" not in raw:
        raise MtError(f"{data.name}: the dataset has no 'train' split (splits: {', '.join(raw)})")
    drops: dict[str, int] = {}
    corpus = {name: clean(pairs, drops) for name, pairs in raw.items() if name in SPLITS}
    missing = {f"{n}": getattr(data, f"{n}_size") for n in ("test", "valid") if n not in corpus}
    if missing:
        corpus.update(split_by_source(corpus.pop("train"), missing, config.run.seed))
    train = dedup(corpus["train"])
    drops["duplicate"] = len(corpus["train"]) - len(train)
    if not train:
        raise MtError("no training pairs are left after cleaning")
    if config.train.old_share:
        train = dedup(train + old_pairs(config, len(train), corpus["valid"] + corpus["test"]))
    if config.train.init:  # fine-tuning: the vocabulary its model was trained with
        from .checkpoint import read_tokenizers, resolve

        src_tok, tgt_tok = read_tokenizers(resolve(config.train.init))
    else:
        src_tok, tgt_tok = tok.train_tokenizers(
            [s for s, _ in train], [t for _, t in train], config.tokenizer
        )
    splits = {}
    for name in SPLITS:
        pairs = train if name == "train" else corpus[name]
        src_text, tgt_text = [s for s, _ in pairs], [t for _, t in pairs]
        src_ids, tgt_ids = tok.encode(src_tok, src_text), tok.encode(tgt_tok, tgt_text)
        if name == "train":
            keep = _length_filter(src_ids, tgt_ids, data.max_length, data.max_ratio, drops)
            src_ids = [src_ids[i] for i in keep]
            tgt_ids = [tgt_ids[i] for i in keep]
            src_text, tgt_text = [], []  # the text of train is not needed after encoding
        splits[name] = Split(
            [np.asarray(x, np.int32) for x in src_ids],
            [np.asarray(x, np.int32) for x in tgt_ids],
            src_text,
            tgt_text,
        )
    held_out = {
        lang: [text for name in ("valid", "test") for text in getattr(splits[name], f"{lang}_text")]
        for lang in ("src", "tgt")
    }
    stats = {
        "fingerprint": fp,
        "pairs": {name: len(split) for name, split in splits.items()},
        "dropped": drops,
        "tokens": {
            name: {"src": int(sum(map(len, s.src))), "tgt": int(sum(map(len, s.tgt)))}
            for name, s in splits.items()
        },
        "vocab_size": {"src": src_tok.get_vocab_size(), "tgt": tgt_tok.get_vocab_size()},
        "round_trip": {
            "src": tok.round_trip_rate(src_tok, held_out["src"]),
            "tgt": tok.round_trip_rate(tgt_tok, held_out["tgt"]),
            "sentences": len(held_out["src"]) + len(held_out["tgt"]),
        },
    }
    return Prepared(splits, src_tok, tgt_tok, stats, reused=False)


def old_pairs(config: Config, new: int, held_out: Sequence[Pair]) -> list[Pair]:
    """Pairs of train.init's own training corpus, a seeded sample that makes `train.old_share`
    of the training pairs beside `new` new ones (all there are, if fewer), none with the source
    of a held-out pair: rehearsing the old data makes fine-tuning forget less of it."""
    from .checkpoint import read_config

    share = config.train.old_share
    old = read_config(config.train.init).data
    pairs = dedup(clean(load_raw(old).get("train", []), {}))
    keys = {source_key(src) for src, _ in held_out}
    pairs = [pair for pair in pairs if source_key(pair[0]) not in keys]
    count = min(len(pairs), round(new * share / (1 - share)))
    pick = np.random.default_rng(config.run.seed).choice(len(pairs), count, replace=False)
    return [pairs[i] for i in sorted(pick)]


def dropout_epochs(prepared: Prepared, config: Config) -> Callable[[int], Split] | None:
    """With tokenizer.dropout: epoch -> the training pairs segmented anew by BPE-dropout, a
    function of (run.seed, epoch) alone, so that a resumed run (or another process) redoes an
    epoch exactly. A pair that comes out longer than data.max_length keeps its usual ids.
    None without dropout."""
    if not config.tokenizer.dropout:
        return None
    train, limit = prepared.splits["train"], config.data.max_length
    pairs = ((prepared.src_tokenizer, train.src), (prepared.tgt_tokenizer, train.tgt))
    sides = [tok.BpeDropout(tokenizer, config.tokenizer.dropout, ids) for tokenizer, ids in pairs]

    def epoch_split(epoch: int) -> Split:
        rng = np.random.default_rng([config.run.seed, epoch, 1])  # not token_batches' stream
        src, tgt = (side.sample(rng) for side in sides)
        fits = [len(s) <= limit and len(t) <= limit for s, t in zip(src, tgt)]
        return Split(
            [s if ok else old for s, old, ok in zip(src, train.src, fits)],
            [t if ok else old for t, old, ok in zip(tgt, train.tgt, fits)],
        )

    return epoch_split


def _length_filter(
    src: list[list[int]],
    tgt: list[list[int]],
    max_length: int,
    max_ratio: float,
    drops: dict[str, int],
) -> list[int]:
    """Indices of pairs within the length and ratio limits; the rest are counted in drops."""
    src_len = np.fromiter(map(len, src), np.int64, len(src))
    tgt_len = np.fromiter(map(len, tgt), np.int64, len(tgt))
    too_long = (src_len > max_length) | (tgt_len > max_length)
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~too_long & (ratio > max_ratio)
    drops["too_long"] = int(too_long.sum())
    drops["ratio"] = int(bad_ratio.sum())
    return np.flatnonzero(~(too_long | bad_ratio)).tolist()


# ---------------------------------------------------------------------------- cache


def _write_cache(prepared: Prepared, cache: Path, tok_files: tuple[Path, Path]) -> None:
    """Write into a temporary folder, then swap it in: an interrupted write leaves the old cache."""
    with atomic_path(cache) as tmp:
        tmp.mkdir()
        for name, split in prepared.splits.items():
            np.savez(
                tmp / f"{name}.npz", **_flatten(split.src, "src"), **_flatten(split.tgt, "tgt")
            )
            if split.src_text:
                with open(tmp / f"{name}.jsonl", "w", encoding="utf-8") as f:
                    for src, tgt in zip(split.src_text, split.tgt_text):
                        f.write(json.dumps({"src": src, "tgt": tgt}, ensure_ascii=False) + "\n")
        for path, tokenizer in zip(tok_files, (prepared.src_tokenizer, prepared.tgt_tokenizer)):
            atomic_write_text(path, tokenizer.to_str(pretty=True))
        meta = {
            "fingerprint": prepared.stats["fingerprint"],
            "stats": prepared.stats,
            "tokenizers": {p.name: _sha256(p) for p in tok_files},
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _load_cache(cache: Path, fp: str, tok_files: tuple[Path, Path]) -> Prepared | None:
    try:
        meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
        if meta["fingerprint"] != fp or any(
            not p.is_file() or _sha256(p) != meta["tokenizers"].get(p.name) for p in tok_files
        ):
            return None
        splits = {}
        for name in SPLITS:
            arrays = np.load(cache / f"{name}.npz")
            texts = list(_read_jsonl(cache / f"{name}.jsonl")) if name != "train" else []
            splits[name] = Split(
                _unflatten(arrays, "src"),
                _unflatten(arrays, "tgt"),
                [t["src"] for t in texts],
                [t["tgt"] for t in texts],
            )
        src_tok, tgt_tok = (Tokenizer.from_file(str(p)) for p in tok_files)
    except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile, MtError):
        return None  # missing or damaged cache: rebuild it
    return Prepared(splits, src_tok, tgt_tok, meta["stats"], reused=True)


def _flatten(seqs: list[np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))
    flat = np.concatenate(seqs) if seqs else np.zeros(0, np.int32)
    return {f"{prefix}_ids": flat.astype(np.int32), f"{prefix}_lengths": lengths}


def _unflatten(arrays: Any, prefix: str) -> list[np.ndarray]:
    ids, lengths = arrays[f"{prefix}_ids"], arrays[f"{prefix}_lengths"]
    return np.split(ids, np.cumsum(lengths)[:-1]) if len(lengths) else []


def read_pairs(files: list[str], cfg: DataConfig, key: str) -> list[Pair]:
    """Normalised (source, target) pairs from files in any corpus format and schema that
    training reads (`key` names the option they came from, for messages)."""
    return [(normalize(src), normalize(tgt)) for src, tgt in _file_pairs(files, cfg, key)]


def read_lines(path: str, option: str) -> list[str]:
    """The lines of a UTF-8 text file, or of stdin for "-"; an encoding error or a NUL byte
    (a binary file, not text: refused) names the file and the line."""
    name = "stdin" if path == "-" else f"{option} {path}"
    if path == "-":
        stream = sys.stdin
        data = (
            stream.buffer.read()
            if hasattr(stream, "buffer")
            else stream.read().encode("utf-8", "surrogateescape")
        )
    elif not Path(path).is_file():
        raise ConfigError(f"{option} {path}: no such file")
    else:
        data = Path(path).read_bytes()
    return decode_text(data, name).splitlines()


def decode_text(data: bytes, name: str, line: int = 1) -> str:
    """UTF-8 text (a byte-order mark dropped), or a one-line error naming the line at fault
    (`data` begins at line `line` of `name`)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line += data[: e.start].count(b"\n")
        byte = e.start - data.rfind(b"\n", 0, e.start) - 1  # counted from the line's start
        why = f"{e.reason} at byte {byte} of the line"
        raise ConfigError(f"{name}:{line}: not UTF-8 text ({why})") from None
    if "\0" in text:
        line += text[: text.index("\0")].count("\n")
        raise ConfigError(f"{name}:{line}: a NUL byte, so not a text file; refusing it")
    return text


def read_pairs_jsonl(path: str | Path, src_lang: str, tgt_lang: str) -> list[Pair]:
    """(source, target) pairs of a JSON Lines file, optionally gzipped, normalised."""
    pairs = []
    for number, row in enumerate(_read_jsonl(Path(path)), start=1):
        if not isinstance(row, dict) or src_lang not in row or tgt_lang not in row:
            raise MtError(f"{path}:{number}: expected an object with '{src_lang}' and '{tgt_lang}'")
        pairs.append((normalize(row[src_lang]), normalize(row[tgt_lang])))
    return pairs


def _read_jsonl(path: Path, name: str = "") -> Iterator[Any]:
    """The values of a JSON Lines file, optionally gzipped; a line that is not UTF-8 JSON is
    an error naming `name` (the path by default) and the line."""
    name = name or str(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for number, data in enumerate(f, start=1):
            line = decode_text(data, name, number)
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{name}:{number}: invalid JSON: {e.msg}") from None


def _file_id(path: str) -> list[Any]:
    try:
        stat = Path(path).stat()
    except OSError as e:
        raise ConfigError(f"data.files: {path}: {e.strerror}") from None
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- batching


def token_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
) -> list[np.ndarray]:
    """Sentence indices grouped into batches of at most `max_tokens` padded tokens.

    Sentences are sorted by length (ties broken at random, so buckets differ between
    epochs), packed greedily, and the batches are then shuffled. A batch costs
    sentences x (longest source or target + 1 for EOS/BOS). The order depends only on
    (seed, epoch): resuming rebuilds exactly the same epoch.
    """
    rng = np.random.default_rng([seed, epoch])
    tie = rng.random(len(src_lengths)) if shuffle else np.arange(len(src_lengths))
    order = np.lexsort((tie, src_lengths, tgt_lengths))
    batches, start, longest = [], 0, 0
    cost = np.maximum(src_lengths, tgt_lengths)[order] + 1
    for i, c in enumerate(cost.tolist()):
        longest_if_added = max(longest, c)
        if i > start and (i - start + 1) * longest_if_added > max_tokens:
            batches.append(order[start:i])
            start, longest_if_added = i, c
        longest = longest_if_added
    if start < len(order):
        batches.append(order[start:])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def collate(split: Split, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded arrays for a batch: src + EOS, BOS + tgt (decoder input), tgt + EOS (labels)."""
    src = [split.src[i] for i in index]
    tgt = [split.tgt[i] for i in index]
    return pad_batch(src, suffix=EOS), pad_batch(tgt, prefix=BOS), pad_batch(tgt, suffix=EOS)


def pad_batch(
    seqs: Sequence[Sequence[int]], prefix: int | None = None, suffix: int | None = None
) -> np.ndarray:
    """Sequences as the rows of a PAD-filled (B, longest + extras) int64 array, each with an
    optional token before (BOS) and after (EOS): one scatter, no loop over the rows."""
    lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))  # (B,)
    start = int(prefix is not None)
    out = np.full((len(seqs), int(lengths.max()) + start + (suffix is not None)), PAD, np.int64)
    columns = np.arange(out.shape[1])
    # row-major order of the mask matches the order of the concatenated tokens
    out[(columns >= start) & (columns < start + lengths[:, None])] = np.concatenate(seqs)
    if prefix is not None:
        out[:, 0] = prefix
    if suffix is not None:
        out[np.arange(len(seqs)), start + lengths] = suffix
    return out
