"""`mt plot` and `mt attention`: what each figure draws (the run's records, the model's attention
weights), valid PNGs from a tiny run, clear errors, matplotlib optional."""

from __future__ import annotations

import dataclasses
import shutil
import struct
import sys
from pathlib import Path

import pytest
import torch

import mt.decoding.attention
import mt.training.plot
from helpers.corpus import PAIRS, write_jsonl
from helpers.runs import metric_lines, tiny_config
from mt import checkpoint
from mt.data.tokenizer import BOS, EOS
from mt.decoding.attention import _labels, plot_attention
from mt.decoding.engine import open_translator
from mt.decoding.pieces import source_pieces
from mt.decoding.translate import translate_ids
from mt.model import max_sentence_tokens
from mt.training.plot import plot_run
from mt.training.trainer import train

try:
    import matplotlib  # noqa: F401

    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False
needs_matplotlib = pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="the mt[plot] extra is missing")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run shared by the module: 4 updates, a validation every 2."""
    root = tmp_path_factory.mktemp("plot")
    corpus = write_jsonl(root / "corpus.jsonl", PAIRS)
    run = root / "run"
    train(tiny_config(corpus, run, "train.max_steps=4", "train.eval_every=2", "train.log_every=1"))
    return run


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature and that it is not a stub."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert len(data) > 10_000
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the plots draw, kept instead of saved."""
    figures: list = []
    for module in (mt.training.plot, mt.decoding.attention):
        monkeypatch.setattr(module, "save_png", lambda fig, out: figures.append(fig) or out)
    return figures


def panels(fig) -> dict:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def one_line_error(result: tuple[int, str, str]) -> str:
    """The stderr of a `cli_main` result that must be a one-line usage error (exit 2)."""
    code, _, err = result
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    return err


@needs_matplotlib
def test_plot_writes_the_training_png_into_the_run(run_dir, cli_main):
    code, _, err = cli_main("plot", str(run_dir))
    assert code == 0, err
    out = run_dir / "training.png"
    assert str(out) in err
    width, height = png_size(out)
    assert width >= 600 and height >= 400


@needs_matplotlib
def test_plot_reads_a_metrics_file_that_is_still_being_written(run_dir, cli_main, tmp_path):
    shutil.copy(run_dir / "metrics.jsonl", tmp_path / "metrics.jsonl")
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "train", "step": 5, "epoch": 0, "lo')  # no newline: mid-write
    out = tmp_path / "sub" / "curves.png"
    code, _, err = cli_main("plot", str(tmp_path), "--out", str(out))
    assert code == 0, err
    assert png_size(out)[0] >= 600


def test_plot_errors_are_one_line(cli_main, tmp_path):
    err = one_line_error(cli_main("plot", str(tmp_path / "missing")))
    assert "no such run folder" in err
    err = one_line_error(cli_main("plot", str(tmp_path)))
    assert "metrics.jsonl" in err
    (tmp_path / "metrics.jsonl").write_text("")
    err = one_line_error(cli_main("plot", str(tmp_path)))
    assert "no metrics yet" in err


@needs_matplotlib
@pytest.mark.parametrize("kind", ["cross", "self"])
def test_attention_prints_the_translation_and_writes_a_png(run_dir, cli_main, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    args = ["attention", str(run_dir), "The cat sleeps.", "--kind", kind, "--out", str(out)]
    code, stdout, err = cli_main(*args, "--layer", "1", "--device", "cpu")
    assert code == 0, err
    assert len(stdout.splitlines()) == 1  # the translation (from an untrained model: anything)
    assert str(out) in err
    width, height = png_size(out)
    assert width >= 600 and height >= 400


def test_attention_usage_errors_are_one_line(run_dir, cli_main):
    for layer in ("3", "-3", "0"):  # the tiny model has 2 decoder layers
        err = one_line_error(cli_main("attention", str(run_dir), "Hello.", "--layer", layer))
        assert "use 1..2, or -2..-1" in err
    err = one_line_error(cli_main("attention", str(run_dir), "Hello.", "--kind", "both"))
    assert "cross or self" in err


def test_without_matplotlib_both_commands_say_how_to_get_it(run_dir, cli_main, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)  # None makes `import` fail
    for args in (["plot", str(run_dir)], ["attention", str(run_dir), "Hello."]):
        assert "pip install 'mt[plot]'" in one_line_error(cli_main(*args))


def test_token_labels_are_readable(run_dir):
    tokenizer = checkpoint.load(run_dir, "cpu").src_tokenizer
    ids = tokenizer.encode(" on 😀", add_special_tokens=False).ids
    labels = _labels(tokenizer, [*ids, 2])
    assert labels[0].startswith("▁")  # a leading space is marked
    assert "\\xf0" in "".join(labels)  # a bare byte of the emoji is shown as hex
    assert labels[-1] == "</s>"


@needs_matplotlib
def test_the_training_plot_draws_the_run_s_records(run_dir, drawn):
    plot_run(run_dir)
    records = metric_lines(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    shown = panels(drawn[0])

    def line(title: str, index: int = 0) -> tuple[list, list]:
        drawn_line = shown[title].lines[index]
        return list(drawn_line.get_xdata()), list(drawn_line.get_ydata())

    steps = [r["step"] for r in train]
    assert line("Loss (label-smoothed, per token)") == (steps, [r["loss"] for r in train])
    assert line("Loss (label-smoothed, per token)", 1) == (
        [r["step"] for r in valid],
        [r["loss"] for r in valid],
    )
    assert line("Validation BLEU") == ([r["step"] for r in valid], [r["bleu"] for r in valid])
    best = max(valid, key=lambda r: r["bleu"])
    assert line("Validation BLEU", 1) == ([best["step"]], [best["bleu"]])  # the star
    assert line("Learning rate") == (steps, [r["lr"] for r in train])
    assert line("Throughput (target tokens/s)") == (steps, [r["tokens_per_s"] for r in train])
    title = drawn[0]._suptitle.get_text()
    assert f"{train[-1]['step']} updates" in title and f"{best['bleu']:.2f}" in title


@needs_matplotlib
def test_the_horizon_of_a_budget_run_is_marked_where_it_was_last_fitted(tmp_path, drawn):
    import json

    rows = [{"kind": "train", "step": s, "lr": 1e-3, "loss": 5.0, "tokens_per_s": 1.0,
             "elapsed_s": 1.5 * s} for s in range(1, 41)]  # fmt: skip
    rows.insert(3, {"kind": "horizon", "step": 3, "horizon": 50, "budget_s": 60.0})
    rows.insert(9, {"kind": "horizon", "step": 9, "horizon": 40, "budget_s": 60.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot_run(tmp_path)
    rate = panels(drawn[0])["Learning rate"]
    marks = [ln for ln in rate.lines if ln.get_linestyle() == ":"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [40, 40]
    assert "fits in" in rate.get_legend().get_texts()[0].get_text()


@needs_matplotlib
def test_the_attention_maps_are_the_model_s_weights_one_per_head(run_dir, drawn):
    translator = open_translator(str(run_dir), "torch", "cpu", 0, [], None)
    translation, _ = plot_attention(translator, "The cat sleeps.", layer=1, kind="cross")
    model, tokenizer = translator.model, translator.src_tokenizer
    ids = source_pieces(tokenizer, ["The cat sleeps."], max_sentence_tokens(model.cfg)).ids
    greedy = dataclasses.replace(translator.config.decode, beam=1, nbest=1)
    tokens = translate_ids(model, ids, greedy)[0][0].tokens
    src, tgt = torch.tensor([[*ids[0], EOS]]), torch.tensor([[BOS, *tokens]])
    with torch.no_grad():
        cross = model.attention_weights(src, tgt)[0][1][0]  # layer 1: (heads, rows, cols)
    maps = [ax for ax in drawn[0].axes if ax.get_title().startswith("head ")]
    assert len(maps) == model.cfg.heads
    labels = [t.get_text() for t in maps[0].get_xticklabels()]
    assert labels == _labels(tokenizer, src[0].tolist())  # a column per source token, EOS too
    for head, ax in enumerate(maps):
        torch.testing.assert_close(torch.tensor(ax.get_images()[0].get_array().data), cross[head])
    assert translation in drawn[0]._suptitle.get_text()
