"""Experiment configuration: six sections of typed dataclasses, every key with its default
documented beside it, and the checks of a whole config (`check_config`), so that a mistake is
reported once, as one line naming the file and the key. Reading and writing config files is
`mt.config_file`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from .errors import ConfigError

DECAYING = ("cosine", "linear")  # schedules that reach train.min_lr at a horizon


def resumable(default: Any) -> Any:
    """A key that may change between a stop and a resume: it decides when to stop, where files
    go or how the model is used afterwards, not what training computes, so the resumed run
    still matches an uninterrupted one."""
    return field(default=default, metadata={"resumable": True})


@dataclass
class RunConfig:
    dir: str = resumable("")  # run folder; "" means runs/<config file name without .yaml>
    seed: int = 1234  # seeds the split, batch order, initialisation and dropout
    device: str = resumable("auto")  # auto (cuda, then mps, then cpu) | cuda | cuda:N | mps | cpu


# A corpus of data.files: a path (.jsonl/.json[.gz], .csv, .tsv, .parquet), or a mapping:
# {path: FILE, weight: W}, or aligned plain text {en: FILE, es: FILE, weight: W} (the keys
# are data.src_lang and data.tgt_lang; one sentence a line, .gz too). weight (train only):
# the share of each epoch's pairs drawn from the corpus, relative to the others' (a corpus
# without one weighs 1); with no weight at all, every pair comes once an epoch. tag (train
# only): a token such as <bt> put before each source of the corpus (back-translation, Caswell
# et al., 2019), reserved in the source tokenizer as one token it never splits
Entry = str | dict[str, Any]


@dataclass
class DataFiles:
    train: list[Entry] | None = None  # a corpus or a list of them, read in order
    valid: list[Entry] | None = None  # optional: cut from train when absent
    test: list[Entry] | None = None  # optional: cut from train when absent


@dataclass
class DataConfig:
    source: Literal["hub", "files"] = "hub"  # hub: datasets.load_dataset(name, subset)
    name: str = "Helsinki-NLP/opus_books"  # Hugging Face dataset name (source: hub)
    subset: str = "en-es"  # its configuration name (source: hub)
    files: DataFiles = field(default_factory=DataFiles)  # local files (source: files)
    src_lang: str = "en"
    tgt_lang: str = "es"
    valid_size: int = 1000  # pairs cut from train for validation when no valid file is given
    test_size: int = 1000  # pairs cut from train for testing when no test file is given
    max_length: int = 128  # drop training pairs longer than this many subword tokens on a side
    max_ratio: float = 3.0  # drop training pairs whose token-length ratio exceeds this
    workers: int = 0  # processes that normalise and encode in mt prepare; 0: one per core
    streaming: bool = False  # source hub: read through datasets' streaming, no full download
    # drop training pairs whose target copies the source, or with a side identified as the
    # other language (src_lang <-> tgt_lang) with high confidence (mt.data.language)
    filter_language: bool = False


def longest_sequence(data: DataConfig) -> int:
    """Positions the longest training sentence takes: data.max_length tokens and its EOS
    (source) or BOS (target)."""
    return data.max_length + 1


SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3 of every vocabulary `mt` learns


@dataclass
class TokenizerConfig:
    vocab_size: int = 16000  # per vocabulary, special tokens and the 256 bytes included
    joint: bool = True  # one vocabulary for both languages (allows sharing all embeddings)
    min_frequency: int = 2  # a merge must be seen this often
    model: Literal["bpe", "unigram"] = "bpe"  # unigram: the model SentencePiece uses
    # BPE-dropout (Provilkov et al., 2020): each merge is skipped with this probability when
    # the training pairs are segmented anew each epoch; validation and decoding never drop
    dropout: float = 0.0
    # sentences a side the tokenizers learn from: a seeded sample of the training pairs (all
    # of them if fewer), as SentencePiece's input_sentence_size
    sample: int = 1_000_000


@dataclass
class ModelConfig:
    d_model: int = 512
    heads: int = 8
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1  # on embeddings+positions and on every sub-layer output (P_drop)
    attention_dropout: float = 0.0  # on attention weights
    # relu as in the paper; swish (SiLU) is what OPUS-MT's Marian models use
    activation: Literal["relu", "gelu", "swish"] = "relu"
    norm_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    share_embeddings: bool = True  # tie embeddings and output projection (all three if joint)
    max_positions: int = 1024  # longest sequence the positional encodings cover
    # where sin and cos of a frequency sit in the model dimension: interleaved (the paper:
    # sin at 2i, cos at 2i+1) or halves (Marian's: all sines, then all cosines)
    positions: Literal["interleaved", "halves"] = "interleaved"
    logits_bias: bool = False  # a frozen bias added to the output logits (Marian's)
    # special ids of the vocabulary: those of the vocabularies mt learns (SPECIAL_TOKENS);
    # an imported Marian model has its own (opus-mt-en-es: pad 65000, which also starts the
    # decoder, eos 0), so BOS may equal PAD
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


@dataclass
class TrainConfig:
    max_tokens: int = 4096  # padded tokens per batch (per device), source or target
    accum_steps: int = 1  # batches per optimiser update
    # noam: the paper; inverse_sqrt: the same shape with an explicit peak `lr`; cosine, linear:
    # warm-up to `lr`, then a decay to `min_lr` at the horizon: max_steps when set, else the
    # updates that fit in max_minutes on this machine (measured and re-estimated as it runs)
    schedule: Literal["noam", "inverse_sqrt", "cosine", "linear"] = "noam"
    lr_scale: float = 1.0  # noam: lr = lr_scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)
    lr: float = 5e-4  # inverse_sqrt, cosine, linear: peak rate reached after the warm-up
    min_lr: float = 0.0  # floor: cosine and linear end here; the others never go below it
    warmup_steps: int = 4000  # updates of linear warm-up (at most half a decaying horizon)
    # if > 0: warm-up as this fraction of the horizon instead (cosine and linear). A post-norm
    # model (model.norm_first: false) still warms up for warmup_steps at least, at most half
    # the horizon: a fraction of a short horizon is too brief for it (Xiong et al. 2020;
    # docs/benchmarks.md, "Warm-up of a post-norm model")
    warmup_fraction: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0  # clip the gradient norm to this; 0 disables
    weight_decay: float = 0.0  # decoupled (AdamW) weight decay; 0 is the paper's Adam
    max_steps: int = resumable(0)  # optimiser updates; 0: no step limit (the budget decides)
    max_epochs: int = resumable(0)  # 0 means no limit
    # wall-clock budget of training, validation and saves across every resume; 0: no limit
    max_minutes: float = resumable(0.0)
    patience: int = resumable(
        0
    )  # stop after this many validations without a better BLEU; 0 disables
    eval_every: int = 1000  # updates between validations
    eval_sentences: int = 500  # validation sentences decoded for BLEU; 0 means all
    eval_examples: int = resumable(3)  # translations printed at each validation
    log_every: int = resumable(100)  # updates between training-metric lines
    save_every: int = resumable(1000)  # updates between checkpoints
    keep_last: int = resumable(5)  # step checkpoints kept (best and last are always kept)
    # auto: bf16 on GPUs with native bf16, fp16 (loss-scaled) on older GPUs; on a CPU,
    # measured on the first batch (forward and backward passes in fp32 and bf16, interleaved,
    # before the first update): bf16 if at least 10% faster, kept on resume (what it gives
    # by CPU: docs/benchmarks.md, "bf16 against fp32 on CPUs"); fp32 elsewhere. Weights and
    # checkpoints stay float32 in every precision
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # torch.compile the model and the loss, rehearsed on the first batch (timed, uncompiled
    # with a warning where compiling fails); auto: on CUDA when batches are packed (one shape,
    # one compile), not where every batch would be a new shape to compile
    compile: Literal["auto", True, False] = resumable("auto")
    # Sentences packed side by side into rows of train.pack_length tokens (mt/packing.py):
    # every batch has one shape, without padding; attention never crosses sentences and
    # positions restart at each. auto: packed on CUDA, where one shape is what lets a compiled
    # step pay; padded batches of similar lengths elsewhere (on a CPU attention over whole
    # rows costs more than the few percent of padding saved)
    pack: Literal["auto", True, False] = "auto"
    pack_length: int = 0  # tokens a packed row; 0: data.max_length + 1 rounded up to 128
    # stop a run that diverged or collapsed with a one-line diagnosis, exit status 3
    # (mt/training/health.py says what each check looks for); a run so stopped resumes only with a
    # health setting changed. Collapsed: the model ignores its source (the validation NLL
    # with the sources shuffled among the sentences within 2e-5 nats of the true one, BLEU
    # below 1) in every validation of the last third of the updates so far (50 at least,
    # after the warm-up), unless its training and validation NLL both fell 1.5% or more over
    # them (a training NLL falling alone is memorising). Measured on the Tatoeba files
    # (docs/benchmarks.md, "Health checks"): collapsed post-norm runs had a gap of 1e-8 to
    # 7.5e-6 nats; healthy ones 8e-5 at the least (a deep pre-norm model 3e-4 for its first
    # 150 updates, while its losses fell 2-8%). Diverged, besides a loss that is not a
    # number: the validation NLL over 0.75 nats above its best in 2 validations in a row
    # after the warm-up (healthy runs, overfitting ones included, rose less: same page)
    health_checks: bool = resumable(True)
    # validations at least, in that window, that show the model ignoring its source
    health_patience: int = resumable(3)
    # fine-tuning: start from this model (a run folder, checkpoint folder or weights file):
    # its weights and tokenizers, a fresh optimiser and schedule; model and tokenizer sections
    # must be the checkpoint's
    init: str = ""
    freeze: Literal["none", "encoder", "embeddings"] = "none"  # parameters that stay as they are
    old_share: float = 0.0  # share of the training pairs drawn from train.init's own corpus


@dataclass
class DecodeConfig:
    beam: int = resumable(5)  # 1 is greedy
    alpha: float = resumable(
        0.6
    )  # GNMT length penalty ((5 + L) / 6) ** alpha; 0 ranks by log-probability
    max_len_a: float = 1.5  # output at most a * source_length + b tokens
    max_len_b: int = 10
    nbest: int = resumable(1)
    # beam search's rules: mt's (GNMT's penalty, a sentence done when nothing can beat its
    # nbest-th finished hypothesis), or transformers' generate() (penalty L ** alpha, beam
    # finished hypotheses kept, done by its early-stop heuristic at the current length, a
    # forced EOS scored 0): what an exported model's pipeline("translation") does
    rules: Literal["mt", "transformers"] = resumable("mt")
    no_repeat_ngram: int = resumable(0)  # forbid repeating any n-gram of this size; 0 disables
    # source tokens per decoding batch, each counted once per beam hypothesis; 0: the
    # device's (4096 on a CPU, more on a GPU)
    batch_tokens: int = resumable(0)
    # validation, translate and evaluate; auto: train.precision's rule on GPUs; on a CPU
    # bf16 with AMX bf16 units only, not measured: a choice by timing would make the
    # translations (bf16's differ a little) depend on the machine's load (README)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = resumable("auto")
    # more checkpoints of the same tokenizers decoded with the model as one ensemble: each
    # step averages the models' probabilities (fairseq's rule)
    ensemble: list[str] | None = resumable(None)  # noqa: RUF009 (None is immutable)
    # sample each token instead of searching: softmax(logits / temperature) over the top_k
    # most likely tokens (0: all) and the fewest whose probabilities reach top_p (1: all);
    # nbest samples per source, seeded by decode.seed (None: run.seed)
    sampling: bool = resumable(False)
    temperature: float = resumable(1.0)
    top_k: int = resumable(0)
    top_p: float = resumable(1.0)
    seed: int | None = resumable(None)

    @property
    def greedy(self) -> bool:
        """One hypothesis and no score wanted: greedy search, for every engine."""
        return self.beam == 1 and self.nbest == 1


def beam_holds(nbest: int, beam: int) -> bool:
    """A beam of `beam` hypotheses finds at most that many: the one rule for decode.nbest
    and the server's alternatives + 1."""
    return nbest <= beam


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    if tok.dropout and tok.model != "bpe":
        fail("tokenizer.dropout", f"BPE-dropout needs tokenizer.model bpe, not {tok.model}")


def _check_train(config: Config, fail: Fail) -> None:
    t = config.train
    _fractions(fail, "train.", t, "label_smoothing", "old_share")
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
    _non_negative(fail, "decode.", d, "batch_tokens")
    if not d.sampling and not beam_holds(d.nbest, d.beam):
        fail("decode.nbest", f"{d.nbest} is larger than decode.beam ({d.beam})")
    if d.temperature <= 0:
        fail("decode.temperature", f"must be above 0, got {d.temperature}")
    if not 0 < d.top_p <= 1:
        fail("decode.top_p", f"must be in (0, 1], got {d.top_p}")
    _non_negative(fail, "decode.", d, "top_k")


def _check_data(config: Config, fail: Fail, check_files: bool) -> None:
    data = config.data
    _positive(fail, "data.", data, "max_length")
    _non_negative(fail, "data.", data, "valid_size", "test_size")
    if data.max_ratio < 1.0:
        fail("data.max_ratio", f"must be at least 1, got {data.max_ratio}")
    if data.src_lang == data.tgt_lang:
        fail("data.tgt_lang", f"is the same language as data.src_lang ({data.src_lang})")
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
                fail(key, f"{name}: expected a file name, got {_describe(entry[name])}")
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
    "spa-eng.zip ../shared/data` makes its train, valid and test files; README, 'Data')"
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


def resumable_keys(config: Config) -> set[str]:
    """Dotted keys declared `resumable`."""
    keys = {
        f"{section.name}.{f.name}"
        for section in dataclasses.fields(config)
        for f in dataclasses.fields(getattr(config, section.name))
        if f.metadata.get("resumable")
    }
    if config.train.schedule in DECAYING:  # max_steps is their horizon
        keys.discard("train.max_steps")
    return keys


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"
