"""Marian models of `transformers` (OPUS-MT) as checkpoints: a folder that `save_pretrained`
writes, or a Hub id read through huggingface_hub's cache, opened as our Transformer.

Checked against transformers' modeling_marian.py: post-norm layers (LayerNorm after each
residual, none after the stacks), embeddings scaled by sqrt(d_model), sinusoids with all
sines then all cosines (`model.positions: halves`), separate q/k/v projections (fused here:
concatenated), `final_logits_bias` added to the tied output projection (`model.logits_bias`),
the activation of `activation_function` (swish is SiLU), and special ids of the vocabulary:
pad_token_id starts the decoder (decoder_start_token_id), so BOS equals PAD. Weights saved in
float16 are read into float32, the precision a run decides on from there. Separate
vocabularies (tc-big's `separate_vocabs`: `target_vocab.json` for the target side,
`share_encoder_decoder_embeddings` false, `decoder_vocab_size`) are our `tokenizer.joint:
false`: the encoder's embedding its own, the decoder's tied to the output projection, as in
MarianMTModel.

`WEIGHT_NAMES` maps our parameter names to Marian's both ways: `mt.export.to_marian` writes
a run as a Marian folder with it. transformers, sentencepiece and huggingface_hub are the
optional extra `mt[hf]`, imported only when a Marian model is asked for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from .config import Config, ModelConfig
from .errors import ConfigError

CONFIG = "config.json"
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
TARGET_VOCAB = "target_vocab.json"  # the target side's vocabulary, when separate
FAST_TOKENIZER = "tokenizer.json"  # what mt export --format hf writes for its own models
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def require_hf() -> None:
    """Refuse in one line when the optional extra mt[hf] is not installed."""
    try:
        import huggingface_hub  # noqa: F401
        import sentencepiece  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"Marian models need the optional extra mt[hf] ({e.name} is missing): "
            "pip install 'mt[hf]' (transformers, sentencepiece, huggingface_hub)"
        ) from None


def marian_folder(path: str | Path) -> Path | None:
    """The Marian folder `path` names (a folder with a config.json, or a Hub id in the local
    cache, fetched when online), or None when it names no such thing (then it is ours)."""
    folder = Path(path)
    if (folder / CONFIG).is_file():
        return folder
    if folder.exists() or not HUB_ID.match(str(path)):
        return None
    require_hf()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path), local_files_only=True))
    except Exception:  # not cached: try the Hub itself
        pass
    try:
        return Path(snapshot_download(str(path)))
    except Exception as e:
        raise ConfigError(
            f"{path}: neither a run folder nor a Hub model in the local cache, and the Hub "
            f"cannot be reached ({type(e).__name__}); download it once online or pass a folder"
        ) from None


def read_marian_config(folder: Path) -> dict[str, Any]:
    """config.json of a Marian folder, refused in one line when it is not one mt can open."""
    file = folder / CONFIG
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{file}: not readable JSON ({e})") from None
    if raw.get("model_type") != "marian":
        raise ConfigError(f"{file}: model_type {raw.get('model_type')!r} is not 'marian'")
    if not (folder / FAST_TOKENIZER).is_file():  # else one of mt's exports
        for name in TOKENIZER_FILES:
            if not (folder / name).is_file():
                raise ConfigError(f"{folder / name}: missing (a Marian folder needs {name})")
    separate = separate_vocabs(folder)
    if separate and not (folder / TARGET_VOCAB).is_file():
        raise ConfigError(f"{folder / TARGET_VOCAB}: missing (separate_vocabs needs it)")
    if separate and shares_embeddings(raw):
        raise ConfigError(
            f"{file}: share_encoder_decoder_embeddings is true but tokenizer_config.json has "
            "separate_vocabs: two vocabularies cannot share one embedding matrix"
        )
    refused = {
        "scale_embedding": not raw.get("scale_embedding", False),
        "normalize_before": bool(raw.get("normalize_before")),
        "activation_function": raw.get("activation_function", "gelu") not in ACTIVATIONS,
    }
    for key, bad in refused.items():
        if bad:
            raise ConfigError(f"{file}: {key}={raw.get(key)!r} is not supported by mt")
    return raw


def separate_vocabs(folder: Path) -> bool:
    """Whether the target side has its own vocabulary (tokenizer_config.json's
    separate_vocabs, as MarianTokenizer reads it)."""
    return bool(_tokenizer_config(folder).get("separate_vocabs"))


def shares_embeddings(raw: dict[str, Any]) -> bool:
    """Whether encoder and decoder read one embedding matrix (config.json)."""
    return bool(raw.get("share_encoder_decoder_embeddings", True))


MT_KEY = "mt"  # config.json's key of what a folder mt exported keeps for mt (mt_keys)


def mt_keys(config: Config, trained: Any) -> dict[str, Any]:
    """What a folder mt exports keeps in config.json for mt to decode it as it decoded the
    checkpoint: the vocabulary's placeholders, and the weights' measurements (`trained`: as
    their metadata holds them, mt.decoding.trained)."""
    found = json.loads(trained) if isinstance(trained, str) else trained
    return {"placeholders": config.tokenizer.placeholders, "trained": found}


def marian_metadata(folder: Path) -> dict[str, Any]:
    """A Marian folder's metadata as a checkpoint's: step 0, and the measurements of a
    folder mt exported (`mt_keys`)."""
    trained = (read_marian_config(folder).get(MT_KEY) or {}).get("trained")
    return {"step": "0", **({"trained": trained} if trained else {})}


def config_of(folder: Path, raw: dict[str, Any], vocab_size: int) -> Config:
    """Our Config for a Marian model: its shape, special ids, languages, and placeholders
    where mt exported it (`mt_keys`)."""
    try:
        model = ModelConfig(
            d_model=raw["d_model"],
            heads=raw["encoder_attention_heads"],
            encoder_layers=raw["encoder_layers"],
            decoder_layers=raw["decoder_layers"],
            d_ff=raw["encoder_ffn_dim"],
            dropout=raw.get("dropout", 0.1),
            attention_dropout=raw.get("attention_dropout", 0.0),
            activation=ACTIVATIONS[raw.get("activation_function", "gelu")],
            max_positions=raw["max_position_embeddings"],
            positions="halves",
            logits_bias=True,
            pad_id=raw["pad_token_id"],
            bos_id=raw.get("decoder_start_token_id", raw["pad_token_id"]),
            eos_id=raw["eos_token_id"],
        )
    except KeyError as e:
        raise ConfigError(f"{folder / CONFIG}: no {e.args[0]!r}") from None
    if (raw["decoder_ffn_dim"], raw["decoder_attention_heads"]) != (model.d_ff, model.heads):
        raise ConfigError(f"{folder / CONFIG}: decoder and encoder shapes differ; not supported")
    config = Config(model=model)
    config.run.dir = str(folder)
    config.tokenizer.vocab_size, config.tokenizer.model = vocab_size, "unigram"
    config.tokenizer.joint = shares_embeddings(raw)
    config.data.max_length = model.max_positions - 1  # its own: HF's model_max_length
    config.tokenizer.placeholders = int((raw.get(MT_KEY) or {}).get("placeholders", 0))
    languages = _languages(folder)
    if languages:
        config.data.src_lang, config.data.tgt_lang = languages
    return config


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    try:
        raw = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _languages(folder: Path) -> tuple[str, str] | None:
    # tokenizer_config.json's source_lang and target_lang ("en", "es"), when it has both
    raw = _tokenizer_config(folder)
    src, tgt = raw.get("source_lang"), raw.get("target_lang")
    return (src, tgt) if src and tgt and src != tgt else None


def read_tokenizers(folder: Path) -> tuple[Any, Any]:
    """The source and target tokenizers (mt.data.spm) of a Marian folder; a joint
    tokenizer.json when it has no SentencePiece files (one of mt's exports)."""
    from .data.spm import SentencePieceTokenizer, uncovered_piece

    if not (folder / TOKENIZER_FILES[0]).is_file():
        from tokenizers import Tokenizer

        joint = Tokenizer.from_file(str(folder / FAST_TOKENIZER))
        return joint, joint

    separate = separate_vocabs(folder)
    vocab_files = [folder / "vocab.json", folder / (TARGET_VOCAB if separate else "vocab.json")]
    vocabs = [_read_vocab(file) for file in vocab_files]
    source, target = ((folder / name).read_bytes() for name in TOKENIZER_FILES[:2])
    for name, proto, vocab, file in zip(TOKENIZER_FILES, (source, target), vocabs, vocab_files):
        try:
            missing = uncovered_piece(proto, vocab)
        except RuntimeError:
            raise ConfigError(f"{folder / name}: not a SentencePiece model") from None
        if missing is not None:
            raise ConfigError(f"{file}: does not cover the piece {missing!r} of {name}")
    specials = _special_tokens(folder)
    # a joint vocabulary decodes with source.spm, as MarianTokenizer does; separate ones
    # with target.spm
    src = SentencePieceTokenizer(source, source, vocabs[0], **specials)
    decoder = target if separate else source
    return src, SentencePieceTokenizer(target, decoder, vocabs[1], **specials)


def _read_vocab(file: Path) -> dict[str, int]:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{file}: not readable JSON ({e})") from None


def _special_tokens(folder: Path) -> dict[str, str]:
    raw = _tokenizer_config(folder)
    names = {"unk": "unk_token", "eos": "eos_token", "pad": "pad_token"}
    found = {k: raw[v] for k, v in names.items() if isinstance(raw.get(v), str)}
    return {"unk": "<unk>", "eos": "</s>", "pad": "<pad>", **found}


def read_state(folder: Path) -> dict[str, torch.Tensor]:
    """Marian's state dict, in float32 whatever it was saved in."""
    for name in WEIGHT_FILES:
        file = folder / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                state = load_file(str(file))
            else:
                state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:  # damaged or foreign files raise many types
            raise ConfigError(f"{file}: not readable weights ({type(e).__name__})") from None
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    raise ConfigError(f"{folder}: no weights ({' or '.join(WEIGHT_FILES)})")


def weight_names(cfg: ModelConfig, joint: bool = True) -> dict[str, list[str]]:
    """Our parameter name -> the Marian names whose tensors it concatenates (dim 0); the
    embeddings: one shared matrix with a `joint` vocabulary, else the encoder's and the
    decoder's (tied to the output projection)."""
    names = {"logits_bias": ["final_logits_bias"]}
    if joint:
        names["src_embed.weight"] = ["model.shared.weight"]
    else:
        names["src_embed.weight"] = ["model.encoder.embed_tokens.weight"]
        names["tgt_embed.weight"] = ["model.decoder.embed_tokens.weight"]
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        # (ours, Marian's) attention modules, our fused projections of each; the norms
        attention = [("self_attn", "self_attn", ["qkv"])]
        norms = ["self_attn_layer_norm", "final_layer_norm"]
        if side == "decoder":
            attention.append(("cross_attn", "encoder_attn", ["q", "kv"]))
            norms.insert(1, "encoder_attn_layer_norm")
        for i in range(layers):
            ours, theirs = f"{side}.{i}.", f"model.{side}.layers.{i}."
            for part in ("weight", "bias"):
                for mine, marian, fused in attention:
                    for letters in fused:
                        names[f"{ours}{mine}.{letters}.{part}"] = [
                            f"{theirs}{marian}.{c}_proj.{part}" for c in letters
                        ]
                    names[f"{ours}{mine}.out.{part}"] = [f"{theirs}{marian}.out_proj.{part}"]
                for j, norm in enumerate(norms):
                    names[f"{ours}norms.{j}.{part}"] = [f"{theirs}{norm}.{part}"]
                names[f"{ours}ff.0.{part}"] = [f"{theirs}fc1.{part}"]
                names[f"{ours}ff.2.{part}"] = [f"{theirs}fc2.{part}"]
    return names


def to_ours(state: dict[str, torch.Tensor], cfg: ModelConfig, file: Path, joint: bool) -> dict:
    """Marian's state dict as ours: the decoder's embedding is the output projection, and
    with a `joint` vocabulary the encoder's too (one matrix)."""
    names = weight_names(cfg, joint)
    shared = state.get("model.shared.weight", state.get("model.encoder.embed_tokens.weight"))
    if joint and shared is not None:
        state = {"model.shared.weight": shared, **state}
    target = state.get(names["src_embed.weight" if joint else "tgt_embed.weight"][0])
    if "final_logits_bias" not in state and target is not None:  # absent: no bias
        state = {**state, "final_logits_bias": target.new_zeros(1, len(target))}
    ours = {}
    for name, theirs in names.items():
        missing = [t for t in theirs if t not in state]
        if missing:
            raise ConfigError(f"{file}: no {missing[0]} (weights and config.json disagree)")
        ours[name] = torch.cat([state[t] for t in theirs])
    ours["logits_bias"] = ours["logits_bias"].flatten()
    if joint:
        ours["tgt_embed.weight"] = ours["src_embed.weight"]
    ours["out.weight"] = ours["tgt_embed.weight"]
    return ours


def marian_config(folder: Path) -> Config:
    """Our Config of a Marian folder, from its config.json alone (cheap)."""
    raw = read_marian_config(folder)
    return config_of(folder, raw, raw.get("vocab_size", 0))


def load_marian(folder: Path, device: str | torch.device = "cpu") -> tuple:
    """The model (eval mode, on `device`), config and source and target tokenizers of a
    Marian folder."""
    from .data.spm import SentencePieceTokenizer
    from .model import Transformer

    require_hf()
    raw = read_marian_config(folder)
    src_tok, tgt_tok = read_tokenizers(folder)
    config = config_of(folder, raw, src_tok.get_vocab_size())
    target_vocab = TARGET_VOCAB if separate_vocabs(folder) else "vocab.json"
    sides = (
        ("vocab_size", raw.get("vocab_size"), src_tok, "vocab.json"),
        (
            "decoder_vocab_size",
            raw.get("decoder_vocab_size") or raw.get("vocab_size"),
            tgt_tok,
            target_vocab,
        ),
    )
    for key, size, tokenizer, file in sides:
        if size != tokenizer.get_vocab_size():
            raise ConfigError(
                f"{folder / CONFIG}: {key} {size} is not that of {file} "
                f"({tokenizer.get_vocab_size()})"
            )
        pad, eos = (tokenizer.token_to_id(token) for token in ("<pad>", "</s>"))
        if isinstance(tokenizer, SentencePieceTokenizer):
            pad, eos = (tokenizer.token_to_id(tokenizer.specials[k]) for k in ("pad", "eos"))
        if (pad, eos) != (config.model.pad_id, config.model.eos_id):
            raise ConfigError(
                f"{folder / CONFIG}: pad_token_id/eos_token_id {config.model.pad_id}/"
                f"{config.model.eos_id} are not {file}'s ({pad}/{eos})"
            )
    joint = config.tokenizer.joint
    sizes = src_tok.get_vocab_size(), tgt_tok.get_vocab_size()
    model = Transformer(config.model, *sizes, joint=joint)
    state = to_ours(read_state(folder), config.model, folder, joint)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ConfigError(
            f"{folder}: the weights' shapes disagree with config.json: "
            f"{' '.join(str(e).split())[:300]}"
        ) from None
    return model.to(device).eval(), config, src_tok, tgt_tok
