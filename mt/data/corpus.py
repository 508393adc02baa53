"""Reading corpora: every format `mt` takes, in chunks of raw pairs, so that no reader holds a
whole corpus; and the normalisation every command reading sentences shares (a command's own
text files, a line a text, are read by mt.data.text_input).

A split of `data.files` is a list of corpora, each an entry of the config:

    - corpus.jsonl.gz                  # JSON Lines (.json too), CSV, TSV or Parquet
    - {path: more.tsv, weight: 2}      # the same, weighted
    - {en: corpus.en, es: corpus.es}   # aligned plain text, one sentence a line (gzip too)

The files of a format `datasets` reads are loaded by its builders (Arrow, memory-mapped) and
read a chunk at a time; aligned text is read line by line in step on both sides.
"""

from __future__ import annotations

import gzip
import json
import sys
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any

from ..config import DataConfig
from ..errors import ConfigError, InputError, MtError, one_line
from .text_input import decode_text

SPLITS = ("train", "valid", "test")
CHUNK = 1 << 15  # pairs read, normalised and encoded together
Pair = tuple[str, str]
Chunk = tuple[list[Any], list[Any]]  # raw source and target texts (None: a missing value)


@dataclass
class Corpus:
    """One corpus of a split: where it comes from and the share of an epoch it gets."""

    name: str  # for messages: the option and its files
    files: list[str]  # local files, watched for changes while they are prepared
    weight: float | None  # share of each epoch's pairs (train); None: its own size
    read: Callable[[], Iterator[Chunk]]  # every call reads the corpus anew, chunk by chunk
    tag: str | None = None  # put before each of its sources (data.files.train's `tag`)


def corpora(cfg: DataConfig) -> dict[str, list[Corpus]]:
    """The corpora of each split the source provides (train at least, or an error)."""
    if cfg.source == "hub":
        found = {name: [corpus] for name, corpus in _hub(cfg).items() if name in SPLITS}
    else:
        found = {}
        for name in SPLITS:
            entries = getattr(cfg.files, name) or []
            key = f"data.files.{name}"
            found.update({name: [_entry(entry, cfg, key) for entry in entries]} if entries else {})
    if "train" not in found:
        raise MtError(f"{cfg.name}: the dataset has no 'train' split (splits: {', '.join(found)})")
    return found


def entry_files(entry: str | dict[str, Any], cfg: DataConfig) -> list[str]:
    """The files of a `data.files` entry: its path, or its two aligned sides."""
    if isinstance(entry, str):
        return [entry]
    if "path" in entry:
        return [entry["path"]]
    return [entry[cfg.src_lang], entry[cfg.tgt_lang]]


def _entry(entry: str | dict[str, Any], cfg: DataConfig, key: str) -> Corpus:
    files = entry_files(entry, cfg)
    weight = None if isinstance(entry, str) else entry.get("weight")
    tag = None if isinstance(entry, str) else entry.get("tag")
    for file in files:
        if Path(file).is_file() and Path(file).stat().st_size == 0:
            raise InputError(f"{key}: {file}: an empty file")
    name = f"{key}: {', '.join(files)}"
    if len(files) == 2:
        return Corpus(name, files, weight, _tagged(lambda: _aligned(*files, key), tag), tag)
    dataset = _load_file(files[0], key)
    read = _tagged(lambda: _rows(dataset, cfg, name, files[0]), tag)
    return Corpus(name, files, weight, read, tag)


def _tagged(read: Callable[[], Iterator[Chunk]], tag: str | None) -> Callable[[], Iterator[Chunk]]:
    """`read` with `tag` and a space before each source (None: as it is); a source without
    text stays without, and is dropped as empty."""
    if tag is None:
        return read
    return lambda: (
        ([f"{tag} {s}" if s and not s.isspace() else s for s in src], tgt) for src, tgt in read()
    )


def corpus_tags(cfg: DataConfig) -> list[str]:
    """The tags of the training corpora (data.files.train entries' `tag`), in order."""
    entries = (cfg.files.train or []) if cfg.source == "files" else []
    tags = [e["tag"] for e in entries if isinstance(e, dict) and e.get("tag")]
    return list(dict.fromkeys(tags))


# ---------------------------------------------------------------------------- aligned text


def _aligned(src: str, tgt: str, key: str) -> Iterator[Chunk]:
    """Line n of `src` with line n of `tgt`; the files must have as many lines."""
    with _open(src, key) as a, _open(tgt, key) as b:
        line = 1
        while True:
            xs, ys = _read(a, src, key), _read(b, tgt, key)
            if len(xs) != len(ys):
                counts = [line - 1 + len(x) + sum(1 for _ in f) for x, f in ((xs, a), (ys, b))]
                raise InputError(
                    f"{key}: {src} has {counts[0]:,} lines and {tgt} {counts[1]:,}: aligned "
                    "files need one sentence a line on both sides"
                )
            if not xs:
                return
            yield _lines(xs, src, key, line), _lines(ys, tgt, key, line)
            line += len(xs)


def _open_bytes(path: str | Path) -> IO[bytes]:
    """A file to read as bytes, gunzipped where its name ends in .gz."""
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def _open(path: str, key: str) -> IO[bytes]:
    try:
        return _open_bytes(path)
    except OSError as e:
        raise InputError(f"{key}: {path}: cannot read: {e.strerror}") from None


def _read(f: IO[bytes], path: str, key: str) -> list[bytes]:
    try:
        return list(islice(f, CHUNK))
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise InputError(f"{key}: {path}: not a readable gzip file ({one_line(e)})") from None


def _lines(data: list[bytes], path: str, key: str, first: int) -> list[str]:
    """The lines as text (a CR before the LF is whitespace that normalising drops)."""
    text = decode_text(b"".join(data), f"{key}: {path}", first)
    return text.split("\n")[: len(data)]


# ---------------------------------------------------------------------------- datasets


def _datasets() -> Any:
    """`datasets`, imported only when needed (it is slow to import), quiet off a terminal:
    its bars redraw with \r, which is noise in a log file."""
    import datasets

    if not sys.stderr.isatty():
        datasets.disable_progress_bars()
    return datasets


def _hub(cfg: DataConfig) -> dict[str, Corpus]:
    """The splits of a Hugging Face dataset; `data.streaming` reads them without a download
    of the whole (`datasets`' streaming)."""
    datasets = _datasets()
    try:
        loaded = datasets.load_dataset(cfg.name, cfg.subset, streaming=cfg.streaming)
    except Exception as e:  # hub, network and dataset errors all end up here
        raise MtError(
            f"cannot load {cfg.name} ({cfg.subset}) through Hugging Face datasets: "
            f"{type(e).__name__}: {one_line(e)}; to use local files set data.source: files "
            "and data.files.train: PATH"
        ) from None
    return {
        name: Corpus(
            f"{cfg.name}[{name}]",
            [],
            None,
            lambda d=split, n=name: _rows(d, cfg, f"{cfg.name}[{n}]"),
        )
        for name, split in loaded.items()
    }


def _load_file(file: str, key: str) -> Any:
    """A local file read by `datasets`' own builder for its extension."""
    datasets = _datasets()
    kind = _file_kind(file)
    if kind is None:
        raise ConfigError(
            f"{key}: {file}: expected .jsonl, .json (optionally .gz), .csv, .tsv or .parquet, "
            "or aligned plain text as {en: FILE, es: FILE}"
        )
    options: dict[str, Any] = {}
    if kind == "tsv":
        kind, options = "csv", {"delimiter": "\t", "quoting": 3}  # 3: csv.QUOTE_NONE
    if kind == "csv":
        options["keep_default_na"] = False  # a sentence "None", "NA" or "null" is text
    level = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors: a 2nd line of ours
    try:
        return datasets.load_dataset(kind, data_files=[file], split="train", **options)
    except Exception as e:
        if file.lower().removesuffix(".gz").endswith(".jsonl"):  # name the first bad line
            with suppress(OSError, EOFError, zlib.error):  # not gzip after all: said below
                for _ in read_jsonl(Path(file), f"{key}: {file}"):
                    pass
        why = one_line(e.__cause__ or e) or type(e).__name__
        raise InputError(f"{key}: cannot read {file}: {why}") from None
    finally:
        datasets.logging.set_verbosity(level)


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


def _rows(dataset: Any, cfg: DataConfig, origin: str, file: str = "") -> Iterator[Chunk]:
    """Rows in the flat {"en", "es"} or nested {"translation": {...}} schema, a chunk at a
    time; text that is not UTF-8 is named by file and line (`datasets` decodes lazily)."""
    try:
        number = 1
        for rows in dataset.iter(batch_size=CHUNK):
            chunk = _columns(rows, cfg, origin)
            for lang, side in zip((cfg.src_lang, cfg.tgt_lang), chunk):
                for i, text in enumerate(side):
                    if not isinstance(text, str | None):  # None: a missing value, cleaned away
                        raise InputError(
                            f"{origin}: row {number + i}: '{lang}' is {type(text).__name__}, "
                            "not text"
                        )
            number += len(chunk[0])
            yield chunk
    except UnicodeDecodeError:
        if file:
            with _open_bytes(file) as f:
                decode_text(f.read(), origin)
        raise InputError(f"{origin}: not UTF-8 text") from None


def _columns(rows: dict[str, list[Any]], cfg: DataConfig, origin: str) -> Chunk:
    if cfg.src_lang in rows and cfg.tgt_lang in rows:
        return rows[cfg.src_lang], rows[cfg.tgt_lang]
    nested = rows.get("translation")
    if nested and isinstance(nested[0], dict) and {cfg.src_lang, cfg.tgt_lang} <= set(nested[0]):
        return [r[cfg.src_lang] for r in nested], [r[cfg.tgt_lang] for r in nested]
    raise MtError(
        f"{origin}: no '{cfg.src_lang}' and '{cfg.tgt_lang}' fields (columns: {', '.join(rows)})"
    )


# ---------------------------------------------------------------------------- text


def normalize(text: str | None) -> str:
    """Unicode NFC with whitespace runs collapsed to one space and the ends trimmed."""
    return " ".join(unicodedata.normalize("NFC", text or "").split())


def read_pairs(files: list[str], cfg: DataConfig, key: str) -> list[Pair]:
    """Normalised (source, target) pairs from files in any corpus format and schema that
    training reads (`key` names the option they came from, for messages)."""
    return [
        (normalize(src), normalize(tgt))
        for file in files
        for chunk in _entry(file, cfg, key).read()
        for src, tgt in zip(*chunk)
    ]


def read_pairs_jsonl(path: str | Path, src_lang: str, tgt_lang: str) -> list[Pair]:
    """(source, target) pairs of a JSON Lines file, optionally gzipped, normalised."""
    pairs = []
    for number, row in enumerate(read_jsonl(Path(path)), start=1):
        if not isinstance(row, dict) or src_lang not in row or tgt_lang not in row:
            raise MtError(f"{path}:{number}: expected an object with '{src_lang}' and '{tgt_lang}'")
        pairs.append((normalize(row[src_lang]), normalize(row[tgt_lang])))
    return pairs


def read_jsonl(path: Path, name: str = "") -> Iterator[Any]:
    """The values of a JSON Lines file, optionally gzipped; a line that is not UTF-8 JSON is
    an error naming `name` (the path by default) and the line."""
    name = name or str(path)
    with _open_bytes(path) as f:
        for number, data in enumerate(f, start=1):
            line = decode_text(data, name, number)
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{name}:{number}: invalid JSON: {e.msg}") from None
