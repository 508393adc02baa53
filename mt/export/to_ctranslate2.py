"""Export a checkpoint to a CTranslate2 folder (`mt export --format ctranslate2`).

The CT2 model is built from our weights through CT2's own spec API (TransformerSpec): post-
or pre-norm as trained, our sinusoid table (sin and cos interleaved, or a Marian model's
halves) as the position encodings, embeddings scaled by sqrt(d_model), tied matrices stored
once, the activation (swish is CT2's SWISH, as its own Marian converter has it), a Marian
model's `final_logits_bias` as the output projection's bias, EOS appended to every source as
our encoder expects, the model's BOS starting the decoder (a Marian model's is its PAD,
whose embedding row is read as ours reads it, where CT2's Marian converter drops the row and
starts from zeros), and the vocabulary as token strings. The folder also holds the
tokenizers (a Marian model's SentencePiece ones as its run folder has them) and `mt.json`;
the runtime that translates with it is `mt.decoding.ct2`.

`ctranslate2` is an optional extra (pip install 'mt[export]'), imported only when used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..config import ModelConfig
from ..data.tokenizer import tokenizers_to_str
from ..decoding.ct2 import (
    MANIFEST,
    MANIFEST_FORMAT,
    ctranslate2,
    known_bleu,
    unk_token,
    vocabulary,
)
from ..decoding.trained import METADATA
from ..errors import ConfigError
from ..run_folder import tokenizer_files
from .converter import convert

QUANTIZATIONS = ("int8", "int8_float32", "bfloat16", "float16", "float32")
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which mt.model uses; CT2's is 1e-6
ACTIVATIONS = ("relu", "gelu", "swish")  # ours that CT2 has (its GELU is the erf one, as torch's)


def unsupported(cfg: ModelConfig) -> list[str]:
    """Every reason CT2 cannot represent a model of this config (none: it can)."""
    if cfg.activation not in ACTIVATIONS:
        return [f"model.activation={cfg.activation} (CT2 export supports {', '.join(ACTIVATIONS)})"]
    return []


@dataclass(frozen=True)
class ToCTranslate2:
    """The `Converter` to a CT2 folder, its weights in `quantization`; `command`, the
    command line that asked for it, goes to mt.json."""

    quantization: str = "float32"
    command: str | None = None
    cannot: ClassVar[str] = "CTranslate2 cannot represent"
    options: ClassVar[tuple[str, ...]] = ("quantization",)

    def __post_init__(self) -> None:
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(
                f"--quantization {self.quantization}: unknown (known: {', '.join(QUANTIZATIONS)})"
            )

    def refusals(self, file: Path) -> list[str]:
        from .. import checkpoint as ckpt

        return unsupported(ckpt.read_config(file).model)

    def require(self) -> None:
        ctranslate2()

    def write(self, loaded: Any, folder: Path) -> None:
        spec = transformer_spec(loaded)
        spec.validate()
        spec.optimize(quantization=self.quantization)
        cfg = loaded.config
        src_file, tgt_file = tokenizer_files(
            Path(), cfg.data.src_lang, cfg.data.tgt_lang, cfg.tokenizer.joint
        )
        manifest = {
            "format": MANIFEST_FORMAT,
            "engine": "ctranslate2",
            "quantization": self.quantization,
            "checkpoint": str(loaded.path.resolve()),
            "step": int(loaded.metadata.get("step", 0)),
            "bleu": known_bleu(loaded.metadata),
            # what decoding measured of the weights (mt.decoding.trained), as they keep it
            METADATA: json.loads(loaded.metadata.get(METADATA, "null")),
            "command": self.command,
            "src_tokenizer": str(src_file),
            "tgt_tokenizer": str(tgt_file),
            "config": cfg.to_dict(),
        }
        tokenizers = (loaded.src_tokenizer, loaded.tgt_tokenizer)
        texts = tokenizers_to_str(tokenizers, (src_file, tgt_file))
        folder.mkdir()
        spec.save(str(folder))
        for file, text in {src_file: texts[0], tgt_file: texts[1]}.items():
            (folder / file).write_text(text, encoding="utf-8")
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def to_ctranslate2(
    checkpoint: str | Path,
    out: str | Path,
    quantization: str = "float32",
    force: bool = False,
    command: str | None = None,
) -> Path:
    """Write `checkpoint` as the CT2 folder `out` atomically and return its path."""
    return convert(ToCTranslate2(quantization, command), checkpoint, out, force)


def transformer_spec(loaded: Any) -> Any:
    """CT2's TransformerSpec filled with the weights of `loaded` (a `checkpoint.Loaded`)."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs.transformer_spec import TransformerSpec

    model, cfg = loaded.model, loaded.config.model
    activation = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "swish": common_spec.Activation.SWISH,
    }
    spec = TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.heads,
        pre_norm=cfg.norm_first,
        activation=activation[cfg.activation],
    )
    pe = model.pe.float().numpy()
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _array(model.src_embed.weight)
    enc.position_encodings.encodings = pe
    for layer_spec, layer in zip(enc.layer, model.encoder):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)  # q, k, v fused
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _ffn(layer_spec.ffn, layer, 1)
    dec.embeddings.weight = _array(model.tgt_embed.weight)
    dec.position_encodings.encodings = pe
    dec.projection.weight = _array(model.out.weight)
    if cfg.logits_bias:  # Marian's final_logits_bias
        dec.projection.bias = _array(model.logits_bias)
    for layer_spec, layer in zip(dec.layer, model.decoder):
        _linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        _linear(layer_spec.attention.linear[0], layer.cross_attn.q)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.kv)  # k, v fused
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.norms[1])
        _ffn(layer_spec.ffn, layer, 2)
    if cfg.norm_first:  # pre-norm: the stacks end with a LayerNorm
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    target = vocabulary(loaded.tgt_tokenizer)
    bos, eos = target[cfg.bos_id], target[cfg.eos_id]  # the model's ids, not constants
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.bos_token, spec.config.eos_token = bos, eos
    spec.config.unk_token = unk_token(loaded.tgt_tokenizer)
    spec.config.decoder_start_token = bos
    spec.config.add_source_eos = True  # our encoder reads the source ids and EOS
    spec.register_source_vocabulary(vocabulary(loaded.src_tokenizer))
    spec.register_target_vocabulary(target)
    return spec


def _array(tensor: Any) -> Any:
    return tensor.detach().float().numpy()


def _linear(spec: Any, linear: Any) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _ffn(spec: Any, layer: Any, norm_index: int) -> None:
    _linear(spec.linear_0, layer.ff[0])
    _linear(spec.linear_1, layer.ff[2])
    _norm(spec.layer_norm, layer.norms[norm_index])
