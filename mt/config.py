"""Experiment configuration: six sections of typed dataclasses, every key with its default
documented beside it, and the checks of a whole config (`check_config`), so that a mistake is
reported once, as one line naming the file and the key. Reading and writing config files is
`mt.config_file`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

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
    # one model for both directions: every training pair also read the other way, and each
    # source led by the token of the language it is translated into, >>es<< or >>en<<
    # (mt.data.directions); the model then translates into decode.target_language
    both_directions: bool = False


def longest_sequence(data: DataConfig) -> int:
    """Positions the longest training sentence takes: data.max_length tokens and its EOS
    (source) or BOS (target)."""
    return data.max_length + 1


SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3 of every vocabulary `mt` learns
MOST_PLACEHOLDERS = 100  # tokenizer.placeholders: ⦅1⦆ ... ⦅100⦆ at most (mt.data.spans)


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
    # placeholder tokens ⦅1⦆ ... ⦅N⦆ reserved in both vocabularies: training teaches the model
    # to carry them over (train.placeholders), and decoding replaces numbers, URLs, e-mail
    # addresses, {{templates}}, %d and `code` by them and puts each back (mt.data.spans); 0: none
    placeholders: int = 0


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
    # decay of an exponential moving average of the weights, updated after each update
    # (mt/training/ema.py): validation and every checkpoint take the average as the model's
    # weights, training goes on from its own; 0: none, the weights themselves
    ema: float = 0.0
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
    # by CPU: docs/benchmarks.md, "bf16 against fp32 on CPUs"; not tried where the CPU has
    # no bf16 instructions, which emulate it 30x slower); fp32 elsewhere. Weights and
    # checkpoints stay float32 in every precision
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # torch.compile the model and the loss, rehearsed on the first batch (timed, uncompiled
    # with a warning where compiling fails); auto: on CUDA when batches are packed (one shape,
    # one compile), not where every batch would be a new shape to compile
    compile: Literal["auto", True, False] = resumable("auto")
    # Sentences packed side by side into rows of train.pack_length tokens (mt/data/packing.py):
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
    # Examples longer than a pair (mt.data.examples): this share of each epoch's examples joins
    # 2 to join_most pairs into one, within data.max_length tokens a side, one sentence after
    # the other or, join_clauses of the junctions after a full stop, as clauses with a comma or
    # a semicolon and a conjunction (mt.data.joins); 0: every example is one pair
    join: float = 0.0
    join_most: int = 4
    join_clauses: float = 0.5
    # this share of the examples joined as clauses with a comma or semicolon is given as one
    # of its pieces, as a sentence too long for the model is cut (mt.decoding.pieces): a
    # clause that ends in the junction's comma, one that starts with its conjunction, or both
    join_pieces: float = 0.0
    # this share of the pairs is given with its first word as said inside a sentence, on both
    # sides (lowercased unless a name or "I"), as a clause after a junction and a piece of a
    # cut sentence start: "the cat sleeps." / "el gato duerme."; 0: none. Not in the recipes:
    # at 0.1 lines of 4 to 16 joined by semicolons gained 1.4 to 2.7 BLEU, single sentences lost
    # 0.7 (docs/benchmarks.md, "Real text")
    lowered_starts: float = 0.0
    # the share of the pairs whose two sides hold the same span (a number, URL, e-mail address,
    # {{template}}, %d, `code`, or a name) in which each such span becomes a placeholder
    # (tokenizer.placeholders); 0: none
    placeholders: float = 0.0
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
    # a multilingual OPUS-MT model's target language: "spa" puts its token >>spa<< before
    # every source, as MarianTokenizer's users write it; "": none (a code, not the token,
    # which YAML would read as a block scalar)
    target_language: str = resumable("")
    # source tokens per decoding batch, each counted once per beam hypothesis; 0: the
    # device's (4096 on a CPU, more on a GPU)
    batch_tokens: int = resumable(0)
    # a source longer than this many tokens is cut after its clauses into pieces of at
    # most it (mt.decoding.pieces), each translated alone and put back in its place; 0: the
    # length the model carries, measured on it at validation (mt.decoding.trained)
    piece_tokens: int = resumable(0)
    # a translation shorter than this fraction of the length its source predicts (the
    # training corpus's target/source ratio, mt.decoding.coverage) is translated again in
    # smaller pieces, once, and flagged if still short; 0: no guard
    coverage: float = resumable(0.5)
    # validation, translate and evaluate; auto: train.precision's rule on GPUs, fp32 on a
    # CPU: there a text translates the same alone or in any batch (bf16 does not, and gained
    # little: docs/translate.md, "Decoding precision")
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
        """One hypothesis and no score wanted: greedy search, for every engine. Not with
        no_repeat_ngram: that stays beam search of beam 1, scored, as it has always been."""
        return self.beam == 1 and self.nbest == 1 and not self.no_repeat_ngram


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
