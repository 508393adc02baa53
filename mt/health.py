"""Health checks: a run that collapsed or diverged stops with a diagnosis, instead of spending
its budget and exiting 0 as if it had learned.

They are judged where the trainer reads numbers to the host anyway (an update's loss, a
training log line, a validation), from a short history kept in the training state, so a
resumed run judges as the uninterrupted one would. A check that fires returns a `Diagnosis`:
its name, for `metrics.jsonl`, and one line naming what was seen, the likely cause and the
setting to change.

- diverged: the loss was not a finite number in MAX_BAD_UPDATES updates in a row, or a logged
  window's gradient norm was not.
- exploded: a logged window's mean gradient norm is EXPLOSION times the median of the earlier
  ones: the updates are about to wreck the weights (none was seen in the runs measured:
  the bound is loose on purpose).
- collapsed: `train.health_patience` validations in a row after the warm-up translate nothing
  (BLEU below BLEU_FLOOR), and the model predicts the training and the validation targets no
  better than the frequencies of their tokens (both NLLs at least UNIGRAM_SHARE of the
  unigram entropy of the training targets; a model that over-fits has a low training NLL),
  and it is not on its way down (the validation NLL fell by less than PROGRESS across them,
  the training NLL by less than TRAIN_PROGRESS: on a small corpus the validation NLL of a
  model that learns can stay flat).
  The model has stopped using the source: the failure of a post-norm Transformer warmed up
  too briefly for its learning rate (Xiong et al. 2020, "On Layer Normalization in the
  Transformer Architecture"). Measured on the Tatoeba files (CPU, 6+6 layers at d_model 64,
  lr 5e-3): with 10 warm-up updates post-norm sat at 1.01x the unigram entropy for 300
  updates, BLEU 0; pre-norm went on down (0.86x at update 300, the validation NLL falling 2%
  or more between validations every 50 updates), and so did post-norm with 100. With the
  16,000-token vocabulary the unigram entropy of the Tatoeba targets is 6.24 nats; the
  collapsed post-norm run on an H100 sat at a label-smoothed loss of 6.4 for 8,000 updates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import Config, TrainConfig
from .errors import ConfigError
from .store import Sentences

MAX_BAD_UPDATES = 5  # consecutive non-finite losses before the run is called diverged
EXPLOSION = 100.0  # a window's gradient norm this many times the earlier median has exploded
BLEU_FLOOR = 1.0  # validation BLEU below this translates nothing
UNIGRAM_SHARE = 0.9  # NLL above this share of the unigram entropy: no use of the source
# a model whose NLLs fell less than these fractions across the validations judged is stuck:
# the validation NLL is measured on fixed sentences, the training NLL of one logged window is
# noisier (collapsed: up to 4% between validations, measured)
PROGRESS, TRAIN_PROGRESS = 0.01, 0.05


@dataclass
class Vitals:
    """What the checks judge, kept in the training state: a resumed run judges alike."""

    train_nll: float = math.nan  # of the latest logged window
    grad_norms: list[float] = field(default_factory=list)  # mean of the latest logged windows
    validations: list[list[float]] = field(default_factory=list)  # (step, train_nll, nll, BLEU)
    stopped: str = ""  # the check that stopped the run ("": none)
    patience: int = 0  # train.health_patience when it stopped

    KEEP = 50  # logged windows and validations remembered

    def logged(self, train_nll: float, grad_norm: float | None) -> None:
        self.train_nll = train_nll
        if grad_norm is not None:
            self.grad_norms = [*self.grad_norms[1 - self.KEEP :], grad_norm]

    def validated(self, step: int, nll: float, bleu: float) -> None:
        self.validations = [*self.validations[1 - self.KEEP :], [step, self.train_nll, nll, bleu]]

    def resumed(self, t: TrainConfig, where: str) -> None:
        """A run a check stopped resumes only with a health setting changed."""
        if self.stopped and t.health_checks and t.health_patience == self.patience:
            raise ConfigError(
                f"{where}: the health check '{self.stopped}' stopped this run; start over with "
                "a changed setting (--restart), or resume anyway with --set "
                "train.health_checks=false or another train.health_patience"
            )
        self.stopped = ""


@dataclass(frozen=True)
class Diagnosis:
    check: str  # diverged, exploded or collapsed
    message: str  # one line: what was seen, the likely cause, the setting to change


def _fixes(config: Config) -> str:
    """The settings that cure an unstable start, the likeliest first."""
    post_norm = "set model.norm_first=true (pre-norm), " if not config.model.norm_first else ""
    return f"{post_norm}lengthen the warm-up (train.warmup_steps) or lower train.lr"


def unigram_entropy(targets: Sequence[np.ndarray], end: int) -> float:
    """Entropy in nats of the target tokens' frequencies, each sentence ended by `end` (the
    labels the loss sees): the NLL of a model that ignores the source and the context."""
    if not targets:
        return 0.0
    flat = targets.ids if isinstance(targets, Sentences) else np.concatenate(targets)  # a store's
    counts = np.bincount(flat, minlength=end + 1)
    counts[end] += len(targets)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def diverged(config: Config, step: int, bad_updates: int) -> Diagnosis | None:
    """After an update whose loss was not finite (`bad_updates` in a row, at update `step`)."""
    if bad_updates < MAX_BAD_UPDATES:
        return None
    clip = "" if config.train.clip_norm else "set train.clip_norm (1.0), "
    return Diagnosis(
        "diverged",
        f"diverged: the loss was not a finite number in {bad_updates} updates in a row at "
        f"step {step}; {clip}{_fixes(config)}",
    )


def check_gradients(config: Config, step: int, norms: Sequence[float]) -> Diagnosis | None:
    """At a training log line: `norms` are the mean gradient norms of the logged windows,
    oldest first, this one last (before clipping)."""
    if not norms:
        return None
    norm = norms[-1]
    if not math.isfinite(norm):
        return Diagnosis(
            "diverged",
            f"diverged: the gradient norm was {norm} at step {step}; {_fixes(config)}",
        )
    if len(norms) < 5:  # too little history to know what is usual
        return None
    usual = statistics.median(norms[:-1])
    if norm < EXPLOSION * usual:
        return None
    clip = "" if config.train.clip_norm else "set train.clip_norm (1.0), "
    return Diagnosis(
        "exploded",
        f"exploded: the gradient norm reached {norm:.3g} at step {step}, {norm / usual:.0f} "
        f"times its usual {usual:.3g}; {clip}{_fixes(config)}",
    )


def check_validations(
    config: Config, validations: Sequence[Sequence[float]], warmup: int, unigram: float
) -> Diagnosis | None:
    """At a validation: `validations` are (step, training NLL of the latest logged window,
    validation NLL, BLEU) of the run's validations, oldest first; `warmup` the warm-up's
    length in updates; `unigram` the training targets' unigram entropy."""
    k = config.train.health_patience
    judged = [v for v in validations if v[0] > warmup][-k:]
    if len(judged) < k or not unigram:
        return None
    floor = UNIGRAM_SHARE * unigram
    for _, train_nll, valid_nll, bleu in judged:
        if bleu >= BLEU_FLOOR or not (train_nll >= floor and valid_nll >= floor):  # NaN: no
            return None
    (first, train_first, nll_first, _), (last, train_last, nll, _) = judged[0], judged[-1]
    if nll < (1 - PROGRESS) * nll_first or train_last < (1 - TRAIN_PROGRESS) * train_first:
        return None  # still learning
    cause = (
        "as a post-norm model warmed up too briefly for its learning rate does"
        if not config.model.norm_first
        else "likely a learning rate too high for its warm-up"
    )
    return Diagnosis(
        "collapsed",
        f"collapsed: BLEU below {BLEU_FLOOR:g} in {k} validations from step {first:.0f} to "
        f"{last:.0f}, and a loss no better than guessing the target's token frequencies "
        f"(NLL {nll:.2f} against their entropy {unigram:.2f}): the model ignores the source, "
        f"{cause}; {_fixes(config)}",
    )


class Checks:
    """The checks of a training session over the run's `Vitals`, called where the trainer
    reads numbers anyway; `found` is the first diagnosis, which stops the run."""

    def __init__(self, config: Config, vitals: Vitals, unigram: float) -> None:
        self.config, self.vitals, self.unigram = config, vitals, unigram
        self.on = config.train.health_checks  # all but `diverged`, which is always on
        self.found: Diagnosis | None = None
        self.bad_updates = 0  # non-finite losses in a row
        # gradient norms (before clipping) of this log window, on the device until logged:
        # reading each after its update would wait for the GPU every update
        self.norms: list[torch.Tensor] = []

    @property
    def diverged(self) -> bool:
        """Whether the run diverged: its weights may not be numbers, keep the last good ones."""
        return self.found is not None and self.found.check == "diverged"

    def counted(self, grad_norm: torch.Tensor | None) -> None:
        """After an update that counted, with its gradient norm where one was measured."""
        self.bad_updates = 0
        if grad_norm is not None:
            self.norms.append(grad_norm)

    def skipped(self, step: int) -> None:
        """After update `step`, skipped for a loss that is not a finite number."""
        self.bad_updates += 1
        self._keep(diverged(self.config, step, self.bad_updates))

    def window_grad_norm(self, step: int, train_nll: float) -> dict[str, float]:
        """At a training log line: the window's mean gradient norm, as its record's field
        (none where none was measured), once the checks have judged it."""
        grad_norm = float(torch.stack(self.norms).double().mean()) if self.norms else None
        self.vitals.logged(train_nll, grad_norm)
        self.norms = []
        if self.on:
            self._keep(check_gradients(self.config, step, self.vitals.grad_norms))
        return {"grad_norm": grad_norm} if grad_norm is not None else {}

    def validated(self, step: int, nll: float, bleu: float, warmup: int) -> None:
        self.vitals.validated(step, nll, bleu)
        if self.on:
            found = check_validations(self.config, self.vitals.validations, warmup, self.unigram)
            self._keep(found)

    def _keep(self, found: Diagnosis | None) -> None:
        if found and not self.found:
            self.found = found
            self.vitals.stopped, self.vitals.patience = (
                found.check,
                self.config.train.health_patience,
            )
