"""Exact resume: what a checkpoint holds for training to go on where it stopped, and the rules
of resuming from one.

A step folder holds the weights (`model.safetensors`, whose metadata also says what data and
tokenizers they were trained on) and `trainer.pt`: the optimiser's and the gradient scaler's
states and the `TrainState` (step, batch position, schedule horizon, best BLEU and patience,
health vitals, every rank's generator states). With `train.ema`, the weights of
`model.safetensors` are their moving average (`ema.Ema`), the model every reader of a
checkpoint takes, and `trainer.pt` also holds the weights training goes on from. `checkpoint.py`
is the format on disk, which decoding reads too; this module is the trainer's side of it, the
one that knows the optimiser, the ranks and the state, none of which a translator needs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from .. import checkpoint
from ..config import Config, resumable_keys
from ..config_file import diff_configs
from ..data.corpus import SPLITS, entry_files
from ..data.prepare import inputs_of
from ..errors import ConfigError, InputError, one_line
from ..files import remove
from ..messages import say
from ..run_folder import BEST, LAST, WEIGHTS, checkpoints_dir, step_dir
from . import metrics
from .ema import Ema
from .ranks import Ranks
from .state import TrainState
from .update import Optimiser


class Checkpoints:
    """A run's `checkpoints/` as its trainer resumes from and saves to them. Every rank calls
    these; rank 0 alone writes, with the generator states of all."""

    def __init__(self, config: Config, ranks: Ranks) -> None:
        self.config, self.ranks = config, ranks
        self.run_dir = Path(config.run.dir)
        self.dir = checkpoints_dir(self.run_dir)
        self.saved_step = -1  # saved again at this step (best, then last): already done

    def resume_point(self, restart: bool) -> Path | None:
        """The checkpoint to resume from (`last`, else the newest complete one, said aloud),
        None to start (`restart`: the checkpoints and metrics of the run are removed); an
        error if the config, the data or the tokenizers differ from what its weights were
        trained with. Runs before anything in the run folder is rebuilt."""
        if restart:
            if self.ranks.main:
                remove(self.dir)
                (self.run_dir / metrics.FILE).unlink(missing_ok=True)
            self.ranks.barrier()
            return None
        path, notice = latest(self.dir)
        if notice and self.ranks.main:
            say(notice)
        if path is not None:
            check_resumable(self.config, path)
        return path

    def restore(
        self, path: Path, model: torch.nn.Module, optimiser: Optimiser, ema: Ema | None
    ) -> TrainState:
        """The state saved at `path`, its weights and optimiser loaded into `model` and
        `optimiser` (and its average into `ema`), this rank's generators set as they were; an
        error when they do not fit."""
        weights, _ = checkpoint.load_weights(path / WEIGHTS)
        saved = checkpoint.load_trainer_state(path)
        try:
            if ema is not None:  # the average was saved as the model, the weights beside
                ema.model.load_state_dict(weights)
                weights = saved["weights"]
            model.load_state_dict(weights)
            optimiser.load_state_dict(saved)
            state = TrainState.from_dict(saved["state"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(
                f"{path}: does not fit this run's model and optimiser ({one_line(e)[:200]}); "
                "use --restart to start over, or another run.dir"
            ) from None
        world = self.ranks.world
        if state.world_size != world:  # positions and generators are per rank
            raise ConfigError(
                f"{path}: trained by {state.world_size} processes but resumed by "
                f"{world}; resume with {state.world_size} (torchrun --nnodes x "
                "--nproc_per_node) or start over with --restart"
            )
        self.ranks.restore_rng(state.rng)
        self.saved_step = state.step
        state.vitals.resumed(self.config.train, str(path))
        if self.ranks.main:
            metrics.forget_after(self.run_dir, state.step)
            say(f"resuming from {path} (step {state.step}, epoch {state.position.epoch})")
        return state

    def save(
        self,
        model: torch.nn.Module,
        optimiser: Optimiser,
        state: TrainState,
        tokenizers: tuple[Tokenizer, Tokenizer],
        extra: Callable[[], dict[str, Any]],
        ema: Ema | None,
    ) -> Path:
        """Save `step-N`, point `last` at it, prune old ones; `extra()`: more metadata for
        the weights, asked of rank 0 alone; `ema`: the average saved as the model, `model`'s
        weights kept in the trainer state. The other ranks wait until `last` is written."""
        path = step_dir(self.dir, state.step)
        if self.saved_step == state.step:
            return path
        self.saved_step = state.step
        rng = self.ranks.rng_states()
        if not self.ranks.main:
            self.ranks.barrier()  # no rank goes on, or exits, before `last` is written
            return path
        state.rng, state.world_size = rng, self.ranks.world
        trainer_state = {**optimiser.state_dict(), "state": dataclasses.asdict(state)}
        if ema is not None:  # decoding reads the average; training goes on from the weights
            trainer_state["weights"], model = model.state_dict(), ema.model
        path = checkpoint.save(
            self.dir, state.step, model, trainer_state, self.config, tokenizers, extra()
        )
        checkpoint.point(self.dir, LAST, path)
        checkpoint.prune(self.dir, self.config.train.keep_last)
        self.ranks.barrier()
        return path

    def best(self, path: Path) -> None:
        """Point `best` at the checkpoint `path` (rank 0; the others have nothing to do)."""
        if self.ranks.main:
            checkpoint.point(self.dir, BEST, path)


def latest(ckpt_dir: Path) -> tuple[Path | None, str]:
    """The checkpoint a run resumes from: `last`, else the newest complete one, with a notice
    that says so; None when there is none to resume from."""
    last = ckpt_dir / LAST
    if checkpoint.is_complete(last):
        return last.resolve(), ""
    path = checkpoint.newest_complete(ckpt_dir)
    if path is None and last.is_symlink():
        raise InputError(
            f"{last}: points to {os.readlink(last)}, which is missing or incomplete, and "
            "no complete checkpoint is left; use --restart to start over"
        )
    if path is None:
        return None, ""
    why = f"points to {os.readlink(last)}, which is" if last.is_symlink() else "is"
    notice = f"{last} {why} missing or incomplete; resuming from {path.name}, the newest "
    return path, notice + "complete checkpoint"


def check_resumable(config: Config, path: Path) -> None:
    """An error if the config, the data or the tokenizers differ from what the weights of
    checkpoint `path` were trained with."""
    run_dir, file = Path(config.run.dir), path / WEIGHTS
    meta = checkpoint.read_metadata(file)
    resumable = resumable_keys(config)
    # defaults filled in: a key added since the checkpoint was saved is not a change
    saved_config = checkpoint.read_config(file).to_dict()
    differing = [k for k in diff_configs(saved_config, config.to_dict()) if k not in resumable]
    if differing:
        raise ConfigError(
            f"{run_dir}: the config differs from the run's checkpoint in "
            f"{', '.join(differing)}; use the same config to resume, --restart to start "
            "over, or another run.dir"
        )
    now = inputs_of(config)
    saved = (
        checkpoint.meta_json(meta, "data_fingerprint", file) if "data_fingerprint" in meta else ""
    )
    if saved and saved != now["data_fingerprint"]:
        data = config.data
        entries = [e for name in SPLITS for e in getattr(data.files, name) or []]
        files = ", ".join(f for e in entries for f in entry_files(e, data))
        raise InputError(
            f"{run_dir}: the training data ({files or data.name}) changed "
            f"since {path.name} was saved; its weights cannot go on with other data and "
            "another vocabulary: use --restart to start over, or a new run.dir"
        )
    tokenizers = checkpoint.meta_json(meta, "tokenizers", file) if "tokenizers" in meta else {}
    for name, sha in tokenizers.items():
        if now["tokenizers"].get(name) != sha:
            raise InputError(
                f"{run_dir / name}: missing or changed since {path.name} was saved; its "
                "weights need the vocabulary they were trained with: use --restart to start "
                "over, or a new run.dir"
            )
