"""`mt prepare` end to end: summary, JSON, run folder, cache reuse and rebuilds, CLI errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

import mt
from helpers.corpus import EMPTY_PAIRS, HELD_OUT, PAIRS, needs_shared, prepare_args, write_jsonl
from helpers.runs import run_mt
from mt.config_file import load_config

STAT_KEYS = {"fingerprint", "pairs", "dropped", "tokens", "vocab_size", "round_trip"}


def prepare_json(cli, corpus: Path, run_dir: Path, *extra: str) -> tuple[dict, str]:
    """Run `mt prepare --json` in-process; the stats and what went to stderr."""
    result = cli(*prepare_args(corpus, run_dir, *extra), "--json")
    assert result.exit_code == 0, (result.exception, result.stderr)
    stats = json.loads(result.stdout)  # stdout holds exactly one JSON object
    return stats, result.stderr


def without_reuse(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "reused_cache"}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------- output


def test_summary_table(cli, corpus_file: Path, tmp_path: Path):
    result = cli(*prepare_args(corpus_file, tmp_path / "run"))
    assert result.exit_code == 0, result.exception
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["split", "pairs", "src", "tokens", "tgt", "tokens", "src", "mean",
                                "tgt", "mean"]  # fmt: skip
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    assert set(rows) == {"train", "valid", "test"}
    assert rows["valid"][0] == rows["test"][0] == str(HELD_OUT)
    assert f"empty {EMPTY_PAIRS}" in result.stdout
    assert re.search(
        r"round trip .* source 100\.00%, target 100\.00% of 32 held-out", result.stdout
    )
    assert "vocabulary: source" in result.stdout
    assert str(tmp_path / "run" / "data") in result.stdout


def test_json_summary(cli, corpus_file: Path, tmp_path: Path):
    stats, _ = prepare_json(cli, corpus_file, tmp_path / "run")
    assert set(stats) >= STAT_KEYS
    assert stats["reused_cache"] is False
    assert stats["run_dir"] == str(tmp_path / "run")
    pairs, dropped = stats["pairs"], stats["dropped"]
    assert pairs["valid"] == pairs["test"] == HELD_OUT
    assert set(dropped) == {"empty", "duplicate", "too_long", "ratio"}
    assert dropped["empty"] == EMPTY_PAIRS
    # every input pair is accounted for: kept in a split or dropped for a counted reason
    assert sum(pairs.values()) + sum(dropped.values()) == len(PAIRS)
    assert stats["round_trip"] == {"src": 1.0, "tgt": 1.0, "sentences": 4 * HELD_OUT}
    assert stats["vocab_size"]["src"] == stats["vocab_size"]["tgt"] <= 400  # joint vocabulary
    for name in ("train", "valid", "test"):
        assert stats["tokens"][name]["src"] >= pairs[name] > 0


def test_run_folder_contents(cli, corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    stats, _ = prepare_json(cli, corpus_file, run_dir)
    config = load_config(run_dir / "config.yaml")  # resolved and reloadable as it is
    expected = load_config("tiny", prepare_args(corpus_file, run_dir)[4::2])
    assert config.to_dict() == expected.to_dict()
    assert config.data.files.train == [str(corpus_file)] and config.run.dir == str(run_dir)

    tokenizer = Tokenizer.from_file(str(run_dir / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == stats["vocab_size"]["src"]
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]

    meta = json.loads((run_dir / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta["fingerprint"] == stats["fingerprint"]
    assert meta["stats"] == without_reuse({k: stats[k] for k in meta["stats"]})
    for name in ("train", "valid", "test"):
        offsets = np.fromfile(run_dir / "data" / f"{name}.src.offsets", np.int64)
        tokens = np.fromfile(run_dir / "data" / f"{name}.src.tokens", np.uint16)
        assert len(offsets) == stats["pairs"][name] + 1 and offsets[0] == 0
        assert offsets[-1] == len(tokens) == stats["tokens"][name]["src"]
        assert tokens.max() < stats["vocab_size"]["src"]
    valid = [json.loads(line) for line in (run_dir / "data" / "valid.jsonl").open(encoding="utf-8")]
    assert len(valid) == HELD_OUT and all(set(row) == {"src", "tgt"} for row in valid)
    assert not list(tmp_path.rglob("*.tmp-*")) and not list(tmp_path.rglob("*.old-*"))


# ---------------------------------------------------------------------------- the cache


def test_second_run_reuses_the_cache(cli, corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    first, first_err = prepare_json(cli, corpus_file, run_dir)
    second, second_err = prepare_json(cli, corpus_file, run_dir)
    assert "reusing" not in first_err
    assert first["reused_cache"] is False and second["reused_cache"] is True
    assert without_reuse(first) == without_reuse(second)
    assert "reusing the cached data" in second_err and first["fingerprint"] in second_err
    rebuilt, rebuilt_err = prepare_json(cli, corpus_file, run_dir, "--rebuild")
    assert rebuilt["reused_cache"] is False and "reusing" not in rebuilt_err
    assert without_reuse(rebuilt) == without_reuse(first)


@pytest.mark.parametrize(
    ("setting", "rebuilds"),
    [
        ("tokenizer.vocab_size=350", True),
        ("tokenizer.min_frequency=2", True),
        ("data.max_ratio=2.5", True),
        ("data.valid_size=7", True),
        ("run.seed=2", True),
        ("model.d_model=64", False),
        ("train.lr=1e-4", False),
        ("decode.beam=4", False),
    ],
)
def test_only_data_settings_rebuild(setting: str, rebuilds: bool, cli, corpus_file, tmp_path):
    run_dir = tmp_path / "run"
    first, _ = prepare_json(cli, corpus_file, run_dir)
    second, err = prepare_json(cli, corpus_file, run_dir, "--set", setting)
    assert second["reused_cache"] is not rebuilds
    assert (second["fingerprint"] != first["fingerprint"]) is rebuilds
    assert ("reusing" in err) is not rebuilds
    # the run folder's config.yaml follows the latest successful command
    expected = load_config("tiny", [*prepare_args(corpus_file, run_dir)[4::2], setting])
    assert load_config(run_dir / "config.yaml").to_dict() == expected.to_dict()


def test_touching_or_changing_the_input_rebuilds(cli, corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    first, _ = prepare_json(cli, corpus_file, run_dir)
    stat = corpus_file.stat()
    os.utime(corpus_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    touched, _ = prepare_json(cli, corpus_file, run_dir)
    assert touched["reused_cache"] is False and touched["fingerprint"] != first["fingerprint"]
    assert touched["pairs"] == first["pairs"] and touched["tokens"] == first["tokens"]

    extra = [(f"Line number {i} is new.", f"La línea número {i} es nueva.") for i in range(5)]
    write_jsonl(corpus_file, PAIRS + extra)
    changed, _ = prepare_json(cli, corpus_file, run_dir)
    assert changed["reused_cache"] is False
    assert sum(changed["pairs"].values()) == sum(first["pairs"].values()) + 5


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {
    "truncated train tokens": ("data/train.src.tokens", _truncate),
    "empty valid offsets": ("data/valid.tgt.offsets", lambda p: p.write_bytes(b"")),
    "garbage test offsets": ("data/test.src.offsets", lambda p: p.write_bytes(b"not numpy at all")),
    "offsets of the right size, wrong": (
        "data/train.tgt.offsets",
        lambda p: p.write_bytes(bytes(p.stat().st_size)),
    ),
    "missing train tokens": ("data/train.tgt.tokens", Path.unlink),
    "bad JSON in meta.json": ("data/meta.json", lambda p: p.write_text("{", "utf-8")),
    "meta.json not an object": ("data/meta.json", lambda p: p.write_text("[1, 2]", "utf-8")),
    "bad line in valid.jsonl": ("data/valid.jsonl", lambda p: p.write_text("{oops\n", "utf-8")),
    "wrong rows in test.jsonl": ("data/test.jsonl", lambda p: p.write_text("[1]\n", "utf-8")),
    "edited tokenizer.json": ("tokenizer.json", lambda p: p.write_text("{}", "utf-8")),
    "missing tokenizer.json": ("tokenizer.json", Path.unlink),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cache_is_rebuilt(damage: str, cli, corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    first, _ = prepare_json(cli, corpus_file, run_dir)
    name, spoil = DAMAGE[damage]
    spoil(run_dir / name)
    rebuilt, _ = prepare_json(cli, corpus_file, run_dir)
    assert rebuilt["reused_cache"] is False
    assert without_reuse(rebuilt) == without_reuse(first)
    again, _ = prepare_json(cli, corpus_file, run_dir)  # and the cache is whole again
    assert again["reused_cache"] is True


# ---------------------------------------------------------------------------- errors


def assert_one_line_error(code: int, stdout: str, stderr: str, *culprits: str, status=2) -> None:
    assert code == status, stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    # Progress bars of `datasets` may come first; the error is one line, and the last.
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("mt: error: "), stderr
    assert sum("error" in line for line in lines) == 1, stderr
    for culprit in culprits:
        assert culprit in lines[-1]


@pytest.mark.parametrize(
    ("args", "culprits"),
    [
        (["--set", "model.d_modle=8"], ["model.d_modle", "did you mean 'model.d_model'"]),
        (["--set", "modle.d_model=8"], ["modle", "did you mean 'model'"]),
        (["--set", "model.heads=eight"], ["model.heads", "expected an integer"]),
        (["--set", "data.files.train=/no/such/file.jsonl"], ["/no/such/file.jsonl"]),
        (["--config", "no-such-config"], ["no-such-config", "not found", "base.yaml"]),
        (["--set", "model.dropout=1.5"], ["tiny.yaml", "model.dropout"]),
    ],
)
def test_cli_errors_are_one_line_with_status_2(args, culprits, corpus_file: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    result = run_mt(*prepare_args(corpus_file, run_dir), *args)
    assert_one_line_error(result.returncode, result.stdout, result.stderr, *culprits)
    assert result.stdout == ""
    assert not run_dir.exists()  # nothing is written for a config that does not load


def test_bad_yaml_file_is_one_line(corpus_file: Path, tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: [512\n", encoding="utf-8")
    result = run_mt("prepare", "--config", str(bad), "--set", f"data.files.train={corpus_file}")
    assert_one_line_error(result.returncode, result.stdout, result.stderr, str(bad), "invalid YAML")


def test_unreachable_hub_exits_1_with_a_hint(cli_main, tmp_path: Path):
    code, out, err = cli_main(
        "prepare",
        "--config",
        "tiny",
        "--set",
        "data.source=hub",
        "--set",
        "data.name=nobody-at-all/no-such-dataset-xyz",
        "--set",
        f"run.dir={tmp_path / 'run'}",
    )
    assert_one_line_error(code, out, err, "no-such-dataset-xyz", "data.source: files", status=1)


def test_held_out_larger_than_corpus_exits_2(cli_main, corpus_file: Path, tmp_path: Path):
    args = prepare_args(corpus_file, tmp_path / "run", "--set", "data.valid_size=100")
    code, out, err = cli_main(*args)
    assert_one_line_error(code, out, err, "data.valid_size", "not smaller than the corpus")


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "model.d_modle=8"],  # fails while loading the config
        ["--set", "data.files.train=/no/such/file.jsonl"],
        ["--set", "data.valid_size=100"],  # fails later, in the data pipeline
        ["--set", "data.test_size=55", "--rebuild"],
    ],
)
def test_a_failing_command_leaves_the_run_folder_intact(
    bad: list[str], cli, cli_main, corpus_file: Path, tmp_path: Path
):
    run_dir = tmp_path / "run"
    first, _ = prepare_json(cli, corpus_file, run_dir)
    before = snapshot(run_dir)
    code, _, err = cli_main(*prepare_args(corpus_file, run_dir, *bad))
    assert code == 2 and err.startswith("mt: error: ")
    assert snapshot(run_dir) == before
    again, _ = prepare_json(cli, corpus_file, run_dir)
    assert again["reused_cache"] is True and without_reuse(again) == without_reuse(first)


def test_version_and_help():
    version = run_mt("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"mt {mt.__version__}"
    help_ = run_mt("--help")
    assert help_.returncode == 0 and "prepare" in help_.stdout and "--version" in help_.stdout
    prepare_help = run_mt("prepare", "--help")
    assert prepare_help.returncode == 0
    for option in ("--config", "--set", "--rebuild", "--json"):
        assert option in prepare_help.stdout


# ---------------------------------------------------------------------------- real data


@needs_shared
def test_tatoeba_end_to_end(tatoeba_run):
    stats, run_dir = tatoeba_run
    assert stats["reused_cache"] is False
    assert stats["pairs"]["train"] > 110_000
    assert stats["pairs"]["valid"] > 1_100 and stats["pairs"]["test"] > 1_700
    assert stats["round_trip"]["src"] == stats["round_trip"]["tgt"] == 1.0
    assert stats["round_trip"]["sentences"] == 2 * (
        stats["pairs"]["valid"] + stats["pairs"]["test"]
    )
    assert stats["vocab_size"] == {"src": 8000, "tgt": 8000}
    assert stats["dropped"]["empty"] == 0
    mean = stats["tokens"]["train"]["src"] / stats["pairs"]["train"]
    assert 4 < mean < 20  # short sentences, a few subwords each
    assert (run_dir / "tokenizer.json").is_file() and (run_dir / "config.yaml").is_file()


def test_prepare_json_is_the_only_thing_on_stdout(corpus_file, tmp_path):
    result = run_mt(*prepare_args(corpus_file, tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1  # no blank lines from the BPE trainer's bar
    assert json.loads(result.stdout)["run_dir"] == str(tmp_path / "run")
