"""Fine-tuning: a run that starts from a trained model (`train.init`, `mt train --init`).

The new run takes the model's weights and tokenizers, and nothing else of its training: a
fresh optimiser and schedule, its own data (to which `train.old_share` mixes some of the old
corpus back, in `data.prepare`, which `base` hands the model's tokenizers and old data
config), its own run folder, where `init.json` says where it started.
The model and tokenizer sections of its config must be the checkpoint's: they are what the
weights mean. Once started, it resumes from its own checkpoints like any run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from .. import checkpoint
from ..config import Config
from ..config_file import diff_configs
from ..data.old_corpus import Base
from ..errors import ConfigError, InputError
from ..files import atomic_write_text
from ..from_marian import marian_config, marian_folder
from ..run_folder import INIT

# parameters (by name prefix) that `train.freeze` keeps as they are; a tied embedding is one
# parameter, so with shared embeddings "encoder" freezes the decoder's embeddings too
FROZEN = {
    "none": (),
    "encoder": ("src_embed.", "encoder.", "encoder_norm."),
    "embeddings": ("src_embed.", "tgt_embed.", "out."),
}


def init_file(config: Config) -> Path | None:
    """The weights file `train.init` names (None without one), checked before anything is
    written: an mt checkpoint whose model and tokenizer sections are this config's
    (tokenizer.dropout aside: it changes how training reads the data, not the model)."""
    if not config.train.init:
        return None
    try:
        file = checkpoint.resolve(config.train.init)
        trained = checkpoint.read_config(file)
        checkpoint.read_tokenizers(file)
    except (ConfigError, InputError) as e:
        raise type(e)(f"train.init: {e}") from None
    sections = ("model", "tokenizer")
    theirs, ours = (
        {name: dataclasses.asdict(getattr(c, name)) for name in sections} for c in (trained, config)
    )
    differing = [k for k in diff_configs(theirs, ours) if k != "tokenizer.dropout"]
    if differing:
        section, key = differing[0].split(".")
        raise ConfigError(
            f"train.init: {file}: {', '.join(differing)} differ from the checkpoint's "
            f"({differing[0]} is {theirs[section][key]!r} there, {ours[section][key]!r} here); "
            "a fine-tuned model keeps the model and tokenizer it starts from"
        )
    return file


def adopt(config: Config) -> None:
    """When train.init names a Marian model (mt.from_marian), make its model and tokenizer
    sections the run's: keys left at their defaults take the model's values; a key set to
    another value than the model's is refused, naming it."""
    folder = marian_folder(config.train.init) if config.train.init else None
    if folder is None:
        return
    try:
        theirs = marian_config(folder)
    except ConfigError as e:
        raise ConfigError(f"train.init: {e}") from None
    for section in ("model", "tokenizer"):
        ours, default = getattr(config, section), type(getattr(config, section))()
        for key, value in dataclasses.asdict(getattr(theirs, section)).items():
            if key == "dropout" or getattr(ours, key) in (value, getattr(default, key)):
                continue
            raise ConfigError(
                f"train.init: {folder}: {section}.{key} is {value!r} in the model, "
                f"{getattr(ours, key)!r} here; a fine-tuned model keeps its shape and tokenizer"
            )
    dropout = config.model.dropout, config.tokenizer.dropout
    config.model, config.tokenizer = theirs.model, theirs.tokenizer
    config.model.dropout, config.tokenizer.dropout = dropout


def base(config: Config) -> Base | None:
    """What the data pipeline takes from train.init (None without one): its tokenizers, and
    its data config, for train.old_share."""
    file = init_file(config)  # checked, its errors named train.init
    if file is None:
        return None
    if config.train.old_share and marian_folder(config.train.init):
        raise ConfigError("train.old_share: a Marian model's training corpus is not known")
    return Base(checkpoint.read_tokenizers(file), checkpoint.read_config(file).data)


def start(model: torch.nn.Module, file: Path | None, config: Config, write: bool) -> None:
    """Load the weights of `file` (when the run starts from one; `write`: say so in the run
    folder) and freeze what `train.freeze` names, before the optimiser takes the rest."""
    if file is not None:
        weights, meta = checkpoint.load_weights(file)
        model.load_state_dict(weights)
        if write:
            record = {
                "init": config.train.init,
                "weights": str(file.resolve()),
                "step": int(meta.get("step", 0)),
            }
            atomic_write_text(Path(config.run.dir) / INIT, json.dumps(record) + "\n")
    prefixes = FROZEN[config.train.freeze]
    for name, parameter in model.named_parameters():
        if name.startswith(prefixes):
            parameter.requires_grad_(False)
