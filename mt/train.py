"""The training loop: token batches, label smoothing, the warm-up schedule, validation,
checkpoints and exact resume.

A run can be stopped at any moment (Ctrl-C, SIGTERM, a wall-clock budget) and resumed with
the same command; on CPU the resumed run ends with the same weights as one never stopped.
The same code runs under `torchrun` with DistributedDataParallel: every rank trains on its
own share of each epoch's batches, only rank 0 writes files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from . import checkpoint, finetune
from .config import (
    Config,
    TrainConfig,
    check_training_stops,
    diff_configs,
    one_line,
    resumable_keys,
)
from .data import SPLITS, Split, collate, dropout_epochs, inputs_of, prepare, token_batches
from .device import autocast, pick_device, precision_for
from .errors import ConfigError, MtError
from .files import atomic_write_text, remove
from .loss import smoothed_loss
from .model import PAD, Transformer
from .schedule import DECAYING, fit_horizon, learning_rate, time_fitted, warmup_updates

MAX_BAD_UPDATES = 5  # consecutive non-finite losses before training gives up


@dataclass
class TrainState:
    """Everything besides the weights that an exact resume needs."""

    step: int = 0  # optimiser updates done
    epoch: int = 0
    batch: int = 0  # batches of this epoch already consumed (by this rank)
    best_bleu: float = -1.0
    bad_evals: int = 0  # validations since the best one
    elapsed: float = 0.0  # training seconds over all sessions of this run
    # The schedule's horizon (0: not known yet) and the costs measured to fit it to the
    # budget: decisions of the clock, saved so that a resume keeps them.
    horizon: int = 0
    update_times: list[float] = field(default_factory=list)  # seconds of the latest updates
    validate_s: float = 0.0  # seconds the last validation took
    save_s: float = 0.0  # seconds the last save took
    fitted_at: float = 0.0  # `elapsed` when the horizon was last fitted
    target_tokens: int = 0
    rng: dict[str, Any] = field(default_factory=dict)  # generator states, one per rank
    world_size: int = 1  # processes that trained the run: an exact resume needs as many


def say(message: str) -> None:
    """A line for the person watching, on stderr, without breaking the progress bar."""
    tqdm.write(message, file=sys.stderr)


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag: the current update finishes, then the run saves."""

    def __init__(self) -> None:
        self.caught: str | None = None
        self.previous = {}

    def __enter__(self) -> StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.caught = signal.Signals(signum).name

    @property
    def number(self) -> int:
        return signal.Signals[self.caught.split()[0]].value if self.caught else 0

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def stop_reason(
    t: TrainConfig, state: TrainState, signal_name: str, patience_out: bool, out_of_time: bool
) -> str:
    """Whether and why training stops, in a fixed order of priority (empty: go on).

    Called once per update with every rank's agreed inputs, this is the only place that
    decides; a signal comes first because the person asked for it.
    """
    if signal_name:
        return f"stopped by {signal_name}"
    if t.max_steps and state.step >= t.max_steps:
        return f"reached train.max_steps ({t.max_steps})"
    if t.max_epochs and state.epoch >= t.max_epochs:
        return f"reached train.max_epochs ({t.max_epochs})"
    if time_fitted(t) and state.horizon and state.step >= state.horizon:
        return f"reached the {state.horizon} updates that fit in {t.max_minutes:g} minutes"
    if out_of_time:
        return f"reached train.max_minutes ({t.max_minutes:g})"
    if patience_out:
        return f"no better validation BLEU in {t.patience} validations"
    return ""


def build_optimizer(model: torch.nn.Module, t: TrainConfig, device: torch.device):
    """AdamW with the paper's betas and epsilon; weight decay only on matrices, as nanoGPT
    does: decaying LayerNorm gains and biases pulls them towards 0, which is no prior."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=0.0,  # set before every update by the schedule
        betas=(0.9, 0.98),
        eps=1e-9,
        fused=device.type in ("cuda", "cpu"),  # one kernel, not a loop over tensors
    )


class Trainer:
    def __init__(
        self,
        config: Config,
        restart: bool = False,
        resume_hint: str = "",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        check_training_stops(config, "mt train")
        self.config, self.resume_hint, self.clock = config, resume_hint, clock
        self.run_dir = Path(config.run.dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self._start_processes()
        resume = self._resume_point(restart)
        init = finetune.init_file(config) if resume is None else None  # checked before writing
        self._prepare_data()
        torch.manual_seed(config.run.seed)
        self.model = Transformer(
            config.model,
            self.data.src_tokenizer.get_vocab_size(),
            self.data.tgt_tokenizer.get_vocab_size(),
            joint=config.tokenizer.joint,
        ).to(self.device)
        finetune.start(self.model, init, config, write=self.main)  # weights of train.init, freeze
        self.optimizer = build_optimizer(self.model, config.train, self.device)
        self.autocast, self.precision_why = precision_for(config.train.precision, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.autocast == torch.float16)
        self.state = TrainState()
        self._saved_step = -1
        if resume is not None:
            self._load(resume)
        elif self.main:  # a run started over: metrics of an earlier attempt are not its own
            self._truncate_metrics(0)
        t = config.train
        if t.schedule in DECAYING and t.max_steps:
            self.state.horizon = t.max_steps
        if t.max_minutes and self.state.elapsed >= t.max_minutes * 60:
            raise ConfigError(
                f"train.max_minutes: {t.max_minutes:g} is spent: this run has trained "
                f"{self.state.elapsed / 60:.1f} minutes; give a larger budget to go on"
            )
        state = self.state
        if time_fitted(t) and state.horizon and state.step >= state.horizon:  # budget extended
            update_s = statistics.median(state.update_times)
            state.horizon = fit_horizon(
                t, state.step, state.elapsed, update_s, state.validate_s, state.save_s
            )
            say(f"train.max_minutes grew to {t.max_minutes:g}: about {state.horizon} updates")
        self.net = self._wrap(self.model)

    # ------------------------------------------------------------------ set-up

    def _start_processes(self) -> None:
        """Rank, world size and device of this process; the process group under torchrun.

        Each GPU process binds its own device (LOCAL_RANK) before the first collective:
        otherwise NCCL may create every context on GPU 0, or hang."""
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.main = self.rank == 0
        self.device = pick_device(self.config.run.device, int(os.environ.get("LOCAL_RANK", "0")))
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group(
                "nccl" if cuda else "gloo", device_id=self.device if cuda else None
            )

    def _prepare_data(self) -> None:
        """Rank 0 builds (or reuses) the cache first; the others then read it."""
        if self.main:
            self.data = prepare(self.config)
        self._barrier()
        if not self.main:
            self.data = prepare(self.config, write=False)
        self.train_split = self.data.splits["train"]
        self.resegment = dropout_epochs(self.data, self.config)  # None without BPE-dropout
        self.src_lengths = np.fromiter(map(len, self.train_split.src), np.int64)
        self.tgt_lengths = np.fromiter(map(len, self.train_split.tgt), np.int64)

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        net = model
        if self.world > 1:
            net = torch.nn.parallel.DistributedDataParallel(model)
        if self.config.train.compile:
            net = torch.compile(net)
        return net

    # ------------------------------------------------------------------ resume

    def _resume_point(self, restart: bool) -> Path | None:
        """The checkpoint to resume from (`last`, else the newest complete one, said aloud),
        None to start; an error if the config, the data or the tokenizers differ from what
        its weights were trained with. Runs before anything in the run folder is rebuilt."""
        last = self.ckpt_dir / "last"
        if restart:
            if self.main:
                remove(self.ckpt_dir)
                self.metrics_path.unlink(missing_ok=True)
            self._barrier()
            return None
        path = last.resolve() if checkpoint.is_complete(last) else None
        if path is None:
            path = checkpoint.newest_complete(self.ckpt_dir)
            if path is None and last.is_symlink():
                raise ConfigError(
                    f"{last}: points to {os.readlink(last)}, which is missing or incomplete, and "
                    "no complete checkpoint is left; use --restart to start over"
                )
            if path is None:
                return None
            if self.main:
                why = f"points to {os.readlink(last)}, which is" if last.is_symlink() else "is"
                say(
                    f"{last} {why} missing or incomplete; resuming from {path.name}, the newest "
                    "complete checkpoint"
                )
        file = path / checkpoint.WEIGHTS
        meta = checkpoint.read_metadata(file)
        resumable = resumable_keys(self.config)
        differing = [
            k
            # defaults filled in: a key added since the checkpoint was saved is not a change
            for k in diff_configs(checkpoint.read_config(file).to_dict(), self.config.to_dict())
            if k not in resumable
        ]
        if differing:
            raise ConfigError(
                f"{self.run_dir}: the config differs from the run's checkpoint in "
                f"{', '.join(differing)}; use the same config to resume, --restart to start "
                "over, or another run.dir"
            )
        now = inputs_of(self.config)
        saved = (
            checkpoint.meta_json(meta, "data_fingerprint", file)
            if "data_fingerprint" in meta
            else ""
        )
        if saved and saved != now["data_fingerprint"]:
            data = self.config.data
            files = ", ".join(f for name in SPLITS for f in getattr(data.files, name) or [])
            raise ConfigError(
                f"{self.run_dir}: the training data ({files or data.name}) changed "
                f"since {path.name} was saved; its weights cannot go on with other data and "
                "another vocabulary: use --restart to start over, or a new run.dir"
            )
        if "tokenizers" in meta:
            for name, sha in checkpoint.meta_json(meta, "tokenizers", file).items():
                if now["tokenizers"].get(name) != sha:
                    raise ConfigError(
                        f"{self.run_dir / name}: missing or changed since {path.name} was "
                        "saved; its weights need the vocabulary they were trained with: use "
                        "--restart to start over, or a new run.dir"
                    )
        return path

    def _load(self, path: Path) -> None:
        weights, _ = checkpoint.load_weights(path / checkpoint.WEIGHTS)
        saved = checkpoint.load_trainer_state(path)
        try:
            self.model.load_state_dict(weights)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scaler.load_state_dict(saved["scaler"])
            self.state = TrainState(**saved["state"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(
                f"{path}: does not fit this run's model and optimiser ({one_line(e)[:200]}); "
                "use --restart to start over, or another run.dir"
            ) from None
        if self.state.world_size != self.world:  # positions and generators are per rank
            raise ConfigError(
                f"{path}: trained by {self.state.world_size} processes but resumed by "
                f"{self.world}; resume with {self.state.world_size} (torchrun --nnodes x "
                "--nproc_per_node) or start over with --restart"
            )
        if isinstance(self.state.rng["cpu"], torch.Tensor):  # saved by mt 0.1: one process
            self.state.rng = {key: [value] for key, value in self.state.rng.items()}
        torch.set_rng_state(self.state.rng["cpu"][self.rank])
        if self.device.type == "cuda" and "cuda" in self.state.rng:
            torch.cuda.set_rng_state(self.state.rng["cuda"][self.rank], self.device)
        self._saved_step = self.state.step
        if self.main:
            self._truncate_metrics(self.state.step)
            say(f"resuming from {path} (step {self.state.step}, epoch {self.state.epoch})")

    def _truncate_metrics(self, step: int) -> None:
        """Forget metrics logged after `step`: they are about to be redone."""
        if self.metrics_path.is_file():
            lines = self.metrics_path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if _record_step(line) <= step]
            if kept != lines:
                atomic_write_text(self.metrics_path, "".join(kept))

    # ------------------------------------------------------------------ the loop

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of `epoch`: an equal share of them, since ranks step together."""
        if self._epoch_cache[0] != epoch:
            if self.resegment:  # BPE-dropout: the same pairs, segmented anew for this epoch
                self.train_split = self.resegment(epoch)
                self.src_lengths, self.tgt_lengths = (
                    np.fromiter(map(len, side), np.int64)
                    for side in (self.train_split.src, self.train_split.tgt)
                )
            batches = token_batches(
                self.src_lengths,
                self.tgt_lengths,
                self.config.train.max_tokens,
                self.config.run.seed,
                epoch,
            )
            per_rank = len(batches) // self.world
            if per_rank == 0:
                raise ConfigError(
                    f"train.max_tokens: {len(batches)} batches an epoch cannot be shared by "
                    f"{self.world} processes; lower train.max_tokens"
                )
            self._epoch_cache = (epoch, batches[self.rank * per_rank : (self.rank + 1) * per_rank])
        return self._epoch_cache[1]

    _epoch_cache: tuple[int, list[np.ndarray]] = (-1, [])

    def next_batches(self) -> list[np.ndarray]:
        """The batches of the next update, from the saved position, which this advances: the
        only place that moves (epoch, batch). An epoch ends with its last batch."""
        group = []
        for _ in range(self.config.train.accum_steps):
            mine = self._epoch_batches(self.state.epoch)
            group.append(mine[self.state.batch])
            self.state.batch += 1
            if self.state.batch == len(mine):
                self.state.epoch, self.state.batch = self.state.epoch + 1, 0
        return group

    def run(self) -> dict[str, Any]:
        """Train until a stopping rule fires; returns how it ended."""
        if self.main:  # the run's first line, once it is sure to run
            say(f"precision: {self.precision_why}")
        with StopSignal() as stop:
            reason = self._loop(stop)
        if self.main:
            say(f"training stopped at step {self.state.step}: {reason}")
            if stop.caught:
                say(f"resume with: {self.resume_hint or 'the same mt train command'}")
        if self.world > 1:
            dist.destroy_process_group()
        return {
            "step": self.state.step,
            "epoch": self.state.epoch,
            "reason": reason,
            "signal": stop.caught and stop.caught.split()[0],  # exit 128 + it on every rank
            "best_bleu": self.state.best_bleu,
        }

    def _loop(self, stop: StopSignal) -> str:
        t, state = self.config.train, self.state
        bar = tqdm(
            total=state.horizon or t.max_steps or None,
            initial=state.step,
            unit="step",
            desc="train",
            disable=not self.main or not sys.stderr.isatty(),
            dynamic_ncols=True,
        )
        window = dict.fromkeys(("loss", "nll", "tokens", "padded", "cells", "seconds"), 0.0)
        pace = Pace(self, self.clock())
        bad_updates, validated_at, patience_out = 0, -1, False
        reason = stop_reason(t, state, "", False, False)
        while not reason:
            loss, nll, tokens, padded, cells = self._update(self.next_batches())
            seconds = pace.updated()
            if loss is None:  # neither the update count nor the schedule advance
                say(f"fp16: gradients overflowed at step {state.step + 1}; update skipped")
            elif math.isfinite(loss):
                bad_updates = 0
                state.step += 1
                state.target_tokens += tokens
                for key, value in zip(window, (loss, nll, tokens, padded, cells, seconds)):
                    window[key] += value
                bar.update(1)
                if state.step % t.log_every == 0:
                    self._log_train(window, bar)
                    window = dict.fromkeys(window, 0.0)
                if state.step % t.eval_every == 0:
                    validated_at, patience_out = state.step, pace.timed("validate", self._validate)
            else:
                bad_updates += 1
                say(f"warning: non-finite loss at step {state.step + 1}; update skipped")
                if bad_updates >= MAX_BAD_UPDATES:
                    raise MtError(
                        f"{bad_updates} non-finite losses in a row at step {state.step + 1}; "
                        f"the last good checkpoint is {self.ckpt_dir / 'last'}; "
                        "lower the learning rate or set train.clip_norm"
                    )
            # with a fitted horizon the fit keeps the reserve for the final validation and save,
            # and the clock is only a backstop; otherwise it must keep that reserve itself
            reserve = 0.0 if time_fitted(t) else state.validate_s + state.save_s
            budget_left = t.max_minutes * 60 - state.elapsed - reserve
            signum, out_of_time, horizon = self._agree(
                [
                    float(stop.number),  # any rank's signal stops every rank, as that signal
                    float(bool(t.max_minutes) and budget_left <= 0),
                    float(pace.horizon() if self.main else 0),  # rank 0 decides, all follow
                ]
            )
            if horizon and int(horizon) != state.horizon:
                self._new_horizon(int(horizon), bar)
            if signum and not stop.caught:
                stop.caught = f"{signal.Signals(int(signum)).name} (to another process)"
            caught = stop.caught or ""
            reason = stop_reason(t, state, caught, patience_out, bool(out_of_time))
            if reason and not caught and validated_at != state.step:
                pace.timed("validate", self._validate)  # the final model is validated, unless
                # the person asked to stop now
            if reason or state.step % t.save_every == 0:
                pace.timed("save", self._save)
        bar.close()
        return reason

    def _new_horizon(self, horizon: int, bar: tqdm) -> None:
        t, state = self.config.train, self.state
        if not state.horizon and not t.warmup_fraction and t.warmup_steps > horizon // 2:
            say(
                f"warning: about {horizon} updates fit in train.max_minutes "
                f"({t.max_minutes:g}); warm-up shortened from {t.warmup_steps} to "
                f"{warmup_updates(t, horizon)} updates, half of them"
            )
        state.horizon = bar.total = horizon
        self._log(
            {
                "kind": "horizon",
                "step": state.step,
                "horizon": horizon,
                "update_s": statistics.median(state.update_times),
                "validate_s": state.validate_s,
                "save_s": state.save_s,
                "elapsed_s": state.elapsed,
                "budget_s": t.max_minutes * 60,
            }
        )

    def _update(self, group) -> tuple[float | None, float, int, int, int]:
        """One optimiser update over `group` batches; losses normalised by target tokens.
        The loss is None when fp16 loss scaling skipped the update."""
        t = self.config.train
        batches = [tuple(torch.from_numpy(a) for a in collate(self.train_split, i)) for i in group]
        if self.device.type == "cuda":  # non_blocking copies are asynchronous only when pinned
            batches = [tuple(x.pin_memory() for x in batch) for batch in batches]
        tokens = sum(int((tgt_out != PAD).sum()) for _, _, tgt_out in batches)
        global_tokens = self._agree([float(tokens)], op="sum")[0]
        # DDP averages gradients over ranks: scale so the result is the per-token mean
        norm = global_tokens / self.world
        self.model.train()
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss, nll
        for i, (src, tgt_in, tgt_out) in enumerate(batches):
            src, tgt_in, tgt_out = (
                x.to(self.device, non_blocking=True) for x in (src, tgt_in, tgt_out)
            )
            sync = i == len(batches) - 1 or self.world == 1
            with self._no_sync(not sync), autocast(self.device, self.autocast):
                logits = self.net(src, tgt_in)
                loss, nll = smoothed_loss(logits, tgt_out, t.label_smoothing)
            self.scaler.scale(loss / norm).backward()
            sums += torch.stack((loss.detach(), nll)).double()  # no host sync per batch
        loss_sum, nll_sum = self._agree(sums.tolist(), op="sum")
        if not math.isfinite(loss_sum):
            self.optimizer.zero_grad(set_to_none=True)
            return loss_sum, nll_sum, tokens, 0, 0
        lr = learning_rate(self.state.step + 1, self.config, self.state.horizon)
        for group_ in self.optimizer.param_groups:
            group_["lr"] = lr
        self.scaler.unscale_(self.optimizer)
        if t.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.get_scale() < scale:  # fp16 gradients overflowed: the scaler skipped
            return None, nll_sum / global_tokens, tokens, 0, 0  # the step and lowered its scale
        padded = sum(int((s == PAD).sum() + (o == PAD).sum()) for s, _, o in batches)
        cells = sum(s.numel() + o.numel() for s, _, o in batches)
        return loss_sum / global_tokens, nll_sum / global_tokens, tokens, padded, cells

    def _no_sync(self, skip: bool):
        from contextlib import nullcontext

        return self.net.no_sync() if skip and hasattr(self.net, "no_sync") else nullcontext()

    def _agree(self, values: list[float], op: str = "max") -> list[float]:
        """Combine per-rank numbers so every rank takes the same decision."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor.tolist()

    def _broadcast(self, values: list[float]) -> list[float]:
        """Rank 0's numbers on every rank (the others pass placeholders of the same length)."""
        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, 0)
        return tensor.tolist()

    def _gather_rng(self) -> dict[str, list[torch.Tensor]]:
        """Every rank's CPU (and CUDA) generator state, indexed by rank, on rank 0."""
        mine = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            mine["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.world == 1:
            return {key: [value] for key, value in mine.items()}
        states = [{}] * self.world
        dist.gather_object(mine, states if self.main else None, dst=0)
        return {key: [state[key] for state in states] for key in mine} if self.main else {}

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    # ------------------------------------------------------------------ logging

    def _log(self, record: dict[str, Any]) -> None:
        if self.main:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def _log_train(self, window: dict[str, float], bar: tqdm) -> None:
        tokens = window["tokens"] * self.world  # every rank trains on as many tokens
        steps = self.config.train.log_every
        record = {
            "kind": "train",
            "step": self.state.step,
            "epoch": self.state.epoch,
            "loss": window["loss"] / steps,
            "nll": window["nll"] / steps,
            "ppl": math.exp(min(window["nll"] / steps, 50)),
            "lr": learning_rate(self.state.step, self.config, self.state.horizon),
            "tokens_per_s": tokens / max(window["seconds"], 1e-9),
            "padding": window["padded"] / max(window["cells"], 1),
            "elapsed_s": self.state.elapsed,
            "horizon": self.state.horizon,  # the one this update was scheduled by (0: none)
        }
        self._log(record)
        if bar.disable and self.main:  # no bar off a terminal: a plain line now and then
            of = f"/{self.state.horizon}" if self.state.horizon else ""
            say(
                f"step {record['step']}{of}: loss {record['loss']:.3f}, lr {record['lr']:.2e}, "
                f"{record['tokens_per_s']:,.0f} target tokens/s, {self._minutes()}"
            )
        bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{record['tokens_per_s']:,.0f}",
            time=self._minutes(),
            refresh=False,
        )

    def _minutes(self) -> str:
        """Training time so far, and of the budget."""
        budget = self.config.train.max_minutes
        return f"{self.state.elapsed / 60:.1f}" + (f"/{budget:g} min" if budget else " min")

    # ------------------------------------------------------------------ validation

    def _validate(self) -> bool:
        """Validate, track the best BLEU; True when patience is exhausted.

        Rank 0 alone decodes and every rank takes its BLEU: the best score, the patience and
        the decision to stop are the same everywhere, even if another rank's kernels would
        have decoded differently."""
        t, state = self.config.train, self.state
        if not len(self.data.splits["valid"]):
            return False
        bleu = self._broadcast([self._validation_bleu() if self.main else 0.0])[0]
        if bleu > state.best_bleu:
            state.best_bleu, state.bad_evals = bleu, 0
            path = self._save()  # on every rank: a save gathers their generator states
            if self.main:
                checkpoint.point(self.ckpt_dir, "best", path)
        else:
            state.bad_evals += 1
        return bool(t.patience) and state.bad_evals >= t.patience

    def _validation_bleu(self) -> float:
        """Validation loss and greedy BLEU, logged and printed (rank 0)."""
        from .evaluate import score
        from .translate import translate

        t, state = self.config.train, self.state
        valid = self.data.splits["valid"]
        self.model.eval()
        loss, nll, _ = validation_loss(
            self.model, valid, t.max_tokens, t.label_smoothing, self.device
        )
        subset = validation_subset(len(valid), t.eval_sentences, self.config.run.seed)
        sources = [valid.src_text[i] for i in subset]
        references = [valid.tgt_text[i] for i in subset]
        hypotheses = translate(
            self.model,
            self.data.src_tokenizer,
            self.data.tgt_tokenizer,
            sources,
            dataclasses.replace(self.config.decode, beam=1, nbest=1),  # greedy: quick
            device=self.device,
        )
        bleu = score(hypotheses, references)["bleu"]
        record = {
            "kind": "valid",
            "step": state.step,
            "epoch": state.epoch,
            "loss": loss,
            "nll": nll,
            "ppl": math.exp(min(nll, 50)),
            "bleu": bleu,
            "sentences": len(subset),
            "elapsed_s": state.elapsed,
        }
        self._log(record)
        say(
            f"step {state.step}: valid loss {loss:.3f}, ppl {record['ppl']:.2f}, "
            f"BLEU {bleu:.2f} (best {max(bleu, state.best_bleu):.2f})"
        )
        examples = [
            f"  src: {sources[i]}\n  ref: {references[i]}\n  hyp: {hypotheses[i]}"
            for i in range(min(t.eval_examples, len(sources)))
        ]
        if examples:
            say("\n".join(examples))
        return bleu

    # ------------------------------------------------------------------ checkpoints

    def _save(self) -> Path:
        """Save `step-N`, point `last` at it, prune old ones. Every rank calls it (their
        generator states are gathered); rank 0 alone writes, and the others wait for it."""
        path = self.ckpt_dir / f"step-{self.state.step:08d}"
        if self._saved_step == self.state.step:
            return path
        self._saved_step = self.state.step
        rng = self._gather_rng()
        if not self.main:
            self._barrier()  # no rank goes on, or exits, before `last` is written
            return path
        self.state.rng, self.state.world_size = rng, self.world
        trainer_state = {
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "state": self.state.__dict__,
        }
        extra = {
            "best_bleu": self.state.best_bleu,
            "epoch": self.state.epoch,
            **inputs_of(self.config),  # what a resume checks before it rebuilds anything
        }
        path = checkpoint.save(
            self.ckpt_dir,
            self.state.step,
            self.model,
            trainer_state,
            self.config,
            (self.data.src_tokenizer, self.data.tgt_tokenizer),
            extra,
        )
        checkpoint.point(self.ckpt_dir, "last", path)
        checkpoint.prune(self.ckpt_dir, self.config.train.keep_last)
        self._barrier()
        return path


class Pace:
    """The clock of a training session: counts training time into `state.elapsed` across
    sessions, measures what updates, validations and saves cost, and from that refits the
    horizon of a schedule that ends with the budget. What it measured is kept in the state,
    so a resumed run decides as the uninterrupted one would on the same clock readings."""

    WINDOW = 49  # latest updates whose median is the cost of one: robust to a slow first one

    def __init__(self, trainer: Trainer, now: float) -> None:
        self.trainer, self.state, self.t = trainer, trainer.state, trainer.config.train
        self.last = now
        self.updates = 0  # in this session

    def _tick(self) -> float:
        """Seconds since the last reading, added to the run's training time."""
        now = self.trainer.clock()
        seconds, self.last = now - self.last, now
        self.state.elapsed += seconds
        return seconds

    def updated(self) -> float:
        seconds = self._tick()
        self.updates += 1
        self.state.update_times = [*self.state.update_times[1 - self.WINDOW :], seconds]
        return seconds

    def timed(self, what: str, work: Callable[[], Any]) -> Any:
        """Run a validation or a save, and keep its cost as `state.<what>_s`."""
        self._tick()
        result = work()
        setattr(self.state, f"{what}_s", self._tick())
        return result

    def horizon(self) -> int:
        """A new horizon estimate when one is due (0: keep the current one): after updates
        1, 2, 4, ... 64, then every hundredth of the budget."""
        s, t = self.state, self.t
        if not time_fitted(t) or (s.horizon and s.step >= s.horizon and self.updates > 1):
            return 0  # the last update ran at the floor: done (a resume may extend the budget)
        early = s.step & (s.step - 1) == 0 and s.step <= 64
        if not (early or s.elapsed - s.fitted_at >= t.max_minutes * 60 / 100):
            return 0
        s.fitted_at = s.elapsed
        update_s = statistics.median(s.update_times)
        fitted = fit_horizon(t, s.step, s.elapsed, update_s, s.validate_s, s.save_s)
        return max(fitted, s.step + 1)  # the update that ends the run runs at the floor


@torch.no_grad()
def validation_loss(
    model: Transformer, split: Split, max_tokens: int, epsilon: float, device: torch.device
) -> tuple[float, float, int]:
    """Label-smoothed loss and NLL per target token over a whole split."""
    src_lengths = np.fromiter(map(len, split.src), np.int64)
    tgt_lengths = np.fromiter(map(len, split.tgt), np.int64)
    loss_sum = nll_sum = 0.0
    tokens = 0
    limit = model.cfg.max_positions - 1  # room for EOS (source, labels) or BOS (input)
    if max(src_lengths.max(initial=0), tgt_lengths.max(initial=0)) > limit:
        split = Split([x[:limit] for x in split.src], [x[:limit] for x in split.tgt])
    for index in token_batches(src_lengths, tgt_lengths, max_tokens, 0, 0, shuffle=False):
        src, tgt_in, tgt_out = (torch.from_numpy(a).to(device) for a in collate(split, index))
        loss, nll = smoothed_loss(model(src, tgt_in), tgt_out, epsilon)
        loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
        tokens += int((tgt_out != PAD).sum())
    return loss_sum / max(tokens, 1), nll_sum / max(tokens, 1), tokens


def _record_step(line: str) -> float:
    """The step of a metrics line; a half-written last line (a crash) counts as after all."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf


def validation_subset(size: int, wanted: int, seed: int) -> list[int]:
    """A fixed random subset of the validation split (sorted), or all of it."""
    if not wanted or wanted >= size:
        return list(range(size))
    return sorted(np.random.default_rng(seed).choice(size, wanted, replace=False).tolist())


def train(config: Config, restart: bool = False, resume_hint: str = "") -> dict[str, Any]:
    return Trainer(config, restart, resume_hint).run()
