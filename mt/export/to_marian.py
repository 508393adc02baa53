"""Write a checkpoint as a `transformers` MarianMT folder (`mt export --format hf`): what
AutoModelForSeq2SeqLM, AutoTokenizer and pipeline("translation") load.

The weights go out through mt.from_marian's name map. Our sinusoids interleave sin and cos where
Marian puts them in halves (`model.positions`): the same frequencies, so a fixed permutation
of the model dimension, applied to every tensor that reads or writes the residual stream
(embeddings and output projection, LayerNorms, the projections in and out of attention and
the feed-forward network), makes Marian's table ours exactly; an imported Marian model
(positions: halves) goes out unpermuted. A permutation at export, not a layout key of our
models, because Marian has no layout to choose: our own models keep their tables, and the
weights are the same numbers reordered. The tokenizer goes out as `tokenizer.json` (our
byte-level BPE, `</s>` appended by its post-processor) that AutoTokenizer loads as a fast
tokenizer, for both sides: a joint vocabulary (a fast tokenizer is one, so our separate
vocabularies cannot go out). A Marian model brought in goes back out with its own
SentencePiece files, and `target_vocab.json` with MarianConfig's
share_encoder_decoder_embeddings false where its vocabularies are separate. What MarianMT
cannot hold is refused in one line.

The generation config carries the run's beam and makes transformers' beam search as close to
ours as its options allow (`search_options`), and forbids PAD and BOS, as our search does
(and under mt's rules an empty translation: min_new_tokens 1).
Under mt's rules (decode.rules mt) two differences cannot be written there: the length
penalty, GNMT's ((5 + L) / 6) ** alpha where transformers divides by L ** length_penalty,
and the length limit, a * source length + b tokens per sentence where transformers has one
for all. The penalty is matched where it decides: the exponent whose L ** p falls with L as
GNMT's does, d log / d log L = alpha * L / (5 + L), averaged over the run's validation
targets (EOS counted); early_stopping "never" stops as ours does, when no live hypothesis
can beat the best finished one even at the longest length; and max_length is our limit
for the longest validation source, which keeps a looping output as short as ours on the
sentences the model was made for (a longer source may need a larger max_new_tokens passed
to generate()). Under decode.rules transformers the run's alpha and transformers' own
stopping are exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..config import SPECIAL_TOKENS, Config
from ..data.spm import SentencePieceTokenizer
from ..decoding.ct2 import known_bleu
from ..decoding.search import least_tokens, output_lengths, within_positions
from ..decoding.trained import METADATA
from ..from_marian import MT_KEY, TARGET_VOCAB, TOKENIZER_FILES, mt_keys, require_hf, weight_names
from ..model import max_sentence_tokens
from ..run_folder import data_dir, store_files
from .converter import convert

GNMT_OFFSET = 5  # GNMT's penalty ((5 + L) / 6) ** alpha
TYPICAL_LENGTH = 25  # target tokens, EOS counted, where the run's validation set is not at hand

ACTIVATION_NAMES = {"relu": "relu", "gelu": "gelu", "swish": "swish"}


def unsupported(config: Config, sentencepiece: bool = False) -> list[str]:
    """Every reason MarianMT cannot hold a model of this config (none: it can);
    `sentencepiece`: its tokenizers are a Marian model's (mt.data.spm), which MarianTokenizer
    can hold apart."""
    m, reasons = config.model, []
    if m.norm_first:
        reasons.append("model.norm_first=true (MarianMT is post-norm)")
    if not config.tokenizer.joint and not sentencepiece:  # a fast tokenizer: one vocabulary
        reasons.append(
            "tokenizer.joint=false (separate vocabularies; export a joint-vocabulary run)"
        )
    if not m.share_embeddings:
        reasons.append(
            "model.share_embeddings=false (MarianMT ties embeddings and output projection)"
        )
    return reasons


class ToMarian:
    """The `Converter` to a transformers MarianMT folder (the module's docstring)."""

    cannot: ClassVar[str] = "MarianMT cannot hold"
    options: ClassVar[tuple[str, ...]] = ()

    def refusals(self, file: Path) -> list[str]:
        from .. import checkpoint as ckpt

        src_tokenizer = ckpt.read_tokenizers(file)[0]
        sentencepiece = isinstance(src_tokenizer, SentencePieceTokenizer)
        return unsupported(ckpt.read_config(file), sentencepiece)

    def require(self) -> None:
        require_hf()

    def write(self, loaded: Any, folder: Path) -> None:
        from .. import checkpoint as ckpt

        config = loaded.config
        lengths = validation_lengths(ckpt.run_dir_of(loaded.path, config))
        model = marian_model(loaded.model, config, lengths, loaded.metadata.get(METADATA))
        model.save_pretrained(folder)
        _save_tokenizer(loaded, config, folder)
        longest = model.generation_config.max_length - 2  # tokens before EOS
        card = model_card(config, loaded.metadata, longest)
        (folder / "README.md").write_text(card, encoding="utf-8")


def to_marian(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Write `checkpoint` as the MarianMT folder `out` atomically and return its path."""
    return convert(ToMarian(), checkpoint, out, force)


def validation_lengths(run_dir: Path) -> dict[str, np.ndarray]:
    """Each side's ("src", "tgt") validation sentence lengths in tokens, EOS counted, from
    the run's prepared store; {} where it is not there (a Marian folder, a checkpoint moved
    away)."""
    lengths = {}
    for side in ("src", "tgt"):
        offsets = store_files(data_dir(run_dir), "valid", side)[1]
        found = np.diff(np.fromfile(offsets, np.int64)) + 1 if offsets.is_file() else []
        if len(found):
            lengths[side] = found
    return lengths


def search_options(config: Config, lengths: dict[str, np.ndarray]) -> dict[str, Any]:
    """generation_config.json's search, from the run's validation `lengths`
    (`validation_lengths`): transformers' own rules under decode.rules transformers, else
    mt's as near as transformers can (the module's docstring). Both stop at mt's limit for
    the longest validation source (the model's longest output without one): one limit for
    every sentence, where ours is each sentence's own."""
    d = config.decode
    longest = torch.tensor(max_sentence_tokens(config.model))
    if "src" in lengths:
        longest = output_lengths(torch.tensor(lengths["src"].max()), d.max_len_a, d.max_len_b)
    options: dict[str, Any] = {
        "num_beams": d.beam,
        # its EOS and the decoder's start counted; max_length, not max_new_tokens, which
        # transformers 4's pipeline("translation") replaces with its own 256
        "max_length": int(within_positions(longest, config.model)) + 2,
    }
    if d.rules == "transformers":
        return options | {"length_penalty": d.alpha}
    targets = lengths.get("tgt", np.array([TYPICAL_LENGTH]))
    slope = d.alpha * targets / (GNMT_OFFSET + targets)
    return options | {
        "length_penalty": round(float(slope.mean()), 4),
        "early_stopping": "never",
        "min_new_tokens": least_tokens(d),  # no empty translation
    }


def marian_model(
    model: Any, config: Config, lengths: dict[str, np.ndarray], trained: Any = None
) -> Any:
    """A transformers MarianMTModel holding our Transformer's weights, its generation config
    from `search_options` (`lengths`: the run's validation lengths); its config.json keeps,
    under MT_KEY, what mt decodes it with besides (`trained`: the weights' measurements of
    mt.decoding.trained, and the placeholders of the vocabulary), which transformers keeps
    and ignores."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    m = config.model
    forbidden = sorted({m.pad_id, m.bos_id})
    special_ids = {
        "pad_token_id": m.pad_id,
        "eos_token_id": m.eos_id,
        "forced_eos_token_id": m.eos_id,
        "decoder_start_token_id": m.bos_id,
    }
    marian = MarianMTModel(
        MarianConfig(
            vocab_size=model.src_embed.num_embeddings,
            decoder_vocab_size=model.out.out_features,
            d_model=m.d_model,
            encoder_layers=m.encoder_layers,
            decoder_layers=m.decoder_layers,
            encoder_attention_heads=m.heads,
            decoder_attention_heads=m.heads,
            encoder_ffn_dim=m.d_ff,
            decoder_ffn_dim=m.d_ff,
            activation_function=ACTIVATION_NAMES[m.activation],
            dropout=m.dropout,
            attention_dropout=m.attention_dropout,
            max_position_embeddings=m.max_positions,
            scale_embedding=True,
            share_encoder_decoder_embeddings=config.tokenizer.joint,
            tie_word_embeddings=True,
            **special_ids,
            **{MT_KEY: mt_keys(config, trained)},
        )
    )
    state = marian_state(model, config.tokenizer.joint)
    missing, unexpected = marian.load_state_dict(state, strict=False)
    if unexpected or any("embed_positions" not in name for name in missing):  # a bug of ours
        raise AssertionError(f"MarianMTModel's names: {missing} missing, {unexpected} unknown")
    marian.tie_weights()
    marian.generation_config = GenerationConfig(
        **search_options(config, lengths),
        bad_words_ids=[[i] for i in forbidden],
        **special_ids,
    )
    return marian.eval()


def marian_state(model: Any, joint: bool) -> dict[str, torch.Tensor]:
    """Our state dict under Marian's names, the model dimension permuted to Marian's sinusoid
    layout where ours interleaves (see the module's docstring); a `joint` vocabulary's
    embeddings as one shared matrix."""
    cfg, state = model.cfg, model.state_dict()
    if not cfg.logits_bias:
        state["logits_bias"] = torch.zeros(model.out.out_features)
    d = cfg.d_model
    perm = None
    if cfg.positions == "interleaved":  # Marian's column j is our column perm[j]
        perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    out = {}
    for ours, theirs in weight_names(cfg, joint).items():
        tensor = _permuted(ours, state[ours].detach().float(), perm)
        for name, part in zip(theirs, tensor.split(len(tensor) // len(theirs))):
            out[name] = part.clone()
    out["final_logits_bias"] = out["final_logits_bias"].view(1, -1)
    if joint:
        for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            out[name] = out["model.shared.weight"]
    out["lm_head.weight"] = out["model.decoder.embed_tokens.weight"]
    return out


def _permuted(name: str, tensor: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    # which of the tensor's dimensions is the residual stream's, by what the parameter does
    if perm is None or name == "logits_bias":
        return tensor
    writes = any(k in name for k in (".out.", ".ff.2.", ".norms."))
    if name.endswith("embed.weight") or (not writes and name.endswith(".weight")):
        return tensor[:, perm]  # reads the stream (embeddings: their rows are added to it)
    return tensor[perm] if writes else tensor  # writes it; a reading layer's bias: its own


def _save_tokenizer(loaded: Any, config: Config, folder: Path) -> None:
    from transformers import MarianTokenizer, PreTrainedTokenizerFast

    src, tgt = loaded.src_tokenizer, loaded.tgt_tokenizer
    if isinstance(src, SentencePieceTokenizer):  # a Marian model's own files, back out
        (folder / "source.spm").write_bytes(src.protos[0])
        (folder / "target.spm").write_bytes(tgt.protos[0])
        (folder / "vocab.json").write_text(json.dumps(src.vocab), encoding="utf-8")
        files = [str(folder / name) for name in TOKENIZER_FILES]
        options = {"source_lang": config.data.src_lang, "target_lang": config.data.tgt_lang}
        if not config.tokenizer.joint:
            (folder / TARGET_VOCAB).write_text(json.dumps(tgt.vocab), encoding="utf-8")
            options |= {"target_vocab_file": str(folder / TARGET_VOCAB), "separate_vocabs": True}
        MarianTokenizer(*files, **src.specials_as_tokens(), **options).save_pretrained(folder)
        return
    pad, bos, eos, unk = SPECIAL_TOKENS  # the ids 0..3 of every vocabulary mt learns
    fast = PreTrainedTokenizerFast(
        tokenizer_object=src,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        model_max_length=config.model.max_positions - 1,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(folder)
    # the class name transformers 4 and 5 both load (5 writes its own, TokenizersBackend)
    config_file = folder / "tokenizer_config.json"
    tokenizer_config = json.loads(config_file.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")


def model_card(config: Config, metadata: dict[str, str], longest: int) -> str:
    """README.md in the Hub's format: languages, data, metrics, how to use (`longest`: the
    tokens generation_config.json lets an output have before its EOS)."""
    src, tgt = config.data.src_lang, config.data.tgt_lang
    bleu = known_bleu(metadata)
    data = config.data.files.train or [f"{config.data.name} ({config.data.subset})"]
    metrics = (
        f"model-index:\n- name: mt-{src}-{tgt}\n  results:\n  - task:\n"
        f"      type: translation\n    metrics:\n    - type: bleu\n      value: {bleu:.2f}\n"
        f"      name: validation BLEU (sacreBLEU)\n"
        if bleu is not None
        else ""
    )
    m = config.model
    return (
        f"---\nlanguage:\n- {src}\n- {tgt}\ntags:\n- translation\n- marian\n- mt\n"
        f"pipeline_tag: translation\nlibrary_name: transformers\n{metrics}---\n\n"
        f"# {src}→{tgt} Transformer trained with mt\n\n"
        f"A post-norm Transformer ({m.encoder_layers}+{m.decoder_layers} layers, d_model "
        f"{m.d_model}, {m.heads} heads, d_ff {m.d_ff}, {m.activation}) trained with `mt` "
        f"for {metadata.get('step', '?')} updates and exported as a MarianMT model.\n\n"
        f"- Training data: {json.dumps(data)}\n"
        f"- Validation BLEU: {'n/a' if bleu is None else f'{bleu:.2f}'}\n"
        f"- Decoding: beam {config.decode.beam}, length penalty {config.decode.alpha} in `mt` "
        "(GNMT's; generation_config.json holds transformers' nearest)\n"
        f"- Output length: at most {longest} tokens by default, `mt`'s limit for the "
        "longest validation sentence; pass `max_new_tokens` for longer inputs\n\n"
        "## How to use\n\nWith transformers 4:\n\n```python\nfrom transformers import pipeline\n\n"
        'translate = pipeline("translation", model="THIS_FOLDER_OR_HUB_ID")\n'
        'print(translate("Hello, world.")[0]["translation_text"])\n```\n\n'
        "With transformers 5, which has no translation pipeline:\n\n```python\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
        'tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER_OR_HUB_ID")\n'
        'model = AutoModelForSeq2SeqLM.from_pretrained("THIS_FOLDER_OR_HUB_ID")\n'
        'inputs = tokenizer(["Hello, world."], return_tensors="pt", padding=True)\n'
        "print(tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True))\n```\n"
    )
