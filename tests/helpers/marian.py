"""A random-weight MarianMT folder laid out as OPUS-MT's are (transformers, sentencepiece)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from helpers.corpus import TATOEBA_TRAIN, read_pairs


def build_marian(
    out: Path,
    d: int = 32,
    layers: int = 2,
    heads: int = 4,
    ffn: int = 64,
    pieces: int = 800,
    vocab_size: int | None = None,
    dtype: str = "float32",
    tokens: Sequence[str] = (),
    separate: bool = False,
) -> Path:
    """A random-weight MarianMTModel folder as OPUS-MT's are laid out (swish, scaled and tied
    embeddings, eos 0, unk 1, pad = decoder start = the last id, a non-zero logits bias) with
    SentencePiece unigram models of `pieces` pieces a side, trained on 20,000 Tatoeba pairs;
    `vocab_size`: vocab.json filled up to that many ids (opus-mt-en-es: 65,001); `tokens`:
    more entries of vocab.json, such as a multilingual model's ">>spa<<"; `separate`: tc-big's
    separate vocabularies (vocab.json for sources, target_vocab.json for targets, sizes that
    differ, PAD at id 2 of both, encoder and decoder embeddings apart)."""
    import io

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    pairs = read_pairs(TATOEBA_TRAIN, 20_000)
    protos = []
    sizes = (pieces, pieces - 100 if separate else pieces)  # separate ones: of two sizes
    for side, size in zip(("en", "es"), sizes):
        buffer = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([p[side] for p in pairs]),
            model_writer=buffer,
            vocab_size=size,
            model_type="unigram",
            character_coverage=1.0,
            minloglevel=2,
            num_threads=1,
        )
        protos.append(buffer.getvalue())
    out.mkdir(parents=True, exist_ok=True)
    source_vocab = {"</s>": 0, "<unk>": 1, **({"<pad>": 2} if separate else {})}
    target_vocab = dict(source_vocab) if separate else source_vocab
    for name, proto, vocab in zip(
        ("source.spm", "target.spm"), protos, (source_vocab, target_vocab)
    ):
        (out / name).write_bytes(proto)
        model = spm.SentencePieceProcessor()
        model.LoadFromSerializedProto(proto)
        for i in range(model.get_piece_size()):
            if not (model.is_control(i) or model.is_unknown(i)):
                vocab.setdefault(model.id_to_piece(i), len(vocab))
    vocab = source_vocab
    for token in tokens:
        vocab[token] = len(vocab)
    while vocab_size and len(vocab) < vocab_size - 1:
        vocab[f"▁unused{len(vocab)}"] = len(vocab)
    pad = vocab.setdefault("<pad>", len(vocab))
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    files = {}
    if separate:
        files = {"target_vocab_file": str(out / "target_vocab.json"), "separate_vocabs": True}
        (out / "target_vocab.json").write_text(json.dumps(target_vocab), encoding="utf-8")
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=not separate,
        d_model=d,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        activation_function="swish",
        max_position_embeddings=512,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        scale_embedding=True,
        bad_words_ids=[[pad]],
    )
    torch.manual_seed(0)
    model = MarianMTModel(config)
    with torch.no_grad():  # larger than the init's, so that outputs depend on the source
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, p.size(1) ** -0.5)
            elif "layer_norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.1)
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] = 3.0  # EOS: some outputs end before the limit
    model.to(getattr(torch, dtype)).save_pretrained(out)
    tokenizer = MarianTokenizer(
        str(out / "source.spm"),
        str(out / "target.spm"),
        str(out / "vocab.json"),
        source_lang="en",
        target_lang="es",
        **files,
    )
    tokenizer.save_pretrained(out)
    return out
