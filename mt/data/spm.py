"""SentencePiece tokenizers of Marian models (OPUS-MT): what `transformers`' MarianTokenizer
does, with the interface of a `tokenizers.Tokenizer` that the rest of mt calls.

MarianTokenizer (transformers/models/marian/tokenization_marian.py) cuts a source with
`source.spm` and a target with `target.spm`, looks the pieces up in `vocab.json` (a piece
missing there is `<unk>`, never a SentencePiece id) and appends `</s>`. It decodes by mapping
ids back to pieces, dropping the special ones (`skip_special_tokens`), and joining them with
`decode_pieces` of `source.spm` when the vocabulary is joint (its `_decode_use_source_tokenizer`
defaults to `not separate_vocabs`), then "▁" -> " " and `strip()`. One deliberate difference:
a literal "</s>" or "<unk>" in a text is text here (as everywhere in mt), where MarianTokenizer
would make it a control token.

A side's tokenizer is saved as one JSON string (`to_str`: the SentencePiece models in base64,
the vocabulary, the special tokens), so a checkpoint's metadata holds it as it holds ours.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from ..errors import ConfigError

KIND = "mt-marian-sentencepiece-1"  # the "kind" of a saved tokenizer of this module


class SentencePieceTokenizer:
    """One side of a Marian model: `encoder` (serialised SentencePiece model) cuts texts,
    `decoder` joins pieces, `vocab` maps pieces to the model's ids."""

    def __init__(
        self,
        encoder: bytes,
        decoder: bytes,
        vocab: dict[str, int],
        unk: str = "<unk>",
        eos: str = "</s>",
        pad: str = "<pad>",
    ) -> None:
        self.protos = encoder, decoder
        self.encoder = _processor(encoder)
        self.decoder = self.encoder if decoder == encoder else _processor(decoder)
        self.vocab = vocab
        self.pieces = {i: piece for piece, i in vocab.items()}
        self.specials = {"unk": unk, "eos": eos, "pad": pad}
        for name, token in self.specials.items():
            if token not in vocab:
                raise ConfigError(f"vocab.json: no {name} token {token!r}")
        self.unk_id = vocab[unk]
        self.special_ids = {vocab[token] for token in self.specials.values()}
        self.encode_special_tokens = True  # set by mt.data.tokenizer.encode; always so here

    def specials_as_tokens(self) -> dict[str, str]:
        """The special tokens as MarianTokenizer's arguments (unk_token=...)."""
        return {f"{name}_token": token for name, token in self.specials.items()}

    # the part of the tokenizers.Tokenizer interface mt calls

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list:
        """Each text's ids, `</s>` appended when `add_special_tokens`, as objects with `.ids`."""
        eos = [self.vocab[self.specials["eos"]]] if add_special_tokens else []
        out = []
        for pieces in self.encoder.encode(list(texts), out_type=str):
            ids = [self.vocab.get(piece, self.unk_id) for piece in pieces]
            out.append(SimpleNamespace(ids=ids + eos))
        return out

    def decode_batch(self, ids: Sequence[Sequence[int]], skip_special_tokens: bool = True):
        return [self.decode(x, skip_special_tokens) for x in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        # MarianTokenizer.convert_tokens_to_string: special tokens are not SentencePiece's
        out, run = "", []
        for i in ids:
            piece = self.id_to_token(i)
            if i in self.special_ids:
                if not skip_special_tokens:
                    out += self.decoder.decode_pieces(run) + piece + " "
                    run = []
                continue
            run.append(piece)
        out += self.decoder.decode_pieces(run)
        return out.replace("▁", " ").strip()

    def get_vocab_size(self) -> int:
        return max(self.pieces) + 1

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def id_to_token(self, i: int) -> str | None:
        return self.pieces.get(i)

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)

    def to_str(self, pretty: bool = False) -> str:  # pretty: as tokenizers' (ignored)
        encoder, decoder = (base64.b64encode(p).decode("ascii") for p in self.protos)
        return json.dumps(
            {
                "kind": KIND,
                "encoder": encoder,
                "decoder": decoder,
                "vocab": self.vocab,
                "specials": self.specials,
            }
        )

    def save(self, path: str) -> None:
        Path(path).write_text(self.to_str(), encoding="utf-8")

    @classmethod
    def from_str(cls, text: str) -> SentencePieceTokenizer:
        saved = json.loads(text)
        encoder, decoder = (base64.b64decode(saved[k]) for k in ("encoder", "decoder"))
        return cls(encoder, decoder, saved["vocab"], **saved["specials"])


PAIR = "mt-marian-sentencepiece-pair-1"  # both sides in one file (a joint vocabulary's)


def pair_to_str(src: str, tgt: str) -> str:
    """The saved source and target tokenizers of one vocabulary as one text, for the run
    folder's single tokenizer file: the sides cut with different SentencePiece models."""
    return json.dumps({"kind": PAIR, "src": src, "tgt": tgt})


def pair_from_str(text: str) -> tuple[str, str] | None:
    """The two saved sides of `pair_to_str`'s text, or None when it is not one."""
    if not text.startswith('{"kind": "' + PAIR):
        return None
    saved = json.loads(text)
    return saved["src"], saved["tgt"]


def is_saved(text: str) -> bool:
    """Whether a saved tokenizer (JSON text) is one of this module's."""
    return text.startswith('{"kind": "' + KIND)


def uncovered_piece(proto: bytes, vocab: dict[str, int]) -> str | None:
    """A piece of the SentencePiece model `proto` (control and unknown symbols aside) that
    `vocab` lacks, or None when it covers them all."""
    spm = _processor(proto)
    for i in range(spm.get_piece_size()):
        if not (spm.is_control(i) or spm.is_unknown(i)) and spm.id_to_piece(i) not in vocab:
            return spm.id_to_piece(i)
    return None


def _processor(proto: bytes):
    import sentencepiece  # the optional extra mt[hf]: imported when a Marian model is opened

    spm = sentencepiece.SentencePieceProcessor()
    spm.LoadFromSerializedProto(proto)
    return spm
