"""Byte-level BPE tokenizers, trained with Hugging Face `tokenizers`.

Byte-level BPE starts from the 256 byte symbols, so every string is encodable without
`<unk>` and `decode(encode(s)) == s` exactly: no character is ever lost. The special tokens
`<pad> <s> </s> <unk>` have the fixed ids 0..3 in every vocabulary.

The saved file's post-processor appends `</s>`, so outside `mt`,
`Tokenizer.from_file(path).encode(text).ids` is exactly what the encoder reads (and, on the
target side, the reference labels). Inside `mt` the ids are taken without it
(`add_special_tokens=False`) and the model code adds EOS and BOS where each belongs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from .config import SPECIAL_TOKENS, TokenizerConfig


def train_tokenizer(
    texts: Iterable[str], cfg: TokenizerConfig, length: int | None = None
) -> Tokenizer:
    """Learn a byte-level BPE vocabulary of `cfg.vocab_size` symbols from `texts`."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFC()
    # add_prefix_space=False keeps decode(encode(s)) == s with no space to strip.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stdout.isatty(),  # it draws on stdout, which is for results
    )
    tokenizer.train_from_iterator(texts, trainer, length=length)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", SPECIAL_TOKENS.index("</s>"))]
    )
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    return tokenizer


def train_tokenizers(
    src: Sequence[str], tgt: Sequence[str], cfg: TokenizerConfig
) -> tuple[Tokenizer, Tokenizer]:
    """One joint tokenizer for both languages (returned twice), or one per language."""
    if cfg.joint:
        joint = train_tokenizer([*src, *tgt], cfg, length=len(src) + len(tgt))
        return joint, joint
    return train_tokenizer(src, cfg, len(src)), train_tokenizer(tgt, cfg, len(tgt))


def tokenizer_files(run_dir: Path, src_lang: str, tgt_lang: str, joint: bool) -> tuple[Path, Path]:
    """Where a run keeps its tokenizers: tokenizer.json, or tokenizer.<lang>.json each."""
    if joint:
        return run_dir / "tokenizer.json", run_dir / "tokenizer.json"
    return run_dir / f"tokenizer.{src_lang}.json", run_dir / f"tokenizer.{tgt_lang}.json"


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without BOS or EOS.

    A literal "<s>" or "</s>" in the text is text: it must not become a control token (an EOS
    inside a source). `tokenizers` does not save that flag in tokenizer.json, so it is set
    here, where all of mt's encoding happens (the run folder's README tells users to set it).
    """
    tokenizer.encode_special_tokens = True
    return [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def decode(tokenizer: Tokenizer, ids: Sequence[Sequence[int]]) -> list[str]:
    """Natural text of each id sequence; special tokens are dropped."""
    return tokenizer.decode_batch([list(x) for x in ids], skip_special_tokens=True)


def round_trip_rate(tokenizer: Tokenizer, texts: Sequence[str]) -> float:
    """Fraction of texts that decode back to exactly themselves."""
    if not texts:
        return 1.0
    back = decode(tokenizer, encode(tokenizer, texts))
    return sum(a == b for a, b in zip(texts, back)) / len(texts)
