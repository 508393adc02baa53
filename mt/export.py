"""Export a checkpoint to CTranslate2, and translate with the exported folder.

The CT2 model is built from our weights through CT2's own spec API (TransformerSpec): post-
or pre-norm as trained, our sinusoid table (sin and cos interleaved, not CT2's concatenated
default) as the position encodings, embeddings scaled by sqrt(d_model), tied matrices stored
once, EOS appended to every source as our encoder expects, BOS `<s>` starting the decoder,
and the vocabulary as token strings. The folder also holds the tokenizers and `mt.json`.

Decoding maps our options to CT2's: beam, n-best, `decode.alpha`, no-repeat n-grams,
batches of about `batch_tokens` source tokens. CT2 divides a hypothesis's log-probability by
L ** alpha, ours by GNMT's ((5 + L) / 6) ** alpha: its hypotheses are rescored with ours
(greedy search is unaffected; the beam search itself may rarely differ). PAD and BOS are
never generated, as in ours.

`ctranslate2` is an optional extra (pip install 'mt[export]'), imported only in here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from . import tokenizer as tok
from .config import Config, DecodeConfig, ModelConfig, config_from_dict
from .errors import ConfigError, MtError
from .files import atomic_path
from .tokenizer import SPECIAL_TOKENS

FORMATS = ("ctranslate2",)
QUANTIZATIONS = ("int8", "int8_float32", "bfloat16", "float16", "float32")
MANIFEST = "mt.json"
MANIFEST_FORMAT = "mt-ctranslate2-1"
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which mt.model uses; CT2's is 1e-6
ACTIVATIONS = ("relu", "gelu")  # ours that CT2 has (its GELU is the exact, erf one, as torch's)


def ctranslate2() -> Any:
    """The ctranslate2 module, or a one-line error saying how to install it."""
    try:
        import ctranslate2 as ct2
    except ImportError:
        raise MtError("ctranslate2 is not installed: pip install 'mt[export]'") from None
    return ct2


def is_exported(path: str | Path) -> bool:
    """Whether `path` is a folder written by `export`."""
    return (Path(path) / MANIFEST).is_file()


def unsupported(cfg: ModelConfig) -> str | None:
    """Why CT2 cannot represent a model of this config, or None if it can."""
    if cfg.activation not in ACTIVATIONS:
        return f"model.activation={cfg.activation} (CT2 export supports {', '.join(ACTIVATIONS)})"
    return None


def export(
    checkpoint: str | Path,
    out: str | Path,
    fmt: str = "ctranslate2",
    quantization: str = "float32",
    force: bool = False,
    command: str | None = None,
) -> Path:
    """Write the exported folder `out` atomically and return its path; `command`, the
    command line that asked for it, goes to mt.json."""
    from . import checkpoint as ckpt

    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: unknown (known: {', '.join(FORMATS)})")
    if quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"--quantization {quantization}: unknown (known: {', '.join(QUANTIZATIONS)})"
        )
    out = Path(out)
    if out.exists() and not force:
        raise ConfigError(f"{out}: already exists (pass --force to replace it)")
    file = ckpt.resolve(checkpoint)
    why = unsupported(ckpt.read_config(file).model)
    if why:
        raise ConfigError(f"{file}: CTranslate2 cannot represent {why}")
    ctranslate2()
    loaded = ckpt.load(file)
    spec = transformer_spec(loaded)
    spec.validate()
    spec.optimize(quantization=quantization)
    cfg = loaded.config
    src_file, tgt_file = tok.tokenizer_files(
        Path(), cfg.data.src_lang, cfg.data.tgt_lang, cfg.tokenizer.joint
    )
    manifest = {
        "format": MANIFEST_FORMAT,
        "engine": fmt,
        "quantization": quantization,
        "checkpoint": str(file.resolve()),
        "step": int(loaded.metadata.get("step", 0)),
        "bleu": known_bleu(loaded.metadata),
        "command": command,
        "src_tokenizer": str(src_file),
        "tgt_tokenizer": str(tgt_file),
        "config": cfg.to_dict(),
    }
    with atomic_path(out) as tmp:
        tmp.mkdir()
        spec.save(str(tmp))
        loaded.src_tokenizer.save(str(tmp / src_file))
        if tgt_file != src_file:
            loaded.tgt_tokenizer.save(str(tmp / tgt_file))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def known_bleu(meta: dict[str, str]) -> float | None:
    """The validation BLEU the checkpoint recorded (None before any validation or averaged)."""
    if "averaged" in meta:
        return None
    bleu = json.loads(meta.get("best_bleu", "-1"))
    return bleu if bleu >= 0 else None


def transformer_spec(loaded: Any) -> Any:
    """CT2's TransformerSpec filled with the weights of `loaded` (a `checkpoint.Loaded`)."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs.transformer_spec import TransformerSpec

    model, cfg = loaded.model, loaded.config.model
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
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
    _, bos, eos, unk = SPECIAL_TOKENS
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = bos, eos, unk
    spec.config.decoder_start_token = bos
    spec.config.add_source_eos = True  # our encoder reads the source ids and EOS
    spec.register_source_vocabulary(_tokens(loaded.src_tokenizer))
    spec.register_target_vocabulary(_tokens(loaded.tgt_tokenizer))
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


def _tokens(tokenizer: Tokenizer) -> list[str]:
    """The vocabulary as token strings, by id."""
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    if tokens[: len(SPECIAL_TOKENS)] != list(SPECIAL_TOKENS) or None in tokens:
        raise ConfigError(f"the vocabulary does not start with {' '.join(SPECIAL_TOKENS)}")
    return tokens


@dataclass
class Exported:
    """An exported folder ready to translate: `cfg` is the model config, as Transformer's."""

    translator: Any  # ctranslate2.Translator
    config: Config
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    path: Path
    manifest: dict[str, Any]
    device: str = "cpu"

    def __post_init__(self) -> None:  # the lookups of every translation, made once
        self.src_tokens = _tokens(self.src_tokenizer)  # CT2 reads tokens, not ids
        self.tgt_ids = self.tgt_tokenizer.get_vocab()

    @property
    def cfg(self) -> ModelConfig:  # what translate.source_ids reads from a model
        return self.config.model


def read_config(path: str | Path) -> Config:
    """The config an exported folder was trained with."""
    manifest = _manifest(Path(path))
    return config_from_dict(manifest["config"], f"{Path(path) / MANIFEST} (config)")


def _manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path / MANIFEST}: not readable ({e})") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ConfigError(f"{path / MANIFEST}: not an mt export ('{MANIFEST_FORMAT}' expected)")
    return manifest


def load(path: str | Path, device: str = "cpu", threads: int = 0) -> Exported:
    """An exported folder's translator (`threads` 0: CT2's default) and tokenizers."""
    ct2 = ctranslate2()
    path = Path(path)
    manifest = _manifest(path)
    config = read_config(path)
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    index = int(str(device).partition(":")[2] or 0)
    try:
        translator = ct2.Translator(
            str(path), device=kind, device_index=index, intra_threads=threads
        )
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"{path}: CTranslate2 cannot load it ({e})") from None
    src = Tokenizer.from_file(str(path / manifest["src_tokenizer"]))
    tgt = Tokenizer.from_file(str(path / manifest["tgt_tokenizer"]))
    return Exported(translator, config, src, tgt, path, manifest, str(device))


def translate_nbest(
    exported: Exported, texts: Sequence[str], cfg: DecodeConfig
) -> list[list[tuple[str, float]]]:
    """As `mt.translate.translate_nbest`: up to `cfg.nbest` (text, score) pairs per text,
    best first; the score is the length-normalised log-probability (NaN for greedy search).

    Output lengths: ours stop each sentence at a * source_length + b tokens; CT2 has one
    limit per call, so each output is cut to its own limit afterwards (exact for greedy).
    """
    from .model import max_length
    from .translate import decode_batch_tokens, source_ids

    ids = source_ids(exported, exported.src_tokenizer, texts)
    # as decode.max_output_lengths: the source length counts its EOS
    limits = [int((len(x) + 1) * cfg.max_len_a + cfg.max_len_b) for x in ids]
    limits = [min(n, max_length(exported.cfg)) for n in limits]
    greedy = cfg.beam == 1 and cfg.nbest == 1
    out: list[list[tuple[str, float]]] = [[("", float("nan"))] for _ in ids]
    todo = [i for i, x in enumerate(ids) if x]
    if not todo:
        return out
    pad, bos = SPECIAL_TOKENS[0], SPECIAL_TOKENS[1]
    vocab_size = exported.tgt_tokenizer.get_vocab_size()
    budget = decode_batch_tokens(cfg, exported.cfg, vocab_size, exported.device)
    results = exported.translator.translate_batch(
        [[exported.src_tokens[t] for t in ids[i]] for i in todo],
        max_batch_size=max(1, budget // cfg.beam),  # ours counts a source token a beam
        batch_type="tokens",
        beam_size=cfg.beam,
        num_hypotheses=cfg.nbest if greedy else max(cfg.nbest, cfg.beam),
        length_penalty=cfg.alpha,
        no_repeat_ngram_size=cfg.no_repeat_ngram,
        max_decoding_length=max(limits[i] for i in todo) + 1,  # room for EOS
        max_input_length=0,  # source_ids cut them already
        min_decoding_length=0,  # CT2 forbids an empty output by default, renormalising
        return_scores=not greedy,
        suppress_sequences=[[pad], [bos]],
    )
    for i, result in zip(todo, results):
        out[i] = _ranked(result, exported, limits[i], cfg, greedy)
    return out


def _ranked(
    result: Any, exported: Exported, limit: int, cfg: DecodeConfig, greedy: bool
) -> list[tuple[str, float]]:
    """One source's CT2 result as up to `cfg.nbest` (text, score) pairs, best first, each
    output cut to its own length limit."""
    from .decode import length_penalty

    hyps = [[exported.tgt_ids[t] for t in h[:limit]] for h in result.hypotheses]
    texts = tok.decode(exported.tgt_tokenizer, hyps)
    if greedy:
        return [(text, float("nan")) for text in texts]
    # CT2 ranks by logprob / L ** alpha, L counting EOS: rescored by ours, GNMT's
    lengths = [len(h) + 1 for h in result.hypotheses]
    scores = [
        s * n**cfg.alpha / length_penalty(n, cfg.alpha) for n, s in zip(lengths, result.scores)
    ]
    return sorted(zip(texts, scores), key=lambda p: -p[1])[: cfg.nbest]
