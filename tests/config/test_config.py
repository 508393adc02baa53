"""Config loading, overrides, validation and the one-line errors."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from helpers.corpus import write_jsonl
from mt.config import Config
from mt.config_file import (
    PACKAGED_CONFIGS,
    config_from_dict,
    diff_configs,
    dump_config,
    find_config_file,
    load_config,
)
from mt.data.prepare import prepare
from mt.errors import ConfigError, DoesNotFit, InputError, MachineError, MtError, Unhealthy


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path, overrides=()) -> str:
    """The message of the ConfigError that loading raises; it must be one line."""
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    assert info.value.exit_code == 2
    return message


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    return write(tmp_path / "pairs.jsonl", '{"en": "Hi.", "es": "Hola."}\n')


# ---------------------------------------------------------------------------- loading


def test_empty_file_gives_the_documented_defaults(tmp_path: Path):
    config = load_config(write(tmp_path / "empty.yaml", ""))
    expected = Config().to_dict()
    expected["run"]["dir"] = str(Path("runs") / "empty")
    assert config.to_dict() == expected
    assert config.data.source == "hub"
    assert config.data.name == "Helsinki-NLP/opus_books"
    assert config.model.d_model == 512 and config.model.heads == 8
    assert config.train.lr == 5e-4 and isinstance(config.train.lr, float)


def test_every_shipped_config_loads():
    names = sorted(p.name for p in PACKAGED_CONFIGS.glob("*.yaml"))
    assert {"base.yaml", "tiny.yaml"} <= set(names)
    load_config("base.yaml")
    with pytest.raises(ConfigError, match=r"data\.files\.train: required"):
        load_config("tiny.yaml")  # tiny reads local files: it needs one


@pytest.mark.parametrize("name", ["base.yaml", "base", "tiny", "tiny.yaml"])
def test_shipped_config_found_by_bare_name_from_another_cwd(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_file: Path
):
    monkeypatch.chdir(tmp_path)
    path = find_config_file(name)
    assert path.parent == PACKAGED_CONFIGS
    assert path.name == (name if name.endswith(".yaml") else f"{name}.yaml")
    config = load_config(name, [f"data.files.train={data_file}"])
    assert config.run.dir == str(Path("runs") / path.stem)


def test_a_local_file_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", "model:\n  d_model: 64\n  heads: 2\n")
    config = load_config("base.yaml")
    assert config.model.d_model == 64
    assert config.run.dir == str(Path("runs") / "base")


def test_nonexistent_config_names_the_file_and_the_shipped_ones(tmp_path: Path):
    message = config_error(tmp_path / "nope.yaml")
    assert "nope.yaml" in message and "not found" in message and "base.yaml" in message
    assert "tiny.yaml" in config_error("no-such-config")


def test_run_dir_defaults_to_runs_and_the_file_stem(tmp_path: Path):
    path = write(tmp_path / "my-experiment.yaml", "run:\n  seed: 7\n")
    assert load_config(path).run.dir == os.path.join("runs", "my-experiment")
    assert load_config(path, ["run.dir=elsewhere"]).run.dir == "elsewhere"
    path = write(tmp_path / "with-dir.yaml", "run:\n  dir: out/here\n")
    assert load_config(path).run.dir == "out/here"


# ---------------------------------------------------------------------------- overrides


def test_overrides_are_parsed_as_yaml_and_typed():
    config = load_config(
        "base",
        [
            "train.lr=1e-3",
            "model.norm_first=true",
            "model.dropout=0",
            "train.max_minutes=2",
            "decode.beam=1",
            "run.device=cuda:1",
            "data.name=some/dataset",
        ],
    )
    assert config.train.lr == pytest.approx(1e-3) and isinstance(config.train.lr, float)
    assert config.model.norm_first is True
    assert config.model.dropout == 0.0 and isinstance(config.model.dropout, float)
    assert config.train.max_minutes == 2.0 and isinstance(config.train.max_minutes, float)
    assert config.decode.beam == 1 and config.decode.nbest == 1
    assert config.run.device == "cuda:1"
    assert config.data.name == "some/dataset"


@pytest.mark.parametrize("text", ["1e-3", "1.0e-3", "1E-3", "0.001", "+1e-3"])
def test_float_spellings_in_files_and_overrides(text: str, tmp_path: Path):
    # PyYAML follows YAML 1.1, which reads "1e-3" as a string; the config must not.
    assert load_config("base", [f"train.lr={text}"]).train.lr == pytest.approx(1e-3)
    path = write(tmp_path / "lr.yaml", f"train:\n  lr: {text}\n")
    assert load_config(path).train.lr == pytest.approx(1e-3)


def test_later_overrides_win_and_files_overrides_nest(tmp_path: Path, data_file: Path):
    other = write(tmp_path / "other.jsonl", '{"en": "Bye.", "es": "Adiós."}\n')
    config = load_config(
        "tiny",
        [
            f"data.files.train={data_file}",
            "model.d_model=64",
            "model.d_model=128",
            f"data.files.valid=[{data_file}, {other}]",
        ],
    )
    assert config.data.files.train == [str(data_file)]  # a lone path becomes a list
    assert config.data.files.valid == [str(data_file), str(other)]
    assert config.data.files.test is None
    assert config.model.d_model == 128


def test_a_lone_path_in_a_file_becomes_a_list(tmp_path: Path, data_file: Path):
    path = write(tmp_path / "c.yaml", f"data:\n  source: files\n  files:\n    train: {data_file}\n")
    assert load_config(path).data.files.train == [str(data_file)]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("modle.d_model=8", ["unknown key 'modle'", "did you mean 'model'"]),
        ("model.d_modle=8", ["unknown key 'model.d_modle'", "did you mean 'model.d_model'"]),
        ("data.files.trian=x", ["unknown key 'data.files.trian'", "'data.files.train'"]),
        ("train.zzzzzz=1", ["unknown key 'train.zzzzzz'", "valid:", "max_tokens"]),
        ("model.heads=eight", ["model.heads", "expected an integer", "'eight'"]),
        ("model.heads=true", ["model.heads", "expected an integer", "bool"]),
        ("model.heads=2.5", ["model.heads", "expected an integer", "float"]),
        ("model.norm_first=1", ["model.norm_first", "expected true or false"]),
        ("train.lr=fast", ["train.lr", "expected a number", "'fast'"]),
        ("model.activation=tanh", ["model.activation", "must be one of relu, gelu", "'tanh'"]),
        ("model.d_model=102", ["model.d_model", "not divisible by model.heads (4)"]),
        ("model.dropout=1.0", ["model.dropout", "[0, 1)", "1.0"]),
        ("model.dropout=-0.1", ["model.dropout", "[0, 1)", "-0.1"]),
        ("tokenizer.vocab_size=259", ["tokenizer.vocab_size", "259", "special tokens"]),
        ("decode.nbest=9", ["decode.nbest", "larger than decode.beam"]),
        ("data.tgt_lang=en", ["data.tgt_lang", "same language"]),
        ("train.max_tokens=0", ["train.max_tokens", "must be positive"]),
        ("data.valid_size=-1", ["data.valid_size", "must not be negative"]),
        ("model.heads=0", ["model.heads", "must be positive, got 0"]),  # not a ZeroDivisionError
        ("train.weight_decay=.nan", ["train.weight_decay", "must be a finite number"]),
        ("decode.max_len_b=-1", ["decode.max_len_b", "must not be negative"]),
        ("tokenizer.min_frequency=0", ["tokenizer.min_frequency", "must be positive"]),
        ("data.max_length=0", ["data.max_length", "must be positive"]),
        ("run.device=tpu", ["run.device", "'tpu': expected auto, cpu"]),
        ("model=3", ["model", "expected a mapping"]),
        ("model.d_model.x=3", ["'model.d_model' is a value"]),
        ("model", ["expected section.key=value"]),
        ("model.d_model=[1", ["invalid YAML value"]),
    ],
)
def test_bad_override_is_one_line_naming_the_key(override: str, expected: list[str]):
    message = config_error("base.yaml", [override])
    # Type and key errors name the override; cross-key checks run after all overrides, on the
    # whole config, and name the file.
    assert message.startswith((f"--set {override}:", f"{PACKAGED_CONFIGS / 'base.yaml'}:"))
    for part in expected:
        assert part in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("modle:\n  d_model: 8\n", ["unknown key 'modle'", "did you mean 'model'"]),
        ("model:\n  d_modle: 8\n", ["unknown key 'model.d_modle'", "'model.d_model'"]),
        ("data:\n  files:\n    tran: x\n", ["unknown key 'data.files.tran'", "'data.files.train'"]),
        ("model:\n  heads: '8'\n", ["model.heads", "expected an integer"]),
        ("model:\n  heads: yes\n", ["model.heads", "expected an integer", "bool"]),
        ("model:\n  d_model: 500\n", ["model.d_model", "not divisible"]),
        ("model:\n  dropout: 1.0\n", ["model.dropout", "[0, 1)"]),
        ("model:\n  dropout: -0.1\n", ["model.dropout", "[0, 1)"]),
        ("tokenizer:\n  vocab_size: 100\n", ["tokenizer.vocab_size", "256 byte symbols"]),
        ("model: 3\n", ["model: expected a mapping, got int 3"]),
        ("data:\n  source: disk\n", ["data.source", "must be one of hub, files"]),
        ("data:\n  source: files\n", ["data.files.train", "required"]),
        ("model: [1\n", ["invalid YAML"]),
        ("model:\n\td_model: 8\n", ["invalid YAML"]),
        ("- 1\n- 2\n", ["expected a mapping of sections, got list"]),
        ("just a string\n", ["expected a mapping of sections, got str"]),
    ],
)
def test_bad_file_is_one_line_naming_file_and_key(text: str, expected: list[str], tmp_path: Path):
    path = write(tmp_path / "bad.yaml", text)
    message = config_error(path)
    assert message.startswith(f"{path}:")
    for part in expected:
        assert part in message


def test_vocab_size_lower_bound_is_exactly_specials_plus_bytes():
    assert load_config("base", ["tokenizer.vocab_size=260"]).tokenizer.vocab_size == 260
    config_error("base", ["tokenizer.vocab_size=259"])


def test_missing_data_file_is_named(tmp_path: Path, data_file: Path):
    missing = tmp_path / "nowhere" / "train.jsonl"
    message = config_error("tiny", [f"data.files.train={missing}"])
    assert "data.files.train" in message and str(missing) in message
    message = config_error("tiny", [f"data.files.train={data_file}", f"data.files.test={missing}"])
    assert "data.files.test" in message and "no such file" in message


def test_missing_data_files_do_not_matter_for_the_hub(tmp_path: Path):
    config = load_config("base", [f"data.files.train={tmp_path / 'absent.jsonl'}"])
    assert config.data.source == "hub"


def test_invalid_utf8_is_a_config_error(tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("run:\n  device: 'cpu'  # é\n".encode("latin-1"))
    message = config_error(path)
    assert str(path) in message and "invalid YAML" in message


def test_unreadable_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write(tmp_path / "secret.yaml", "run:\n  seed: 1\n")

    # chmod 000 does not stop root, so make reading fail the way it would for another user.
    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    message = config_error(path)
    assert str(path) in message and "cannot read" in message and "Permission denied" in message


def test_held_out_sizes_must_leave_training_pairs(tmp_path: Path):
    pairs = [(f"sentence {i}", f"frase {i}") for i in range(30)]
    corpus = write_jsonl(tmp_path / "c.jsonl", pairs)

    def prepared(valid: int, test: int):
        sets = [f"data.files.train={corpus}", f"run.dir={tmp_path / 'run'}"]
        return prepare(
            load_config("tiny", [*sets, f"data.valid_size={valid}", f"data.test_size={test}"])
        )

    for valid, test in ((15, 15), (20, 20), (0, 30)):
        with pytest.raises(ConfigError) as info:
            prepared(valid, test)
        message = str(info.value)
        assert "\n" not in message and "30 pairs" in message
        assert "data.valid_size" in message and "data.test_size" in message
    assert prepared(15, 14).stats["pairs"] == {"train": 1, "valid": 15, "test": 14}


# ---------------------------------------------------------------------------- round trips


def test_dumped_config_reloads_identically(tmp_path: Path, data_file: Path):
    config = load_config("tiny", [f"data.files.train={data_file}", "train.lr=2e-4"])
    path = write(tmp_path / "resolved.yaml", dump_config(config))
    assert load_config(path).to_dict() == config.to_dict()
    assert config_from_dict(yaml.safe_load(dump_config(config)), "x").to_dict() == config.to_dict()
    assert config_from_dict(config.to_dict(), "x") == config


def test_config_from_dict_rejects_unknown_keys_with_origin():
    raw = Config().to_dict()
    raw["model"]["size"] = 3
    with pytest.raises(ConfigError, match=r"^checkpoint: unknown key 'model\.size'"):
        config_from_dict(raw, "checkpoint")


def test_diff_configs_lists_dotted_keys_that_differ():
    a = Config().to_dict()
    b = Config().to_dict()
    assert diff_configs(a, b) == []
    b["model"]["d_model"] = 256
    b["train"]["lr"] = 1e-3
    b["data"]["files"]["train"] = ["x.jsonl"]
    b["run"] = dataclasses.asdict(dataclasses.replace(Config().run, seed=9))
    assert diff_configs(a, b) == ["data.files.train", "model.d_model", "run.seed", "train.lr"]
    del b["decode"]
    assert "decode" in diff_configs(a, b)
    assert diff_configs({"x": {"y": 1}}, {"x": {"y": 1, "z": 2}}) == ["x.z"]


def test_errors_are_mt_errors_and_keep_their_exit_status_by_kind():
    kinds = (ConfigError, InputError, MachineError, DoesNotFit, Unhealthy)
    assert all(issubclass(kind, MtError) for kind in kinds)
    assert MtError.exit_code == MachineError.exit_code == 1
    assert ConfigError.exit_code == InputError.exit_code == DoesNotFit.exit_code == 2
    assert Unhealthy.exit_code == 3
