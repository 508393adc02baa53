"""Byte-level subword tokenizers (BPE or unigram), trained with Hugging Face `tokenizers`;
encoding in bulk for prepare (`PieceEncoder`). BPE-dropout is mt.data.dropout.

Both models start from the 256 byte symbols, so every string is encodable without
`<unk>` and `decode(encode(s)) == s` exactly for a text that does not start with a space
(normalised text never does): no character is ever lost. A space is put before the text, as
SentencePiece does, so that a word has the same tokens at the start of a sentence as inside
one ("of course" is " of course" either way, as a line of joined sentences gives it), and the
decoder takes it off. The special tokens `<pad> <s> </s> <unk>` have the fixed ids 0..3 in
every vocabulary.

The saved file's post-processor appends `</s>`, so outside `mt`,
`Tokenizer.from_file(path).encode(text).ids` is exactly what the encoder reads (and, on the
target side, the reference labels). Inside `mt` the ids are taken without it
(`add_special_tokens=False`) and the model code adds EOS and BOS where each belongs.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from ..config import SPECIAL_TOKENS, TokenizerConfig
from ..errors import ConfigError
from .spans import placeholder_tokens

PAD, BOS, EOS, UNK = range(len(SPECIAL_TOKENS))


class Specials(NamedTuple):
    """The ids a model reads and writes around the text's tokens: those of the vocabularies mt
    learns (`SPECIALS`), or an imported model's own (model.pad_id ...; BOS may equal PAD)."""

    pad: int
    bos: int
    eos: int


SPECIALS = Specials(PAD, BOS, EOS)


def train_tokenizer(
    texts: Iterable[str], cfg: TokenizerConfig, length: int | None = None
) -> Tokenizer:
    """Learn a byte-level vocabulary of `cfg.vocab_size` symbols from `texts`: BPE merges, or
    a unigram model (pieces and their probabilities, pruned by EM as SentencePiece does)."""
    common = dict(
        vocab_size=cfg.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stdout.isatty(),  # it draws on stdout, which is for results
    )
    if cfg.model == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(unk_token="<unk>", **common)
    else:
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(min_frequency=cfg.min_frequency, **common)
    tokenizer.normalizer = normalizers.NFC()
    # the space before the text (see the module's doc): before its start only, not after an
    # added token inside it ("⦅1⦆." stays glued), as ByteLevel's add_prefix_space would not
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=" ", prepend_scheme="first", split=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    tokenizer.train_from_iterator(texts, trainer, length=length)
    if tokenizer.get_vocab_size() > cfg.vocab_size:  # unigram keeps every symbol it saw
        raise ConfigError(
            f"tokenizer.vocab_size: {cfg.vocab_size} is too small for the {cfg.model} "
            f"alphabet of this corpus ({tokenizer.get_vocab_size()} symbols were kept); "
            "raise it"
        )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", SPECIAL_TOKENS.index("</s>"))]
    )
    assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    return tokenizer


def train_tokenizers(
    src: Sequence[str], tgt: Sequence[str], cfg: TokenizerConfig, tags: Sequence[str] = ()
) -> tuple[Tokenizer, Tokenizer]:
    """One joint tokenizer for both languages (returned twice), or one per language; `tags`
    (corpus tags such as <bt>) reserved in the source one (`reserve_tags`), and the
    tokenizer.placeholders in both, after them."""
    placeholders = placeholder_tokens(cfg.placeholders)
    if cfg.joint:
        joint = train_tokenizer([*src, *tgt], cfg, length=len(src) + len(tgt))
        joint = reserve_tags(joint, [*tags, *placeholders])
        return joint, joint
    return (
        reserve_tags(train_tokenizer(src, cfg, len(src)), [*tags, *placeholders]),
        reserve_tags(train_tokenizer(tgt, cfg, len(tgt)), placeholders),
    )


def reserve_tags(tokenizer: Tokenizer, tags: Sequence[str]) -> Tokenizer:
    """`tokenizer` with each tag one token of its own after the learnt ones: matched in text
    before anything is split, and not special, so `encode` (which reads special tokens as
    text) keeps it whole and `decode` keeps it."""
    tokenizer.add_tokens([AddedToken(tag, normalized=False, special=False) for tag in tags])
    return tokenizer


def tokenizer_from_str(text: str) -> Tokenizer:
    """A saved tokenizer: ours (tokenizers' JSON), or a Marian model's SentencePiece one
    (mt.data.spm, which has the same interface)."""
    from . import spm

    if spm.is_saved(text):
        return spm.SentencePieceTokenizer.from_str(text)
    return Tokenizer.from_str(text)


def tokenizers_to_str(tokenizers: Sequence[Tokenizer], files: Sequence[Path]) -> list[str]:
    """The texts of the source and target tokenizer files: one joint file holds both sides
    when they differ (a Marian model's SentencePiece models)."""
    from . import spm

    texts = [t.to_str(pretty=True) for t in tokenizers]
    if files[0] == files[1] and texts[0] != texts[1]:
        return [spm.pair_to_str(*texts)] * 2
    return texts


def tokenizers_from_files(files: Sequence[Path]) -> tuple[Tokenizer, Tokenizer]:
    """The source and target tokenizers of a run folder's files (`tokenizers_to_str`)."""
    from . import spm

    texts = [p.read_text("utf-8") for p in files]
    texts = spm.pair_from_str(texts[0]) or texts
    return tokenizer_from_str(texts[0]), tokenizer_from_str(texts[1])


def encode(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without BOS or EOS.

    A literal "<s>" or "</s>" in the text is text: it must not become a control token (an EOS
    inside a source). `tokenizers` does not save that flag in tokenizer.json, so it is set
    here, where all of mt's encoding happens (the run folder's README tells users to set it).
    """
    tokenizer.encode_special_tokens = True
    return [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def encode_going_on(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """`encode` of texts that go on a sentence ("`, but it's`" after "I'm tired"): no space
    put before one that starts glued to the word before. A line break before such a text
    keeps the space off it (the space and the line break are tokens of their own before a
    character that is not a space), and its ids are those after the line break's."""
    if not prepends_space(tokenizer):
        return encode(tokenizer, texts)
    newline = tokenizer.token_to_id("\u010a")  # byte-level "\n"
    glued = [text[:1] not in ("", " ") for text in texts]  # else no space is put before it
    rows = encode(tokenizer, ["\n" + t if g else t for t, g in zip(texts, glued)])
    return [row[row.index(newline) + 1 :] if g else row for row, g in zip(rows, glued)]


def flat_ids(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Encoded sentences (`tokenizers` gives lists) as one int32 array and their lengths."""
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    return np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(lengths.sum())), lengths


class PieceEncoder:
    """`encode` of normalised text (`corpus.normalize`: words one space apart, none at the
    ends), flat (`flat_ids`), each distinct space-led chunk of it encoded once.

    The tokenizers mt learns (NFC, byte-level pieces cut by its regex, BPE or unigram on each
    piece) never join text across a space between two words: the regex's pieces hold a space
    only at their start (its whitespace-run alternatives match no single space before a
    word), NFC composes nothing with a space, and no added token holds one; the space put
    before the text goes before its first chunk alone (the others start with one). So a
    sentence's ids are those of its chunks ("I", " saw", " it.") one after another, and
    `tokenizers`' per-sentence work (normalised strings with alignments, encodings: most of
    its time) is spent once per new chunk instead of once per sentence. A tokenizer of another
    kind (a Marian model's SentencePiece) encodes sentence by sentence.
    """

    # chunks remembered (~40 MiB); past that the memo starts again (with one call's at most)
    CAPACITY = 1 << 18

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.by_chunk = _splits_at_spaces(tokenizer)
        self.memo: dict[str, bytes] = {}  # chunk -> its ids, int32 bytes

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The texts' ids (int32, one after another) and each text's count of them."""
        if not self.by_chunk or not texts:
            return flat_ids(encode(self.tokenizer, texts))
        chunks = space_led_chunks("\n".join(texts))
        per_text = np.fromiter(map(str.count, texts, itertools.repeat(" ")), np.int64, len(texts))
        if len(chunks) != len(texts) + per_text.sum():  # a newline: not normalised text
            raise ValueError("PieceEncoder.encode: text with a line break")
        new = set(chunks).difference(self.memo)
        if len(self.memo) + len(new) > self.CAPACITY:
            self.memo.clear()
            new = set(chunks)
        new_chunks = list(new)
        for chunk, ids in zip(new_chunks, encode(self.tokenizer, new_chunks)):
            self.memo[chunk] = np.array(ids, np.int32).tobytes()
        found = list(map(self.memo.__getitem__, chunks))
        tokens = np.fromiter(map(len, found), np.int64, len(found)) // 4
        starts = np.concatenate(([0], np.cumsum(per_text + 1)[:-1]))
        return np.frombuffer(b"".join(found), np.int32), np.add.reduceat(tokens, starts)


def space_led_chunks(text: str) -> list[str]:
    """A normalised text cut before each space ("I", " saw", " it."), and at its line breaks:
    pieces the tokenizers mt learns never join (see PieceEncoder)."""
    return text.replace(" ", "\n ").split("\n")


# the saved form of the pre-tokeniser that puts a space before the text (train_tokenizer)
SPACE_BEFORE = {"type": "Metaspace", "replacement": " ", "prepend_scheme": "first", "split": False}


def prepends_space(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` puts a space before the text (those mt learns now; not those of
    earlier runs, nor a Marian model's)."""
    if not isinstance(tokenizer, Tokenizer) or tokenizer.pre_tokenizer is None:
        return False
    pre = json.loads(tokenizer.pre_tokenizer.__getstate__())
    return pre.get("type") == "Sequence" and pre["pretokenizers"][:1] == [SPACE_BEFORE]


def _splits_at_spaces(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` is of the kind `PieceEncoder` may encode a chunk at a time."""
    if not isinstance(tokenizer, Tokenizer) or tokenizer.truncation or tokenizer.padding:
        return False
    saved = json.loads(tokenizer.to_str())
    pre = saved.get("pre_tokenizer") or {}
    if prepends_space(tokenizer):
        pre = pre["pretokenizers"][1] if len(pre["pretokenizers"]) == 2 else {}
    return (
        (saved.get("normalizer") or {"type": "NFC"})["type"] == "NFC"
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space")
        and saved["model"]["type"] in ("BPE", "Unigram")
        and not saved["model"].get("dropout")
        and not any(c.isspace() for token in saved["added_tokens"] for c in token["content"])
    )


def detokenize(tokenizer: Tokenizer, ids: Sequence[Sequence[int]]) -> list[str]:
    """Natural text of each id sequence; special tokens are dropped."""
    return tokenizer.decode_batch([list(x) for x in ids], skip_special_tokens=True)


def round_trip_rate(tokenizer: Tokenizer, texts: Sequence[str]) -> float:
    """Fraction of texts that decode back to exactly themselves."""
    if not texts:
        return 1.0
    back = detokenize(tokenizer, encode(tokenizer, texts))
    return sum(a == b for a, b in zip(texts, back)) / len(texts)


WORD_MARKS = ("\u0120", "\u2581")  # a token that starts a word: byte-level "Ġ", SentencePiece "▁"


def starts_word(tokenizer: Tokenizer, i: int) -> bool:
    """Whether token `i` begins a word, as its own string says (a decoded single token
    loses SentencePiece's leading space)."""
    return (tokenizer.id_to_token(i) or "").startswith(WORD_MARKS)
