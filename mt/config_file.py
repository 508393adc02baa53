"""Reading a config: a YAML file or a shipped config by name, `--set section.key=value`
overrides, typed conversion with a suggestion for a misspelt key, then `check_config`; and
writing and comparing configs."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from .config import Config, DecodeConfig
from .config_checks import check_config, describe
from .errors import ConfigError, one_line

PACKAGED_CONFIGS = Path(__file__).parent / "configs"


def find_config_file(name: str | Path) -> Path:
    """A path as given, else a bare name looked up among the configs shipped with `mt`."""
    path = Path(name)
    if path.is_file():
        return path
    candidates = [path.name, f"{path.name}.yaml"] if path.parent == Path(".") else []
    for candidate in candidates:
        if (PACKAGED_CONFIGS / candidate).is_file():
            return PACKAGED_CONFIGS / candidate
    shipped = ", ".join(sorted(p.name for p in PACKAGED_CONFIGS.glob("*.yaml")))
    raise ConfigError(f"{name}: config file not found (shipped configs: {shipped})")


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read, override and validate a config. Raises ConfigError with a one-line message."""
    path = find_config_file(path)
    config = _build(Config, _read_yaml(path), str(path), "")
    for item in overrides:
        apply_override(config, item)
    if not config.run.dir:
        config.run.dir = str(Path("runs") / path.stem)
    check_config(config, str(path))
    return config


def decoding_config(
    trained: Config,
    path: str | Path | None,
    overrides: list[str] | tuple[str, ...] = (),
    device: str = "auto",
) -> Config:
    """The config to decode with on `device`: a checkpoint's, with the `decode` section of
    `path` (the other sections are the checkpoint's to say) and `--set decode.*` on top."""
    config = copy.deepcopy(trained)
    config.run.device = device
    if path is not None:
        path = find_config_file(path)
        section = _read_yaml(path).get("decode") or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: decode: expected a mapping, got {describe(section)}")
        merged = {**dataclasses.asdict(config.decode), **section}
        config.decode = _build(DecodeConfig, merged, str(path), "decode.")
    for item in overrides:
        if item.partition("=")[0].strip().split(".")[0] != "decode":
            raise ConfigError(
                f"--set {item}: only decode.* keys can be set here; the model and how it was "
                "trained come from the checkpoint"
            )
        apply_override(config, item)
    check_config(config, "decoding options", check_files=False)
    return config


def _read_yaml(path: Path, extending: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's sections; one that says `extends: OTHER.yaml` (beside it, or shipped)
    is OTHER's sections with its own keys on top."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: invalid YAML: {one_line(e)}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(raw).__name__}")
    if "extends" not in raw:
        return raw
    name = raw.pop("extends")
    if not isinstance(name, str):
        raise ConfigError(f"{path}: extends: expected a config file's name, got {describe(name)}")
    beside = path.parent / name
    base_path = find_config_file(beside if beside.is_file() else name).resolve()
    if base_path in (path.resolve(), *extending):
        raise ConfigError(f"{path}: extends {name}, which extends it in turn")
    base = _read_yaml(base_path, (*extending, path.resolve()))
    for section, keys in raw.items():
        merged = isinstance(keys, dict) and isinstance(base.get(section), dict)
        base[section] = {**base[section], **keys} if merged else keys
    return base


def config_from_dict(raw: dict[str, Any], origin: str) -> Config:
    """Rebuild a Config from its dictionary form (a checkpoint's or run folder's copy).

    Data files are not required to exist: a trained model travels without its corpus.
    """
    config = _build(Config, raw, origin, "")
    check_config(config, origin, check_files=False)
    return config


def apply_override(config: Config, item: str) -> None:
    """Apply one `section.key=value` override; the value is parsed as YAML."""
    origin = f"--set {item}"
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{origin}: expected section.key=value")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"{origin}: invalid YAML value: {one_line(e)}") from None
    names = key.strip().split(".")
    target: Any = config
    for depth, name in enumerate(names):
        dotted = ".".join(names[: depth + 1])
        fields = {f.name: f for f in dataclasses.fields(target)}
        if name not in fields:
            prefix = dotted[: -len(name)]
            raise ConfigError(f"{origin}: unknown key '{dotted}'{_suggest(name, fields, prefix)}")
        if depth == len(names) - 1:
            hint = typing.get_type_hints(type(target))[name]
            setattr(target, name, _convert(hint, value, origin, dotted))
        else:
            target = getattr(target, name)
            if not dataclasses.is_dataclass(target):
                raise ConfigError(f"{origin}: '{dotted}' is a value, not a section")
    if dataclasses.is_dataclass(target) and len(names) == 1:
        raise ConfigError(f"{origin}: '{names[0]}' is a section; set one of its keys")


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)


def diff_configs(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dictionaries."""
    keys = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += diff_configs(a, b, f"{prefix}{key}.")
        elif a != b:
            keys.append(f"{prefix}{key}")
    return keys


def _build(cls: type, raw: Any, origin: str, prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and types."""
    section = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: {section}: expected a mapping, got {describe(raw)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(
                f"{origin}: unknown key '{dotted}'{_suggest(str(key), names, prefix)}"
            )
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value if value is not None else {}, origin, f"{dotted}.")
        else:
            values[key] = _convert(hint, value, origin, dotted)
    return cls(**values)


def _convert(hint: Any, value: Any, origin: str, key: str) -> Any:
    """Check `value` against a field's type; accept a lone path where a list is expected."""
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, origin, f"{key}.")
    origin_type = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin_type in (typing.Union, types.UnionType):  # list[str] | None, str | dict
        if value is None:
            return None
        arms = [a for a in args if a is not type(None)]
        mapping = [a for a in arms if typing.get_origin(a) is dict]
        return _convert(
            (mapping or arms)[0] if isinstance(value, dict) else arms[0], value, origin, key
        )
    if origin_type is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{origin}: {key}: expected a mapping, got {describe(value)}")
        return {str(k): _convert(args[1], v, origin, f"{key}.{k}") for k, v in value.items()}
    if hint is Any:
        return value
    if origin_type is list:
        items = value if isinstance(value, list) else [value]
        return [_convert(args[0], item, origin, key) for item in items]
    if origin_type is Literal:
        if not any(value == a and type(value) is type(a) for a in args):  # 1 is not True
            choices = ", ".join(yaml.safe_dump(a).split("\n")[0] for a in args)  # true, not True
            raise ConfigError(f"{origin}: {key}: must be one of {choices}; got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{origin}: {key}: expected true or false, got {describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{origin}: {key}: expected an integer, got {describe(value)}")
        return value
    if hint is float:
        if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value):
            value = float(value)  # YAML 1.1 reads 1e-3 and 1.0e3 as text, not as numbers
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{origin}: {key}: expected a number, got {describe(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{origin}: {key}: expected a string, got {describe(value)}")
        return str(value)
    raise TypeError(f"unsupported config type {hint}")  # a bug in this module, not in the YAML


def _suggest(name: str, valid: typing.Iterable[str], prefix: str) -> str:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{prefix}{close[0]}'?)"
    return f" (valid: {', '.join(sorted(valid))})"
