"""`mt plot` and `mt attention`: valid PNGs from a tiny run, clear errors, matplotlib optional."""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import pytest
from conftest import PAIRS, write_jsonl
from test_train import tiny_config

from mt import checkpoint
from mt.training.plot import _labels
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
def test_plot_marks_the_horizon_of_a_budget_run(tmp_path, cli_main):
    import json

    rows = [{"kind": "train", "step": s, "lr": 1e-3 * (1 - s / 40), "loss": 5.0,
             "tokens_per_s": 100.0, "elapsed_s": 1.5 * s} for s in range(1, 41)]  # fmt: skip
    rows.insert(3, {"kind": "horizon", "step": 3, "horizon": 40, "budget_s": 60.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli_main("plot", str(tmp_path))
    assert code == 0, err
    assert png_size(tmp_path / "training.png")[0] > 0
