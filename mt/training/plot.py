"""Pictures of a run: training curves from metrics.jsonl, and attention heat maps.

matplotlib is an optional extra (`pip install 'mt[plot]'`), imported only here, lazily. Figures
are drawn on the Agg canvas without pyplot, so nothing needs a display and no global
matplotlib state (the backend, pyplot's figure list) is touched.
"""

from __future__ import annotations

import dataclasses
import textwrap
import warnings
from pathlib import Path
from typing import Any

from ..data.tokenizer import SPECIAL_TOKENS
from ..errors import ConfigError
from ..files import atomic_path
from ..run_folder import METRICS, PLOT
from .metrics import read_metrics

INSTALL_HINT = "plotting needs matplotlib: pip install 'mt[plot]'"
SPACE = "▁"  # marks a token's leading space, as SentencePiece does


def figure(**kwargs: Any):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, out: Path) -> Path:
    """Write the PNG atomically: a viewer refreshing it during training never sees half a file."""
    with atomic_path(out, suffix=".png") as tmp, warnings.catch_warnings():
        # Fonts lack some glyphs (emoji); a box in a label is better than a screen of warnings.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(tmp, format="png")
    return out


# ----------------------------------------------------------------------------- training curves


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Loss, validation BLEU, learning rate and throughput against updates, in one PNG.

    The top panels also carry the training time on a second x-axis.
    """
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("kind") == "train"]
    valid = [r for r in records if r.get("kind") == "valid"]
    if not train and not valid:
        raise ConfigError(f"{run_dir / METRICS}: no metrics yet; try again in a moment")

    def xy(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
        rows = [r for r in rows if isinstance(r.get(key), (int, float))]
        return [r["step"] for r in rows], [r[key] for r in rows]

    fig = figure(figsize=(12, 8), dpi=100, layout="constrained")
    (loss, bleu), (lr, speed) = fig.subplots(2, 2, sharex=True)

    loss.plot(*xy(train, "loss"), color="tab:blue", lw=1, alpha=0.8, label="train")
    loss.plot(*xy(valid, "loss"), "o-", color="tab:orange", label="valid")
    loss.set(title="Loss (label-smoothed, per token)", ylabel="loss")
    loss.legend()

    best = _bleu_panel(bleu, *xy(valid, "bleu"))

    lr.plot(*xy(train, "lr"), color="tab:purple")
    fits = [r for r in records if r.get("kind") == "horizon"]
    if fits:  # the horizon fitted to the time budget, as last estimated
        budget = _duration(fits[-1]["budget_s"])
        lr.axvline(fits[-1]["horizon"], ls=":", color="tab:red", label=f"fits in {budget}")
        lr.legend()
    lr.set(title="Learning rate", ylabel="learning rate", xlabel="updates")
    lr.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))

    speed.plot(*xy(train, "tokens_per_s"), color="tab:gray")
    speed.set(title="Throughput (target tokens/s)", ylabel="tokens/s", xlabel="updates")
    speed.set_ylim(bottom=0)

    for ax in (loss, bleu, lr, speed):
        ax.grid(alpha=0.3)
    _time_axis([loss, bleu, lr], records)  # the rate against wall-clock time too

    last = max(records, key=lambda r: r.get("step", 0))
    title = f"{run_dir.resolve().name}: {last.get('step', 0):,} updates"
    if "elapsed_s" in last:
        title += f", {_duration(last['elapsed_s'])} of training"
    if best:
        title += f"; best valid BLEU {best[1]:.2f} at update {best[0]:,}"
    fig.suptitle(title)
    return save_png(fig, Path(out) if out else run_dir / PLOT)


def _bleu_panel(ax, steps: list[float], scores: list[float]) -> tuple[float, float] | None:
    """Validation BLEU against updates, its best starred: (step, BLEU) of the best, if any."""
    ax.plot(steps, scores, "o-", color="tab:green")
    ax.set(title="Validation BLEU", ylabel="BLEU")
    ax.margins(y=0.15)  # room for the best score's label
    if not scores:
        ax.text(0.5, 0.5, "no validation yet", ha="center", transform=ax.transAxes)
        return None
    best = max(range(len(scores)), key=scores.__getitem__)
    ax.plot(steps[best], scores[best], "*", ms=16, color="tab:red", label="best")
    label = f"{scores[best]:.2f}"
    ax.annotate(label, (steps[best], scores[best]), xytext=(8, 8), textcoords="offset points")
    ax.legend()
    return steps[best], scores[best]


def _time_axis(axes: list, records: list[dict]) -> None:
    """A top x-axis of elapsed training time, interpolated from the (update, elapsed) pairs."""
    import numpy as np

    pairs = sorted({(r["step"], r["elapsed_s"]) for r in records if "elapsed_s" in r})
    if len(pairs) < 2 or pairs[-1][0] <= pairs[0][0] or pairs[-1][1] <= pairs[0][1]:
        return  # too few points to map updates to time
    last = pairs[-1][1]
    unit, scale = (
        ("seconds", 1) if last < 120 else ("minutes", 60) if last < 7200 else ("hours", 3600)
    )
    steps, times = np.array(pairs, dtype=float).T
    times /= scale

    for ax in axes:
        top = ax.secondary_xaxis(
            "top",
            functions=(lambda x: _interp(x, steps, times), lambda t: _interp(t, times, steps)),
        )
        top.set_xlabel(f"training {unit}", fontsize="small")
        top.tick_params(labelsize="small")


def _interp(x, xp, fp):
    """np.interp, continued beyond the ends at the average slope: the axis margins need ticks."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    rate = (fp[-1] - fp[0]) / (xp[-1] - xp[0])
    y = np.interp(x, xp, fp)
    y = np.where(x < xp[0], fp[0] + (x - xp[0]) * rate, y)
    return np.where(x > xp[-1], fp[-1] + (x - xp[-1]) * rate, y)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# ----------------------------------------------------------------------------- attention


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
    import torch

    from ..data import tokenizer as tok
    from ..decoding.pieces import source_pieces
    from ..decoding.translate import translate_ids
    from ..model import max_sentence_tokens

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
        labels.append(SPACE + text[1:] if text.startswith(" ") else text)
    return labels


def _byte_symbols() -> dict[str, int]:
    """The printable character byte-level BPE (GPT-2) writes for each byte, mapped back to it."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    chars = [*map(chr, printable), *(chr(256 + n) for n in range(len(others)))]
    return dict(zip(chars, printable + others))
