"""The training loop: batches, updates, logging, validation, checkpoints and exact resume.

A run can be stopped at any moment (Ctrl-C, SIGTERM, a wall-clock budget) and resumed with
the same command; on CPU the resumed run ends with the same weights as one never stopped.
The same code runs under `torchrun` with DistributedDataParallel: every rank trains on its
own share of each epoch's batches, only rank 0 writes files. With `train.ema`, validation and
checkpoints take a moving average of the weights (`ema.Ema`), training goes on from its own.

Around the loop: `batches.Batches` (what each update trains on), `update.Updater` (one
optimiser update), `ranks.Ranks` (what the processes agree on), `budget.Horizon` (when a
budget's schedule ends), `state.TrainState` (what a resume needs), `resume.Checkpoints`
(saving it and taking it back), `metrics.Progress` (what the run tells as it goes).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import Config, TrainConfig
from ..config_checks import check_training_stops
from ..data.batches import Batches
from ..data.dropout import dropout_epochs
from ..data.examples import ExampleMaker, Settings
from ..data.packing import row_length
from ..data.prepare import inputs_of, prepare
from ..decoding.trained import METADATA, Trained, length_ratio
from ..errors import Unhealthy
from ..messages import say
from ..model import Transformer
from . import finetune, health, metrics
from .budget import time_fitted
from .ema import Ema
from .health import Checks
from .metrics import Progress
from .ranks import Agreement, Ranks, StopSignal
from .rehearsal import UpdatePlan, plan_update
from .resume import Checkpoints
from .schedule import warmup_updates
from .state import Pace, TrainState
from .update import Optimiser, Update, Updater, loss_in
from .validation import validation_record


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
        self.config, self.resume_hint, self.clock = config, resume_hint, clock
        self.run_dir = Path(config.run.dir)
        self.build(restart)

    def build(self, restart: bool) -> None:
        """Everything the loop uses, each made once what it needs exists: the processes, the
        checkpoint to resume from (checked first), the data, the model (fine-tuning's
        weights), the optimiser, the state (resumed), the batches, then the update step,
        whose precision and compilation are decided on the first batch before it is built."""
        config, t = self.config, self.config.train
        self.ranks = Ranks(config.run.device)
        self.device, self.main = self.ranks.device, self.ranks.main
        self.checkpoints = Checkpoints(config, self.ranks)
        finetune.adopt(config)  # a Marian model's shape and tokenizers become the run's
        resume = self.checkpoints.resume_point(restart)  # checked before anything is rebuilt
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
        self.ema = Ema(self.model, t.ema) if t.ema else None  # every rank: the same average
        self.optimiser = Optimiser(self.model, t, self.device)
        self.state = TrainState()
        targets = self.data.splits["train"].tgt
        eos = config.model.eos_id
        self.unigram = health.unigram_entropy(targets, eos) if t.health_checks else 0.0
        if resume is not None:
            self.state = self.checkpoints.restore(resume, self.model, self.optimiser, self.ema)
        elif self.main:  # a run started over: metrics of an earlier attempt are not its own
            metrics.forget_after(self.run_dir, 0)
        if grown := self.state.horizon.start(t, self.state.step, self.state.elapsed):
            say(grown)
        if resume is None:  # decided once: a resume on another device keeps the run's batches
            self.state.pack_length = row_length(config, self.device.type)
        self.batches = self._batches()
        net = self.ranks.wrap(self.model)  # once its weights are final (loaded, or initialised)
        self.update_plan = self._plan_update(net)
        plan = self.update_plan
        self.updater = Updater(
            self.model, net, self.optimiser, t, self.ranks, plan.dtype, plan.compiled
        )
        self.checks = Checks(config, self.state.vitals, self.unigram)

    def _prepare_data(self) -> None:
        """Rank 0 builds (or reuses) the data cache first; the others then read it."""
        if self.main:
            self.data = prepare(self.config, base=finetune.base)
            # what the weights are bound to, saved with each checkpoint: read once
            self.inputs = inputs_of(self.config)
        self.ranks.barrier()
        if not self.main:
            self.data = prepare(self.config, write=False)

    def _batches(self) -> Batches:
        train, settings = self.data.splits["train"], Settings.of(self.config)
        tokenizers = self.data.src_tokenizer, self.data.tgt_tokenizer
        return Batches(
            train,
            self.config.train.max_tokens,
            self.config.run.seed,
            self.state.position,
            self.ranks.rank,
            self.ranks.world,
            pin=self.device.type == "cuda",
            pack_length=self.state.pack_length,
            resegment=dropout_epochs(self.data, self.config),  # None without BPE-dropout
            specials=self.model.specials,
            examples=settings and ExampleMaker(settings, train, tokenizers, self.config),
        )

    def _plan_update(self, net: torch.nn.Module) -> UpdatePlan:
        """The update's precision and forward pass (compiled or not), rehearsed on the first
        batch (`rehearsal.plan_update`); a resumed run keeps the precision it measured."""
        t = self.config.train
        batch = self.batches.peek().map(lambda x: x.to(self.device))
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        moments = 0 if self.optimiser.adamw.state else 2 * weights  # AdamW's, at its first step
        return plan_update(
            lambda dtype: loss_in(net, dtype, t, self.model.cfg.pad_id, compiled=False),
            batch,
            self.model,
            t,
            self.ranks,
            bool(self.batches.pack_length),
            self.state.precision,
            moments,
        )

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        """Train until a stopping rule fires; returns how it ended."""
        self._measured_precision()
        if self.main:  # the run's first lines, once it is sure to run
            say(f"precision: {self.update_plan.why}")
            if self.update_plan.compiled:
                say(f"compiled the training step in {self.update_plan.seconds:.1f} s")
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
        """What train.precision auto measured on a CPU (rank 0's choice, on every rank): kept
        in the state (a resume computes alike), recorded in metrics.jsonl."""
        plan = self.update_plan
        if not plan.rates:
            return
        self.state.precision = plan.precision
        if self.main:
            rates = {f"{k}_tokens_per_s": v for k, v in plan.rates.items()}
            record = {"kind": "precision", "step": self.state.step, "precision": plan.precision}
            metrics.append(self.run_dir, {**record, **rates})

    def _loop(self, stop: StopSignal) -> str:
        """Update, log, validate, agree whether to stop, save; until a stopping rule fires."""
        t, state = self.config.train, self.state
        total = state.horizon.at or t.max_steps
        self.progress = Progress(self.run_dir, self.main, t.max_minutes, state.step, total)
        self.pace = Pace(self.clock, state)  # training time, and what each part costs
        self.validated_at, self.patience_out = -1, False  # in this session
        reason = stop_reason(t, state, "", False, False)
        while not reason:
            batches = [next(self.batches) for _ in range(t.accum_steps)]
            update = self.updater(batches, state.horizon.rate(state.step + 1, self.config))
            seconds = self.pace.updated()
            if update.counted:
                state.step += 1
                if self.ema:
                    self.ema.update(self.model, state.step)
                self.checks.counted(update.grad_norm)
                self.progress.counted(update, seconds)
                if state.step % t.log_every == 0:
                    self._log_train(update.lr)
                if state.step % t.eval_every == 0:
                    _, state.horizon.validate_s = self.pace.timed(self._validate)
            else:
                self._skipped(update)
            reason = self._agree_to_stop(stop)
            if reason and self._validates_last(stop):
                _, state.horizon.validate_s = self.pace.timed(self._validate)
            if (reason or state.step % t.save_every == 0) and not self.checks.diverged:
                _, state.horizon.save_s = self.pace.timed(self._save)  # diverged: keep the last
        if found := self.checks.found:  # the same on every rank: their inputs are agreed
            self.progress.log({"kind": "health", "step": state.step, **dataclasses.asdict(found)})
        self.progress.bar.close()
        return reason

    def _skipped(self, update: Update) -> None:
        """Say why an update did not count; too many non-finite losses in a row diverged."""
        step = self.state.step + 1
        if update.overflow and update.fp16:  # neither the update count nor the schedule advance
            say(f"fp16: gradients overflowed at step {step}; update skipped")
            return
        what = "gradients" if update.overflow else "loss"
        say(f"warning: non-finite {what} at step {step}; update skipped")
        self.checks.skipped(step)

    def _agree_to_stop(self, stop: StopSignal) -> str:
        """Every rank proposes what it saw, all take rank 0's decision, then `stop_reason`."""
        t, state = self.config.train, self.state
        agreed = self.ranks.agree(
            Agreement(
                signal=stop.caught.value if stop.caught else 0,
                out_of_time=state.horizon.out_of_time(t, state.elapsed),
                horizon=state.horizon.propose(t, state.step, state.elapsed, self.pace.updates),
            )
        )
        if agreed.horizon and agreed.horizon != state.horizon.at:
            if warning := state.horizon.move(self.config, state.step, agreed.horizon):
                say(warning)
            self.progress.horizon(
                state.horizon.record(state.step, state.elapsed, t.max_minutes * 60)
            )
        stop.agreed(agreed.signal)
        return stop_reason(t, state, stop.name, self.patience_out, agreed.out_of_time)

    def _log_train(self, lr: float) -> None:
        """The "train" record of the log window that ends at this update."""
        state, window = self.state, self.progress.window
        grad_norm = self.checks.window_grad_norm(state.step, window.nll)
        self.progress.train(
            {
                "kind": "train",
                "step": state.step,
                "epoch": state.position.epoch,
                **window.close(lr, self.ranks.world),  # loss, nll, ppl, lr, tokens/s, padding
                "elapsed_s": state.elapsed,
                "horizon": state.horizon.at,  # the one this update was scheduled by (0: none)
                **grad_norm,  # where train.clip_norm measures it
            }
        )

    # ------------------------------------------------------------------ validation

    def _validates_last(self, stop: StopSignal) -> bool:
        """Whether a run about to stop validates its final model: unless it did at this
        update, the person asked to stop now, or the model is known to be broken."""
        return not (stop.stopping or self.checks.found) and self.validated_at != self.state.step

    def _validate(self) -> None:
        """Validate, keep the best as `best`, and whether patience is exhausted.

        Rank 0 alone decodes and every rank takes its BLEU: the best score, the patience and
        the decision to stop are the same everywhere, even if another rank's kernels would
        have decoded differently."""
        t, state = self.config.train, self.state
        self.validated_at = state.step
        if not len(self.data.splits["valid"]):
            self.patience_out = False
            return
        mine = self._validation_bleu() if self.main else [0.0] * 3
        bleu, nll, shuffled = self.ranks.broadcast(mine)
        warmup = warmup_updates(self.config, state.horizon.at)
        self.checks.validated(state.step, nll, shuffled, bleu, warmup)
        best = state.validated(bleu)  # the best BLEU so far
        if best and not self.checks.diverged:  # a run stopped as diverged keeps its last
            self.checkpoints.best(self._save())  # on every rank: a save gathers generators
        self.patience_out = state.out_of_patience(t.patience)

    def _validation_bleu(self) -> list[float]:
        """Validate, log and say how it went (rank 0): BLEU, NLL, NLL with shuffled sources."""
        state = self.state
        record, examples = validation_record(
            self.validated_model, self.data, self.config, self.device, self.trained
        )
        state.carried = record["carried"]
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
        """Save `step-N` and point `last` at it (`resume.Checkpoints.save`)."""
        tokenizers = self.data.src_tokenizer, self.data.tgt_tokenizer
        return self.checkpoints.save(
            self.model, self.optimiser, self.state, tokenizers, self._extra, self.ema
        )

    @property
    def validated_model(self) -> Transformer:
        """The model validation decodes and checkpoints save: the moving average of the
        weights (`train.ema`), else the weights trained."""
        return self.ema.model if self.ema else self.model

    @property
    def trained(self) -> Trained:
        """What decoding needs of the model, as measured so far (mt.decoding.trained): the
        length it carries (data.max_length before any validation) and its length ratio."""
        carried = self.state.carried or self.config.data.max_length
        return Trained(carried, length_ratio(self.data.stats))

    def _extra(self) -> dict[str, Any]:
        """The weights' metadata besides the config and the tokenizers, read without them."""
        state = self.state
        return {
            "best_bleu": state.best_bleu,
            "epoch": state.position.epoch,
            METADATA: self.trained.saved(),  # travels with the weights
            **self.inputs,  # what a resume checks before it rebuilds anything
        }


def train(config: Config, restart: bool = False, resume_hint: str = "") -> dict[str, Any]:
    return Trainer(config, restart, resume_hint).run()
