"""The checks of a whole config, each mistake one line naming the file and the key
(`check_config`, which `mt.config_file` runs on every config it reads), and those only
training needs (`check_training_stops`)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from .config import (
    DECAYING,
    MOST_PLACEHOLDERS,
    SPECIAL_TOKENS,
    Config,
    DataConfig,
    DecodeConfig,
    Entry,
    TokenizerConfig,
    beam_holds,
    longest_sequence,
)
from .errors import ConfigError

Fail = Callable[[str, str], NoReturn]  # raises the ConfigError of a key and its message


def check_config(config: Config, origin: str, check_files: bool = True) -> None:
    """Cross-key checks that a type alone cannot express, section by section; the first
    mistake raises a ConfigError naming `origin` and the key."""

    def fail(key: str, message: str) -> NoReturn:
        raise ConfigError(f"{origin}: {key}: {message}")

    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", config.run.device):
        fail("run.device", f"{config.run.device!r}: expected auto, cpu, cuda, cuda:N or mps")
    _check_model(config, fail)
    _check_tokenizer(config.tokenizer, fail)
    _check_train(config, fail)
    _check_decode(config.decode, fail)
    _check_data(config, fail, check_files)


def _check_model(config: Config, fail: Fail) -> None:
    m = config.model
    _positive(fail, "model.", m, "d_model", "heads", "d_ff", "max_positions")
    _positive(fail, "model.", m, "encoder_layers", "decoder_layers")
    if m.d_model % m.heads:
        fail("model.d_model", f"{m.d_model} is not divisible by model.heads ({m.heads})")
    _fractions(fail, "model.", m, "dropout", "attention_dropout")
    _non_negative(fail, "model.", m, "pad_id", "bos_id", "eos_id")
    if m.eos_id in (m.pad_id, m.bos_id):
        fail("model.eos_id", f"{m.eos_id} is also model.pad_id or model.bos_id")
    weights = 4 * parameter_count(config)  # float32, before gradients and optimiser state
    if weights > _memory_bytes():
        fail(
            "model.d_model",
            f"the weights alone would take {weights / 2**30:,.0f} GiB, more than this "
            f"machine's {_memory_bytes() / 2**30:,.0f} GiB of memory",
        )


def _check_tokenizer(tok: TokenizerConfig, fail: Fail) -> None:
    _fractions(fail, "tokenizer.", tok, "dropout")
    if tok.vocab_size < len(SPECIAL_TOKENS) + 256:
        fail(
            "tokenizer.vocab_size",
            f"{tok.vocab_size} is smaller than the "
            f"{len(SPECIAL_TOKENS)} special tokens plus the 256 byte symbols",
        )
    _positive(fail, "tokenizer.", tok, "min_frequency")
    if not 0 <= tok.placeholders <= MOST_PLACEHOLDERS:
        fail(
            "tokenizer.placeholders", f"must be in [0, {MOST_PLACEHOLDERS}], got {tok.placeholders}"
        )
    if tok.dropout and tok.model != "bpe":
        fail("tokenizer.dropout", f"BPE-dropout needs tokenizer.model bpe, not {tok.model}")


def _check_train(config: Config, fail: Fail) -> None:
    t = config.train
    _fractions(fail, "train.", t, "label_smoothing", "old_share", "join", "join_clauses")
    _fractions(fail, "train.", t, "join_pieces", "lowered_starts", "placeholders", "ema")
    if t.join_most < 2:
        fail("train.join_most", f"joins 2 pairs at least, got {t.join_most}")
    if t.placeholders and not config.tokenizer.placeholders:
        fail("train.placeholders", "needs placeholder tokens: set tokenizer.placeholders")
    _positive(fail, "train.", t, "max_tokens", "accum_steps", "eval_every", "save_every")
    _positive(fail, "train.", t, "keep_last", "log_every", "warmup_steps", "health_patience")
    _non_negative(fail, "train.", t, "max_steps", "max_epochs", "max_minutes", "patience")
    _non_negative(fail, "train.", t, "clip_norm", "weight_decay", "eval_sentences")
    _non_negative(fail, "train.", t, "eval_examples", "lr_scale", "lr", "min_lr", "pack_length")
    if t.old_share and not t.init:
        fail("train.old_share", "mixes in the corpus of train.init, which is not set")
    if t.schedule in DECAYING and not (t.max_steps or t.max_minutes):
        fail(
            "train.schedule",
            f"{t.schedule} decays to train.min_lr at a horizon: set train.max_minutes (the "
            "horizon is then what fits in it) or train.max_steps",
        )
    if not 0.0 <= t.warmup_fraction <= 0.5:
        fail("train.warmup_fraction", f"must be in [0, 0.5], got {t.warmup_fraction}")
    if t.warmup_fraction and t.schedule not in DECAYING:  # else its rate would stay 0
        fail(
            "train.warmup_fraction",
            f"is a fraction of a horizon, which {t.schedule} has not; set train.warmup_steps",
        )
    if t.min_lr > t.lr:
        fail("train.min_lr", f"{t.min_lr} is above the peak train.lr ({t.lr})")
    if t.pack_length and t.pack_length < longest_sequence(config.data):
        fail(
            "train.pack_length",
            f"{t.pack_length} is below data.max_length + 1 ({longest_sequence(config.data)}): "
            "the longest sentences would not fit a row",
        )


def _check_decode(d: DecodeConfig, fail: Fail) -> None:
    _positive(fail, "decode.", d, "beam", "nbest")
    _non_negative(fail, "decode.", d, "alpha", "max_len_a", "max_len_b", "no_repeat_ngram")
    _non_negative(fail, "decode.", d, "batch_tokens", "piece_tokens")
    if not 0 <= d.coverage < 1:
        fail("decode.coverage", f"must be in [0, 1), got {d.coverage}")
    if not d.sampling and not beam_holds(d.nbest, d.beam):
        fail("decode.nbest", f"{d.nbest} is larger than decode.beam ({d.beam})")
    if d.temperature <= 0:
        fail("decode.temperature", f"must be above 0, got {d.temperature}")
    if not 0 < d.top_p <= 1:
        fail("decode.top_p", f"must be in (0, 1], got {d.top_p}")
    _non_negative(fail, "decode.", d, "top_k")
    if not d.sampling:  # what only sampling reads, refused where search would ignore it
        for key, default in (("temperature", 1.0), ("top_k", 0), ("top_p", 1.0)):
            if getattr(d, key) != default:
                fail(f"decode.{key}", "applies to decode.sampling only, which is false")


def _check_data(config: Config, fail: Fail, check_files: bool) -> None:
    data = config.data
    _positive(fail, "data.", data, "max_length")
    _non_negative(fail, "data.", data, "valid_size", "test_size")
    if data.max_ratio < 1.0:
        fail("data.max_ratio", f"must be at least 1, got {data.max_ratio}")
    if data.src_lang == data.tgt_lang:
        fail("data.tgt_lang", f"is the same language as data.src_lang ({data.src_lang})")
    train = data.files.train or []
    if data.both_directions and not config.tokenizer.joint:
        fail("data.both_directions", "needs tokenizer.joint: true (sources in both languages)")
    if data.both_directions and any(isinstance(e, dict) and e.get("tag") for e in train):
        fail("data.both_directions", "a tagged corpus (data.files.train's tag) reads one way")
    _check_corpora(config, check_files, fail)


def _check_corpora(config: Config, check_files: bool, fail: Fail) -> None:
    """How the corpus is read and prepared: workers, the sample, the corpora of data.files."""
    if not 0 <= config.data.workers <= 256:
        fail("data.workers", f"must be in [0, 256] (0: one per core), got {config.data.workers}")
    _positive(fail, "tokenizer.", config.tokenizer, "sample")
    if config.data.source == "files":
        if not config.data.files.train:
            fail("data.files.train", "required when data.source is files")
        for split in ("train", "valid", "test"):
            for entry in getattr(config.data.files, split) or []:
                _check_entry(entry, config.data, f"data.files.{split}", check_files, fail)


def _check_entry(entry: Entry, data: DataConfig, key: str, check_files: bool, fail: Fail) -> None:
    """A corpus of data.files: a path, {path, weight} or {src_lang: FILE, tgt_lang: FILE,
    weight}, with files that exist (when checked) and a positive weight (train only)."""
    if isinstance(entry, dict):
        sides = {data.src_lang, data.tgt_lang}
        wanted, optional = ({"path"}, sides), {"weight", "tag"}
        if not any(set(entry) - optional == keys for keys in wanted):
            fail(
                key,
                f"{entry}: a corpus is a path, {{path: FILE, weight: W}} or aligned text "
                f"{{{data.src_lang}: FILE, {data.tgt_lang}: FILE, weight: W}}",
            )
        weight = entry.get("weight")
        if weight is not None and not key.endswith("train"):
            fail(key, "weight: only training corpora have weights")
        if weight is not None and (
            isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0
        ):
            fail(key, f"weight: must be a positive number, got {weight!r}")
        tag = entry.get("tag")
        if tag is not None and not (key.endswith("train") and re.fullmatch(r"<\w+>", str(tag))):
            fail(key, f"tag: {tag!r}: a training corpus's tag is a word in <>, such as <bt>")
        if tag in SPECIAL_TOKENS:
            fail(key, f"tag: {tag} is a special token")
        for name in set(entry) - optional:
            if not isinstance(entry[name], str):
                fail(key, f"{name}: expected a file name, got {describe(entry[name])}")
        files = [entry[name] for name in sorted(set(entry) - optional)]
    else:
        files = [entry]
    for file in files if check_files else ():
        if not Path(file).is_file():
            fail(key, f"no such file: {file}{_where_from(file)}")


# Where the shipped recipes' corpora come from, for whoever has not made them yet
TATOEBA_HINT = (
    " (the Tatoeba recipe's data: download the Tatoeba/Anki spa-eng pairs, "
    "https://www.manythings.org/anki/spa-eng.zip, then `python scripts/tatoeba_files.py "
    "spa-eng.zip ../shared/data` makes its train, valid and test files; docs/data.md)"
)


def _where_from(file: str) -> str:
    return TATOEBA_HINT if Path(file).name.startswith("tatoeba_en_es.") else ""


def _positive(fail: Fail, section: str, values: Any, *keys: str) -> None:
    for key in keys:
        if (value := getattr(values, key)) <= 0:
            fail(section + key, f"must be positive, got {value}")


def _non_negative(fail: Fail, section: str, values: Any, *keys: str) -> None:
    for key in keys:
        value = getattr(values, key)
        if not math.isfinite(value):  # NaN passes every comparison below
            fail(section + key, f"must be a finite number, got {value}")
        if value < 0:
            fail(section + key, f"must not be negative, got {value}")


def _fractions(fail: Fail, section: str, values: Any, *keys: str) -> None:
    for key in keys:
        if not 0.0 <= (value := getattr(values, key)) < 1.0:
            fail(section + key, f"must be in [0, 1), got {value}")


def parameter_count(config: Config) -> int:
    """About how many parameters the model of `config` has (embeddings at the full vocabulary,
    separate ones per side unless the tokenizer is joint)."""
    m, d = config.model, config.model.d_model
    layer = 4 * d * d + 2 * d * m.d_ff  # attention projections and the feed-forward pair
    embeddings = config.tokenizer.vocab_size * d * (1 if config.tokenizer.joint else 2)
    return embeddings + m.encoder_layers * layer + m.decoder_layers * (layer + 4 * d * d)


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_training_stops(config: Config, origin: str) -> None:
    """Training needs a limit, and positions for its longest sentences; preparing data or
    decoding does not, so this is not `check_config`."""
    t, m = config.train, config.model
    longest = longest_sequence(config.data)
    if m.max_positions < longest:
        raise ConfigError(
            f"{origin}: model.max_positions: {m.max_positions} is below data.max_length + 1 "
            f"({longest}): the longest training sentences would not fit the positional encodings"
        )
    if not (t.max_steps or t.max_epochs or t.max_minutes or t.patience):
        raise ConfigError(
            f"{origin}: train.max_steps: training would never stop: set train.max_minutes "
            "(a wall-clock budget), max_steps, max_epochs or patience"
        )


def describe(value: Any) -> str:
    """A value as a message names it: its type and repr ("nothing" for None)."""
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"
