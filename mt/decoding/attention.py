"""`mt attention`: a sentence translated greedily and one heat map a head of a decoder layer's
attention, cross (over the source) or self (over the decoder's input)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import torch

from ..data import tokenizer as tok
from ..data.tokenizer import SPECIAL_TOKENS
from ..errors import ConfigError
from ..figures import figure, save_png
from ..model import max_sentence_tokens
from .pieces import source_pieces
from .translate import translate_ids

SPACE = "▁"  # marks a token's leading space, as SentencePiece does


def plot_attention(
    translator,
    sentence: str,
    out: str | Path = "attention.png",
    layer: int = -1,
    kind: str = "cross",
) -> tuple[str, Path]:
    """Translate `sentence` greedily, then draw one heat map per head of a decoder layer.

    `translator` is a torch `engine.Translator`. `layer` counts from 1 (first) or from -1
    (last). Rows are the output tokens, each predicted at its row; columns are the source
    tokens (cross-attention) or the decoder's own input tokens, `<s>` first (self-attention).
    Returns the translation and the PNG's path.
    """
    if kind not in ("cross", "self"):
        raise ConfigError(f"--kind {kind}: must be cross or self")
    layers = len(translator.model.decoder)
    if not (1 <= layer <= layers or -layers <= layer <= -1):
        raise ConfigError(
            f"--layer {layer}: the model has {layers} decoder layers; "
            f"use 1..{layers}, or -{layers}..-1 to count from the last"
        )
    if not sentence.strip():
        raise ConfigError("the sentence is empty")
    figure()  # fail on a missing matplotlib before the slow part
    n = layer if layer > 0 else layers + 1 + layer  # from 1
    translation, weights, rows, cols = _attention(translator, sentence, n, kind)
    fig, width = _heat_maps(weights, rows, cols, kind)
    wrap = max(40, int(width * 12))
    fig.suptitle(
        f"{kind}-attention, decoder layer {n} of {layers}\n"
        + textwrap.fill(f"EN: {sentence}", wrap)
        + "\n"
        + textwrap.fill(f"ES: {translation}", wrap),
        fontsize="medium",
    )
    return translation, save_png(fig, Path(out))


def _attention(translator, sentence: str, layer: int, kind: str):
    """(translation, the weights of decoder layer `layer` (from 1) as (heads, rows, cols),
    the rows' labels, the columns' labels) of the greedy translation of `sentence`."""
    model, device = translator.model, translator.device
    src_tok, tgt_tok = translator.src_tokenizer, translator.tgt_tokenizer
    # the same greedy search `translate --beam 1` runs, with the same length limits
    lead = translator.config.decode.target_language
    ids = source_pieces(src_tok, [sentence], max_sentence_tokens(model.cfg), lead).ids
    if len(ids) > 1:  # its pieces would be translated apart: no one map to draw
        raise ConfigError(
            f"the sentence is longer than the {max_sentence_tokens(model.cfg)} tokens the model's "
            "positions hold: its attention cannot be drawn whole; shorten it"
        )
    greedy = dataclasses.replace(translator.config.decode, beam=1, nbest=1, sampling=False)
    tokens = translate_ids(model, ids, greedy, device=device)[0][0].tokens
    _, bos, eos = model.specials  # the model's own (an imported Marian model's differ)
    src_ids, tgt_in = [*ids[0], eos], [bos, *tokens]
    src, tgt = (torch.tensor([x], device=device) for x in (src_ids, tgt_in))
    self_w, cross_w = model.attention_weights(src, tgt)[layer - 1]
    weights = (cross_w if kind == "cross" else self_w)[0].float().cpu()
    rows = _labels(tgt_tok, [*tokens, eos])
    cols = _labels(src_tok, src_ids) if kind == "cross" else _labels(tgt_tok, tgt_in)
    return tok.detokenize(tgt_tok, [tokens])[0], weights, rows, cols


def _heat_maps(weights, rows: list[str], cols: list[str], kind: str):
    """A figure of one heat map a head, and its width in inches."""
    heads = weights.shape[0]
    # Square cells of about a quarter inch, room for the labels (~1 inch) around each panel,
    # and the full grid of heads whose figure is closest to a 3:2 landscape.
    panel_w, panel_h = 0.25 * len(cols) + 1.0, 0.25 * len(rows) + 1.0
    ncols = min(
        (c for c in range(1, heads + 1) if heads % c == 0),
        key=lambda c: abs(c * panel_w / (heads // c * panel_h) - 1.5),
    )
    nrows = heads // ncols
    width, height = max(6.0, ncols * panel_w + 1.5), max(4.0, nrows * panel_h + 1.5)
    fig = figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    for h, ax in enumerate(axes.flat):
        image = ax.imshow(weights[h].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"head {h + 1}", fontsize="medium")
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize="small")
        ax.set_yticks(range(len(rows)), rows, fontsize="small")
        ax.tick_params(labelbottom=h >= heads - ncols, labelleft=h % ncols == 0)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.supxlabel("source token" if kind == "cross" else "decoder input token", fontsize="medium")
    fig.supylabel("output token", fontsize="medium")
    return fig, width


def _labels(tokenizer, ids: list[int]) -> list[str]:
    """A readable label for each token: its text, ▁ for a leading space, hex for a bare byte."""
    symbols = _byte_symbols()
    labels = []
    for i in ids:
        raw = tokenizer.id_to_token(i) or f"<{i}>"
        if i < len(SPECIAL_TOKENS):  # <s>, </s>: decode() would drop them
            labels.append(raw)
            continue
        text = tokenizer.decode([i])
        if "\ufffd" in text:  # part of a multi-byte character: show its bytes
            text = "".join(f"\\x{symbols[c]:02x}" if c in symbols else c for c in raw)
        # a word's first token: decode() may have taken its space off (mt.data.tokenizer)
        spaced = tok.starts_word(tokenizer, i) or text.startswith(" ")
        labels.append(SPACE + text.removeprefix(" ") if spaced else text)
    return labels


def _byte_symbols() -> dict[str, int]:
    """The printable character byte-level BPE (GPT-2) writes for each byte, mapped back to it."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    chars = [*map(chr, printable), *(chr(256 + n) for n in range(len(others)))]
    return dict(zip(chars, printable + others))
