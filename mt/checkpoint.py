"""Checkpoints: self-describing weights in safetensors, training state without pickled code.

Layout of `<run.dir>/checkpoints/`:

    step-00001000/model.safetensors   weights; metadata holds the config and the tokenizers
    step-00001000/trainer.pt          optimiser, scaler, step, epoch, position, RNG, best score
                                      (train.ema: the weights trained; the model's are their
                                      moving average)
    last -> step-00001000             symbolic links, swapped atomically
    best -> step-00000800

A checkpoint folder is written under a temporary name, fsynced and renamed, and the links are
replaced with an atomic rename, so killing the process at any moment leaves the previous
`last` intact. `trainer.pt` holds only tensors and plain containers and is read with
`torch.load(weights_only=True)`, which refuses to run pickled code. What a trainer puts in a
checkpoint and takes back to resume is `resume.py`'s.
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from . import from_marian
from .config import Config
from .config_file import config_from_dict
from .data.tokenizer import tokenizer_from_str
from .errors import ConfigError, InputError
from .files import atomic_path, remove
from .run_folder import (
    BEST,
    CHECKPOINTS,
    LAST,
    STEP_DIR,
    TRAINER,
    WEIGHTS,
    checkpoints_dir,
    step_dir,
)

FORMAT = "mt-checkpoint-1"  # ours, under "mt_format"; "format" is "pt", as HF loaders expect


@dataclass
class Loaded:
    """What a checkpoint needs to translate: its model and the tokenizers it was trained with."""

    model: torch.nn.Module
    config: Config
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    path: Path
    metadata: dict[str, str]


def save(
    ckpt_dir: Path,
    step: int,
    model: torch.nn.Module,
    trainer_state: dict[str, Any],
    config: Config,
    tokenizers: tuple[Tokenizer, Tokenizer],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write `step-N/` atomically and return its path."""
    final = step_dir(ckpt_dir, step)
    with atomic_path(final) as tmp:  # saved again at the same step (best, then last): replaced
        tmp.mkdir()
        save_weights(tmp / WEIGHTS, model.state_dict(), metadata(config, tokenizers, step, extra))
        # in memory first: torch's zip writer may turn a full disk into a RuntimeError (at a
        # path, or at a file where the disk fills during its last record); a write is OSError
        buffer = io.BytesIO()
        torch.save(trainer_state, buffer)
        (tmp / TRAINER).write_bytes(buffer.getbuffer())
    return final


def save_weights(path: Path, state_dict: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """safetensors file of a state dict; tied parameters are stored once. A write the machine
    refuses (a full disk) is an OSError, as for any other file (`atomic_path` names it)."""
    seen: dict[int, str] = {}
    tensors = {}
    aliases = {}
    for name, tensor in state_dict.items():
        key = tensor.data_ptr()
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = tensor.detach().contiguous().cpu()
    try:
        save_file(tensors, str(path), metadata=dict(meta, aliases=json.dumps(aliases)))
    except SafetensorError as e:  # an OS error said in words, "(os error 28)": raised as one
        found = re.search(r"\(os error (\d+)\)", str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def metadata(
    config: Config,
    tokenizers: tuple[Tokenizer, Tokenizer],
    step: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Everything needed to use the weights alone: config, tokenizers, step."""
    src, tgt = tokenizers
    return {
        "format": "pt",
        "mt_format": FORMAT,
        "step": str(step),
        "config": json.dumps(config.to_dict()),
        "src_tokenizer": src.to_str(),
        "tgt_tokenizer": tgt.to_str(),
        **{k: json.dumps(v) for k, v in (extra or {}).items()},
    }


def point(ckpt_dir: Path, name: str, target: Path) -> None:
    """Make `ckpt_dir/name` (last, best) refer to `target`, atomically."""
    with atomic_path(ckpt_dir / name) as tmp:
        os.symlink(target.name, tmp)


def step_dirs(ckpt_dir: Path) -> list[Path]:
    """The step folders under `ckpt_dir`, oldest first (none if it does not exist)."""
    steps = [(int(m.group(1)), p) for p in ckpt_dir.glob("step-*") if (m := STEP_DIR.match(p.name))]
    return [p for _, p in sorted(steps)]


def prune(ckpt_dir: Path, keep_last: int) -> None:
    """Remove all but the newest `keep_last` step checkpoints and those best/last refer to."""
    steps = step_dirs(ckpt_dir)
    keep = {p.resolve() for p in steps[-keep_last:]}
    keep |= {(ckpt_dir / link).resolve() for link in (LAST, BEST) if (ckpt_dir / link).exists()}
    for path in steps:
        if path.resolve() not in keep:
            remove(path)
    for leftover in ckpt_dir.glob(".step-*"):  # temporaries of an interrupted save
        remove(leftover)


def newest_steps(ckpt_dir: Path, count: int) -> list[Path]:
    """Weights files of the newest `count` step checkpoints, oldest first."""
    return [p / WEIGHTS for p in step_dirs(ckpt_dir) if (p / WEIGHTS).is_file()][-count:]


def average(files: list[Path], out: Path) -> None:
    """Write the element-wise mean of the weights in `files` (same config) to `out`."""
    if not files:
        raise ConfigError("no checkpoints to average")
    first, meta = load_weights(files[0])
    aliases = json.loads(meta.get("aliases", "{}"))  # tied parameters: averaged once
    total = {k: v.double() for k, v in first.items() if k not in aliases}
    for file in files[1:]:
        weights, other = load_weights(file)
        if weights.keys() != first.keys() or other["config"] != meta["config"]:
            raise InputError(f"{file}: not from the same model as {files[0]}; cannot average")
        for key in total:
            total[key] += weights[key].double()
    averaged = {k: (v / len(files)).float() for k, v in total.items()}
    for alias, name in aliases.items():
        averaged[alias] = averaged[name]
    meta = dict(meta, averaged=json.dumps([str(f) for f in files]))
    with atomic_path(out) as tmp:
        save_weights(tmp, averaged, meta)


def load_trainer_state(path: Path) -> dict[str, Any]:
    """The trainer state of a step folder; refuses anything mt did not write (no pickled code
    runs: `weights_only=True`)."""
    file = path / TRAINER
    if not file.is_file():
        raise InputError(f"{file}: missing; resume from another checkpoint or --restart")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles: the line below says it
            warnings.simplefilter("ignore")
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception:  # UnpicklingError, RuntimeError (not a zip), EOFError ...
        state = None
    if not isinstance(state, dict) or not {"optimizer", "scaler", "state"} <= state.keys():
        raise InputError(f"{file}: not a trainer state written by mt; refusing to unpickle it")
    return state


def is_complete(step_dir: Path) -> bool:
    """Whether a step folder holds both the weights and the trainer state (a resume needs both)."""
    return (step_dir / WEIGHTS).is_file() and (step_dir / TRAINER).is_file()


def newest_complete(ckpt_dir: Path) -> Path | None:
    """The newest step folder a run can resume from, None if there is none."""
    complete = [p for p in step_dirs(ckpt_dir) if is_complete(p)]
    return complete[-1] if complete else None


def meta_json(meta: dict[str, str], key: str, file: Path) -> Any:
    """A JSON value of a weights file's metadata, or a one-line error naming the file."""
    try:
        return json.loads(meta[key])
    except (KeyError, ValueError):
        raise InputError(f"{file}: damaged checkpoint: no valid '{key}' in its metadata") from None


def load_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """State dict (aliases of tied parameters restored) and metadata of a weights file; a
    Marian folder's weights under our names."""
    if from_marian.marian_folder(path):
        config = from_marian.marian_config(path)
        state = from_marian.read_state(path)
        return from_marian.to_ours(state, config.model, path, config.tokenizer.joint), {"step": "0"}
    meta = read_metadata(path)
    try:
        tensors = load_file(str(path))
    except Exception as e:  # safetensors raises several types for a damaged file
        raise InputError(f"{path}: not a readable safetensors checkpoint ({e})") from None
    for alias, name in meta_json(meta, "aliases", path).items() if "aliases" in meta else ():
        tensors[alias] = tensors[name]
    return tensors, meta


def read_metadata(path: Path) -> dict[str, str]:
    """The metadata of an mt weights file, without reading its tensors."""
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors raises several types for a damaged file
        raise InputError(f"{path}: not a readable safetensors checkpoint ({e})") from None
    if meta.get("mt_format") != FORMAT:
        raise InputError(f"{path}: not an mt checkpoint (no '{FORMAT}' metadata)")
    return meta


def read_config(path: str | Path) -> Config:
    """The config a checkpoint (anything `resolve` accepts) was trained with."""
    file = resolve(path)
    if from_marian.marian_folder(file):
        return from_marian.marian_config(file)
    return config_from_dict(meta_json(read_metadata(file), "config", file), f"{file} (config)")


def resolve(path: str | Path) -> Path:
    """The weights file of a run folder (best, else last), a checkpoint folder or a file; a
    Marian folder or Hub id (mt.from_marian): its folder."""
    folder = from_marian.marian_folder(path)
    if folder is not None:
        return folder
    path = Path(path)
    if path.is_file():
        return path
    for candidate in (checkpoints_dir(path) / BEST, checkpoints_dir(path) / LAST, path):
        if (candidate / WEIGHTS).is_file():
            return candidate / WEIGHTS
    raise ConfigError(
        f"{path}: no checkpoint found (expected a run folder, a checkpoint folder "
        f"or a {WEIGHTS} file)"
    )


def load(path: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """A model ready to translate, from anything `resolve` accepts."""
    from .model import Transformer

    file = resolve(path)
    if from_marian.marian_folder(file):
        return Loaded(
            *from_marian.load_marian(file, device), file, from_marian.marian_metadata(file)
        )
    state, meta = load_weights(file)
    config = read_config(file)
    src_tok, tgt_tok = read_tokenizers(file, meta)
    model = Transformer(
        config.model,
        src_tok.get_vocab_size(),
        tgt_tok.get_vocab_size(),
        joint=config.tokenizer.joint,
    )
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise InputError(
            f"{file}: the weights do not match their tokenizers or config: "
            f"{' '.join(str(e).split())[:300]}"
        ) from None
    model.to(device).eval()
    return Loaded(model, config, src_tok, tgt_tok, file, meta)


def read_tokenizers(file: Path, meta: dict[str, str] | None = None) -> tuple[Tokenizer, Tokenizer]:
    """The source and target tokenizers a weights file (a Marian folder: its own) was
    trained with."""
    if from_marian.marian_folder(file):
        return from_marian.read_tokenizers(file)
    meta = read_metadata(file) if meta is None else meta
    try:
        return tuple(tokenizer_from_str(meta[f"{side}_tokenizer"]) for side in ("src", "tgt"))
    except Exception:  # KeyError, or the tokenizers library's own error
        raise InputError(
            f"{file}: damaged checkpoint: no valid tokenizers in its metadata"
        ) from None


def newest_run(runs: Path = Path("runs")) -> Path:
    """The run folder under `runs` whose checkpoint was written last."""
    links = [
        link for link in runs.glob("*/checkpoints/*") if link.name in (BEST, LAST) and link.exists()
    ]
    if not links:
        raise ConfigError(f"no trained model under ./{runs}; pass --checkpoint RUN_DIR or FILE")
    return max(links, key=lambda p: p.stat().st_mtime).parent.parent


def run_dir_of(weights: Path, config: Config) -> Path:
    """The run folder a weights file belongs to: checkpoints/<name>/model.safetensors."""
    if weights.parent.parent.name == CHECKPOINTS:
        return weights.parent.parent.parent
    return Path(config.run.dir)
