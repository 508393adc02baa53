"""The training loop: batches, updates, logging, validation, checkpoints and exact resume.

A run can be stopped at any moment (Ctrl-C, SIGTERM, a wall-clock budget) and resumed with
the same command; on CPU the resumed run ends with the same weights as one never stopped.
The same code runs under `torchrun` with DistributedDataParallel: every rank trains on its
own share of each epoch's batches, only rank 0 writes files.

Around the loop: `batches.Batches` (what each update trains on), `ranks.Ranks` (what the
processes agree on), `schedule.Horizon` (when a budget's schedule ends), `loss` (the loss).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import checkpoint, finetune, health, metrics
from .batches import Batch, Batches
from .config import EOS, Config, TrainConfig, check_training_stops, one_line
from .data import dropout_epochs, inputs_of, prepare
from .errors import ConfigError, Unhealthy
from .files import remove
from .health import Checks
from .model import Transformer
from .packing import row_length
from .progress import Progress, say
from .ranks import Agreement, Ranks, StopSignal
from .schedule import time_fitted, warmup_updates
from .state import Pace, TrainState
from .update import Update, Updater
from .validate import validate


def stop_reason(
    t: TrainConfig, state: TrainState, signal_name: str, patience_out: bool, out_of_time: bool
) -> str:
    """Whether and why training stops, in a fixed order of priority (empty: go on).

    Called once per update with every rank's agreed inputs, this is the only place that
    decides; a signal comes first because the person asked for it, then a health check (its
    name in the state), because a run that collapsed has nothing to go on for.
    """
    if signal_name:
        return f"stopped by {signal_name}"
    if state.vitals.stopped:
        return f"the health check '{state.vitals.stopped}' fired"
    if t.max_steps and state.step >= t.max_steps:
        return f"reached train.max_steps ({t.max_steps})"
    if t.max_epochs and state.position.epoch >= t.max_epochs:
        return f"reached train.max_epochs ({t.max_epochs})"
    if time_fitted(t) and state.horizon.reached(state.step):
        return f"reached the {state.horizon.at} updates that fit in {t.max_minutes:g} minutes"
    if out_of_time:
        return f"reached train.max_minutes ({t.max_minutes:g})"
    if patience_out:
        return f"no better validation BLEU in {t.patience} validations"
    return ""


class Trainer:
    def __init__(
        self,
        config: Config,
        restart: bool = False,
        resume_hint: str = "",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        check_training_stops(config, "mt train")
        t = config.train
        self.config, self.resume_hint, self.clock = config, resume_hint, clock
        self.run_dir = Path(config.run.dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.ranks = Ranks(config.run.device)
        self.device, self.main = self.ranks.device, self.ranks.main
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
        self.updater = Updater(self.model, t, self.ranks)
        self.state = TrainState()
        targets = self.data.splits["train"].tgt
        self.unigram = health.unigram_entropy(targets, EOS) if t.health_checks else 0.0
        self._saved_step = -1
        if resume is not None:
            self._load(resume)
        elif self.main:  # a run started over: metrics of an earlier attempt are not its own
            metrics.forget_after(self.run_dir, 0)
        self._start_horizon()
        if resume is None:  # decided once: a resume on another device keeps the run's batches
            self.state.pack_length = row_length(config, self.device.type)
        self.batches = self._batches()
        self.updater.wrap()
        # called after every update with its result and batches (timing, counting, checks)
        self.on_update: list[Callable[[Update, list[Batch]], None]] = []

    def _prepare_data(self) -> None:
        """Rank 0 builds (or reuses) the data cache first; the others then read it."""
        if self.main:
            self.data = prepare(self.config)
        self.ranks.barrier()
        if not self.main:
            self.data = prepare(self.config, write=False)

    def _batches(self) -> Batches:
        return Batches(
            self.data.splits["train"],
            self.config.train.max_tokens,
            self.config.run.seed,
            self.state.position,
            self.ranks.rank,
            self.ranks.world,
            pin=self.device.type == "cuda",
            pack_length=self.state.pack_length,
            resegment=dropout_epochs(self.data, self.config),  # None without BPE-dropout
        )

    def _start_horizon(self) -> None:
        """Refuse a spent budget; set the horizon of this session (see `Horizon.start`)."""
        t, state = self.config.train, self.state
        if t.max_minutes and state.elapsed >= t.max_minutes * 60:
            raise ConfigError(
                f"train.max_minutes: {t.max_minutes:g} is spent: this run has trained "
                f"{state.elapsed / 60:.1f} minutes; give a larger budget to go on"
            )
        if state.horizon.start(t, state.step, state.elapsed):
            at = state.horizon.at
            say(f"train.max_minutes grew to {t.max_minutes:g}: about {at} updates")

    # ------------------------------------------------------------------ resume

    def _resume_point(self, restart: bool) -> Path | None:
        """The checkpoint to resume from (`last`, else the newest complete one, said aloud),
        None to start; an error if the config, the data or the tokenizers differ from what
        its weights were trained with. Runs before anything in the run folder is rebuilt."""
        if restart:
            if self.main:
                remove(self.ckpt_dir)
                (self.run_dir / metrics.FILE).unlink(missing_ok=True)
            self.ranks.barrier()
            return None
        path, notice = checkpoint.resume_point(self.ckpt_dir)
        if notice and self.main:
            say(notice)
        if path is not None:
            checkpoint.check_resumable(self.config, path)
        return path

    def _load(self, path: Path) -> None:
        weights, _ = checkpoint.load_weights(path / checkpoint.WEIGHTS)
        saved = checkpoint.load_trainer_state(path)
        try:
            self.model.load_state_dict(weights)
            self.updater.load_state_dict(saved)
            self.state = TrainState.from_dict(saved["state"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(
                f"{path}: does not fit this run's model and optimiser ({one_line(e)[:200]}); "
                "use --restart to start over, or another run.dir"
            ) from None
        world, rank = self.ranks.world, self.ranks.rank
        if self.state.world_size != world:  # positions and generators are per rank
            raise ConfigError(
                f"{path}: trained by {self.state.world_size} processes but resumed by "
                f"{world}; resume with {self.state.world_size} (torchrun --nnodes x "
                "--nproc_per_node) or start over with --restart"
            )
        torch.set_rng_state(self.state.rng["cpu"][rank])
        if self.device.type == "cuda" and "cuda" in self.state.rng:
            torch.cuda.set_rng_state(self.state.rng["cuda"][rank], self.device)
        self._saved_step = self.state.step
        self.state.vitals.resumed(self.config.train, str(path))
        if self.main:
            metrics.forget_after(self.run_dir, self.state.step)
            say(f"resuming from {path} (step {self.state.step}, epoch {self.state.position.epoch})")

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        """Train until a stopping rule fires; returns how it ended."""
        self.updater.rehearse(
            self.batches.peek(), bool(self.batches.pack_length), self.state.precision
        )
        self._measured_precision()
        if self.main:  # the run's first lines, once it is sure to run
            say(f"precision: {self.updater.precision_why}")
            if self.updater.compiled:
                say(f"compiled the training step in {self.updater.rehearsal_s:.1f} s")
        with StopSignal() as stop:
            reason = self._loop(stop)
        self.batches.close()
        if self.main:
            say(f"training stopped at step {self.state.step}: {reason}")
            if stop.stopping:
                say(f"resume with: {self.resume_hint or 'the same mt train command'}")
        self.ranks.close()
        if self.checks.found:
            raise Unhealthy(self.checks.found.message)
        return {
            "step": self.state.step,
            "epoch": self.state.position.epoch,
            "reason": reason,
            "signal": stop.stopping and stop.stopping.name,  # exit 128 + it on every rank
            "best_bleu": self.state.best_bleu,
        }

    def _measured_precision(self) -> None:
        """What train.precision auto measured on a CPU: rank 0's choice on every rank, kept
        in the state (a resume computes alike), recorded in metrics.jsonl."""
        updater = self.updater
        if not updater.rates:
            return
        bf16 = self.ranks.broadcast([float(updater.precision == "bf16")])[0]
        updater.autocast = torch.bfloat16 if bf16 else None
        self.state.precision = updater.precision
        if self.main:
            rates = {f"{k}_tokens_per_s": v for k, v in updater.rates.items()}
            record = {"kind": "precision", "step": self.state.step, "precision": updater.precision}
            metrics.append(self.run_dir, {**record, **rates})

    def _loop(self, stop: StopSignal) -> str:
        t, state = self.config.train, self.state
        total = state.horizon.at or t.max_steps
        self.progress = Progress(self.run_dir, self.main, t.max_minutes, state.step, total)
        self.pace = Pace(self.clock, state)
        self.checks = Checks(self.config, state.vitals, self.unigram)
        window = dict.fromkeys(("loss", "nll", "tokens", "padded", "cells", "seconds"), 0.0)
        validated_at, patience_out = -1, False
        reason = stop_reason(t, state, "", False, False)
        while not reason:
            batches = [next(self.batches) for _ in range(t.accum_steps)]
            lr = state.horizon.rate(state.step + 1, self.config)
            update = self.updater(batches, lr)
            for hook in self.on_update:
                hook(update, batches)
            seconds = self.pace.updated()
            if update.counted:
                state.step += 1
                self.checks.counted(update.grad_norm)
                self.progress.bar.update()
                self._add(window, update, seconds)
                if state.step % t.log_every == 0:
                    self._log_train(window, update.lr)
                    window = dict.fromkeys(window, 0.0)
                if state.step % t.eval_every == 0:
                    validated_at = state.step
                    patience_out, state.horizon.validate_s = self.pace.timed(self._validate)
            else:
                self._skipped(update)
            reason = self._agree_to_stop(stop, patience_out)
            if reason and not (stop.stopping or self.checks.found) and validated_at != state.step:
                # the final model is validated, unless the person asked to stop now or it
                # is known to be broken
                _, state.horizon.validate_s = self.pace.timed(self._validate)
            if (reason or state.step % t.save_every == 0) and not self.checks.diverged:
                _, state.horizon.save_s = self.pace.timed(self._save)  # diverged: keep the last
        if found := self.checks.found:  # the same on every rank: their inputs are agreed
            self.progress.log({"kind": "health", "step": state.step, **dataclasses.asdict(found)})
        self.progress.bar.close()
        return reason

    @staticmethod
    def _add(window: dict[str, float], update: Update, seconds: float) -> None:
        """Sum an update into the window of the next log line."""
        for key in ("loss", "nll", "tokens", "padded", "cells"):
            window[key] += getattr(update, key)
        window["seconds"] += seconds

    def _skipped(self, update: Update) -> None:
        """Say why an update did not count; too many non-finite losses in a row diverged."""
        step = self.state.step + 1
        if update.overflow:  # neither the update count nor the schedule advance
            say(f"fp16: gradients overflowed at step {step}; update skipped")
            return
        say(f"warning: non-finite loss at step {step}; update skipped")
        self.checks.skipped(step)

    def _agree_to_stop(self, stop: StopSignal, patience_out: bool) -> str:
        """Every rank proposes what it saw, all take rank 0's decision, then `stop_reason`."""
        t, state = self.config.train, self.state
        horizon = state.horizon
        # with a fitted horizon the fit keeps the reserve for the final validation and save,
        # and the clock is only a backstop; otherwise it must keep that reserve itself
        reserve = 0.0 if time_fitted(t) else horizon.validate_s + horizon.save_s
        budget_left = t.max_minutes * 60 - state.elapsed - reserve
        agreed = self.ranks.agree(
            Agreement(
                signal=stop.caught.value if stop.caught else 0,
                out_of_time=bool(t.max_minutes) and budget_left <= 0,
                horizon=horizon.propose(t, state.step, state.elapsed, self.pace.updates),
            )
        )
        if agreed.horizon and agreed.horizon != horizon.at:
            self._new_horizon(agreed.horizon)
        stop.agreed(agreed.signal)
        return stop_reason(t, state, stop.name, patience_out, agreed.out_of_time)

    def _new_horizon(self, at: int) -> None:
        t, state = self.config.train, self.state
        horizon = state.horizon
        post_norm = not self.config.model.norm_first  # warmup_steps is its floor
        warmup = warmup_updates(self.config, at)
        if not horizon.at and (post_norm or not t.warmup_fraction) and t.warmup_steps > warmup:
            say(
                f"warning: about {at} updates fit in train.max_minutes "
                f"({t.max_minutes:g}); warm-up shortened from {t.warmup_steps} to "
                f"{warmup} updates, half of them"
                + ("; a post-norm model may collapse (model.norm_first=true)" if post_norm else "")
            )
        horizon.move(self.config, state.step, at)
        self.progress.horizon(
            {
                "kind": "horizon",
                "step": state.step,
                "horizon": at,
                "update_s": horizon.update_s,
                "validate_s": horizon.validate_s,
                "save_s": horizon.save_s,
                "elapsed_s": state.elapsed,
                "budget_s": t.max_minutes * 60,
            }
        )

    # ------------------------------------------------------------------ logging

    def _log_train(self, window: dict[str, float], lr: float) -> None:
        state, steps = self.state, self.config.train.log_every
        tokens = window["tokens"] * self.ranks.world  # every rank trains on as many tokens
        grad_norm = self.checks.logged(state.step, window["nll"] / steps)
        self.progress.train(
            {
                "kind": "train",
                "step": state.step,
                "epoch": state.position.epoch,
                "loss": window["loss"] / steps,
                "nll": window["nll"] / steps,
                "ppl": math.exp(min(window["nll"] / steps, 50)),
                "lr": lr,
                "tokens_per_s": tokens / max(window["seconds"], 1e-9),
                "padding": window["padded"] / max(window["cells"], 1),
                "elapsed_s": state.elapsed,
                "horizon": state.horizon.at,  # the one this update was scheduled by (0: none)
                **grad_norm,  # where train.clip_norm measures it
            }
        )

    # ------------------------------------------------------------------ validation

    def _validate(self) -> bool:
        """Validate, track the best BLEU; True when patience is exhausted.

        Rank 0 alone decodes and every rank takes its BLEU: the best score, the patience and
        the decision to stop are the same everywhere, even if another rank's kernels would
        have decoded differently."""
        t, state = self.config.train, self.state
        if not len(self.data.splits["valid"]):
            return False
        mine = self._validation_bleu() if self.main else [0.0] * 3
        bleu, nll, shuffled = self.ranks.broadcast(mine)
        warmup = warmup_updates(self.config, state.horizon.at)
        self.checks.validated(state.step, nll, shuffled, bleu, warmup)
        if bleu > state.best_bleu:
            state.best_bleu, state.bad_evals = bleu, 0
            path = self._save()  # on every rank: a save gathers their generator states
            if self.main:
                checkpoint.point(self.ckpt_dir, "best", path)
        else:
            state.bad_evals += 1
        return bool(t.patience) and state.bad_evals >= t.patience

    def _validation_bleu(self) -> list[float]:
        """Validate, log and say how it went (rank 0): BLEU, NLL, NLL with shuffled sources."""
        state = self.state
        record, examples = validate(self.model, self.data, self.config, self.device)
        where = {"step": state.step, "epoch": state.position.epoch}
        self.progress.log({"kind": "valid", **where, **record, "elapsed_s": state.elapsed})
        bleu = record["bleu"]
        say(
            f"step {state.step}: valid loss {record['loss']:.3f}, ppl {record['ppl']:.2f}, "
            f"BLEU {bleu:.2f} (best {max(bleu, state.best_bleu):.2f})"
        )
        if examples:
            say("\n".join(examples))
        return [bleu, record["nll"], record["nll_shuffled"]]

    # ------------------------------------------------------------------ checkpoints

    def _save(self) -> Path:
        """Save `step-N`, point `last` at it, prune old ones. Every rank calls it (their
        generator states are gathered); rank 0 alone writes, and the others wait for it."""
        state = self.state
        path = checkpoint.step_dir(self.ckpt_dir, state.step)
        if self._saved_step == state.step:
            return path
        self._saved_step = state.step
        mine = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            mine["cuda"] = torch.cuda.get_rng_state(self.device)
        ranks = self.ranks.gather(mine)
        if not self.main:
            self.ranks.barrier()  # no rank goes on, or exits, before `last` is written
            return path
        state.rng = {key: [rank[key] for rank in ranks] for key in mine}  # indexed by rank
        state.world_size = self.ranks.world
        trainer_state = {**self.updater.state_dict(), "state": dataclasses.asdict(state)}
        extra = {
            "best_bleu": state.best_bleu,
            "epoch": state.position.epoch,
            **inputs_of(self.config),  # what a resume checks before it rebuilds anything
        }
        path = checkpoint.save(
            self.ckpt_dir,
            state.step,
            self.model,
            trainer_state,
            self.config,
            (self.data.src_tokenizer, self.data.tgt_tokenizer),
            extra,
        )
        checkpoint.point(self.ckpt_dir, "last", path)
        checkpoint.prune(self.ckpt_dir, self.config.train.keep_last)
        self.ranks.barrier()
        return path


def train(config: Config, restart: bool = False, resume_hint: str = "") -> dict[str, Any]:
    return Trainer(config, restart, resume_hint).run()
