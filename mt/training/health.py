"""Health checks: a run that collapsed or diverged stops with a diagnosis, instead of spending
its budget and exiting 0 as if it had learned.

They are judged where the trainer reads numbers to the host anyway (an update's loss, a
training log line, a validation), from a short history kept in the training state, so a
resumed run judges as the uninterrupted one would. A check that fires returns a `Diagnosis`:
its name, for `metrics.jsonl`, and one line naming what was seen, the likely cause and the
setting to change.

- diverged: the loss was not a finite number in MAX_BAD_UPDATES updates in a row, or a logged
  window's gradient norm was not; or the validation NLL ran away from its best: over RUNAWAY
  nats above the best before them in each of the last RUNAWAY_VALIDATIONS validations, all
  after the warm-up, whatever the training NLL does (a model that memorises its training
  targets lowers it all the same).
- exploded: a logged window's mean gradient norm is EXPLOSION times the median of the earlier
  ones: the updates are about to wreck the weights (none was seen in the runs measured:
  the bound is loose on purpose).
- collapsed: the model ignores its source, and has for a real share of the run: in every
  validation (at least `train.health_patience`) of the last WINDOW_SHARE of the updates so far
  (MIN_WINDOW at least, all after the warm-up) it translates nothing (BLEU below BLEU_FLOOR)
  and predicts the validation targets as well from other sentences' sources as from their own
  (the source gap, the validation NLL with the sources shuffled among the sentences less the
  true one, within SOURCE_GAP nats of 0). The verdict rests on these two; learning delays it:
  a young model whose training and validation NLL both fell TRAIN_PROGRESS or more across
  that window is given time. A training NLL that falls alone does not clear a run: with its
  validation NLL flat or rising, it is the decoder memorising the training targets.
  The failure it catches: a post-norm Transformer warmed up too briefly for its learning
  rate stops using the source for good (Xiong et al. 2020, "On Layer Normalization in the
  Transformer Architecture"). Measured on the Tatoeba files (CPU; validation is in float32,
  so a model that ignores its source has a gap of rounding error), see docs/benchmarks.md
  ("Health checks"): collapsed runs kept a gap of 1e-8 to 7.5e-6 nats; the healthy runs had a
  gap of 7.6e-5 at the least (deep pre-norm models use their source late: 3e-4 for 150
  updates). Over a window judged, the training NLL of healthy runs whose gap was below 0.002
  fell 2.3% at least and their validation NLL 4.5% at least; that of collapsed runs 0.9% and
  1.1% at most, but a run that memorised its training targets (issue 37) lowered its training
  NLL 1.7% to 3.6% per window while its validation NLL rose 19% to 33%.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config import Config, TrainConfig
from ..data.store import Sentences, added
from ..errors import ConfigError

History = Sequence[Sequence[float]]  # (step, ...) records, oldest first

MAX_BAD_UPDATES = 5  # consecutive non-finite losses before the run is called diverged
EXPLOSION = 100.0  # a window's gradient norm this many times the earlier median has exploded
BLEU_FLOOR = 1.0  # validation BLEU below this translates nothing
SOURCE_GAP = 2e-5  # nats: a source gap within this of 0, the source is not used (collapsed
# runs: 4e-6 at most, 7.5e-6 as a late collapse set in; healthy ones: 7.6e-5 at the least)
# the window judged: this share of the updates so far, and at least this many updates
WINDOW_SHARE, MIN_WINDOW = 1 / 3, 50
TRAIN_PROGRESS = 0.015  # an NLL that fell less than this fraction across the window judged
# is not learning (training: the mean of the first third of the window's logged NLLs against
# the last third's; validation: its first against its last): collapsed runs fell 0.9% and
# 1.1% at most, healthy ones whose gap was small 2.3% and 4.5% at least
# a validation NLL over RUNAWAY nats above its best (a perplexity 2.1 times) in this many
# validations in a row ran away: healthy runs, 2 in a row, stayed below their best or rose
# 0.05 at most 9 epochs past it, 0.53 at 35 epochs past it (a model overfitting 1,000 pairs
# without dropout or label smoothing); the two runs that ran away were 1.12 and 1.22 nats
# above it at the second validation that rose above it
RUNAWAY, RUNAWAY_VALIDATIONS = 0.75, 2


@dataclass
class Vitals:
    """What the checks judge, kept in the training state: a resumed run judges alike."""

    train_nlls: list[list[float]] = field(default_factory=list)  # (step, NLL) of logged windows
    grad_norms: list[float] = field(default_factory=list)  # mean of the latest logged windows
    validations: list[list[float]] = field(default_factory=list)  # (step, NLL, shuffled, BLEU)
    stopped: str = ""  # the check that stopped the run ("": none)
    patience: int = 0  # train.health_patience when it stopped

    KEEP = 50  # logged gradient norms remembered (their median is the usual one)
    KEEP_LOGS = 400  # training NLLs and validations remembered, every other one dropped
    # beyond: the window judged is a share of the whole run

    @staticmethod
    def from_dict(saved: dict) -> Vitals:
        """As saved in a checkpoint; one saved before the source gap was measured judges
        from its next validations."""
        saved = {k: v for k, v in saved.items() if k != "train_nll"}
        if saved.get("validations") and len(saved["validations"][0]) == 4:
            saved["validations"] = []  # (step, train NLL, NLL, BLEU): no source gap
        return Vitals(**saved)

    def logged(self, step: int, train_nll: float, grad_norm: float | None) -> None:
        self.train_nlls = self._thinned([*self.train_nlls, [step, train_nll]])
        if grad_norm is not None:
            self.grad_norms = [*self.grad_norms[1 - self.KEEP :], grad_norm]

    def validated(self, step: int, nll: float, shuffled: float, bleu: float) -> None:
        self.validations = self._thinned([*self.validations, [step, nll, shuffled, bleu]])

    @classmethod
    def _thinned(cls, history: list[list[float]]) -> list[list[float]]:
        return history if len(history) <= cls.KEEP_LOGS else history[-1::-2][::-1]  # the latest

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


def _fixes(config: Config, clip: bool = False) -> str:
    """The settings that cure an unstable start, the likeliest first; `clip`: updates that
    blew up, which clipping the gradient norm bounds."""
    clip_norm = "set train.clip_norm (1.0), " if clip and not config.train.clip_norm else ""
    post_norm = "set model.norm_first=true (pre-norm), " if not config.model.norm_first else ""
    return f"{clip_norm}{post_norm}lengthen the warm-up (train.warmup_steps) or lower train.lr"


def unigram_entropy(targets: Sentences, end: int) -> float:
    """Entropy in nats of the target tokens' frequencies, each sentence ended by `end` (the
    labels the loss sees): the NLL of a model that ignores the source and the context. From
    the counts the store kept (`Sentences.counts`): no pass over the corpus's tokens."""
    if not len(targets):
        return 0.0
    counts = added(targets.counts(), np.zeros(end + 1, np.int64))
    counts[end] += len(targets)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def diverged(config: Config, step: int, bad_updates: int) -> Diagnosis | None:
    """After an update whose loss was not finite (`bad_updates` in a row, at update `step`)."""
    if bad_updates < MAX_BAD_UPDATES:
        return None
    return Diagnosis(
        "diverged",
        f"diverged: the loss was not a finite number in {bad_updates} updates in a row at "
        f"step {step}; {_fixes(config, clip=True)}",
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
    return Diagnosis(
        "exploded",
        f"exploded: the gradient norm reached {norm:.3g} at step {step}, {norm / usual:.0f} "
        f"times its usual {usual:.3g}; {_fixes(config, clip=True)}",
    )


def check_validations(
    config: Config, train_nlls: History, validations: History, warmup: int, unigram: float
) -> Diagnosis | None:
    """At a validation: `train_nlls` are (step, NLL) of the logged training windows,
    `validations` (step, NLL, NLL with shuffled sources, BLEU) of the validations, oldest
    first, this one last; `warmup` the warm-up's length in updates; `unigram` the training
    targets' unigram entropy (for the message)."""
    if not validations:
        return None
    return collapsed(config, train_nlls, validations, warmup, unigram) or ran_away(
        config, train_nlls, validations, warmup
    )


def collapsed(
    config: Config, train_nlls: History, validations: History, warmup: int, unigram: float
) -> Diagnosis | None:
    """The model ignores its source over the window judged (see the module's docstring)."""
    step = validations[-1][0]
    start = step - max(MIN_WINDOW, WINDOW_SHARE * step)
    judged = [v for v in validations if v[0] >= start]
    if start < warmup or len(judged) < config.train.health_patience:
        return None
    for _, nll, shuffled, bleu in judged:
        # a gap either way is a model that reads its source (a small validation set can
        # favour the shuffled sources by chance); NaN: not collapsed
        if not (bleu < BLEU_FLOOR and abs(shuffled - nll) < SOURCE_GAP):
            return None
    trained = [nll for s, nll in train_nlls if s >= start]
    third = len(trained) // 3
    if not third:  # too few logged windows to tell a trend
        return None
    before, after = statistics.fmean(trained[:third]), statistics.fmean(trained[-third:])
    train_fell, valid_fell = 1 - after / before, 1 - judged[-1][1] / judged[0][1]
    # a young model still learning the target language is given time, but only where it
    # learns on the validation targets too: a training NLL that falls while the validation
    # one does not is the decoder memorising the training targets
    if math.isnan(train_fell) or min(train_fell, valid_fell) >= TRAIN_PROGRESS:
        return None
    (first, *_), (_, nll, shuffled, _) = judged[0], judged[-1]
    cause = (
        "as a post-norm model warmed up too briefly for its learning rate does"
        if not config.model.norm_first
        else "likely a learning rate too high for its warm-up"
    )
    frequencies = f", the targets' token frequencies alone {unigram:.2f}" if unigram else ""
    return Diagnosis(
        "collapsed",
        f"collapsed: the model ignores its source: in {len(judged)} validations from step "
        f"{first:.0f} to {step:.0f}, BLEU below {BLEU_FLOOR:g} and a validation NLL as good "
        f"with the sources shuffled among the sentences as with their own ({shuffled:.2f} "
        f"against {nll:.2f}{frequencies}), and a training NLL that {_moved(train_fell)} and a "
        f"validation NLL that {_moved(valid_fell)} over those updates; {cause}; "
        f"{_fixes(config)}",
    )


def ran_away(
    config: Config, train_nlls: History, validations: History, warmup: int
) -> Diagnosis | None:
    """The validation NLL ran away from its best: over RUNAWAY nats above it in each of the
    last RUNAWAY_VALIDATIONS validations, all after the warm-up, whatever the training NLL
    does."""
    latest = validations[-RUNAWAY_VALIDATIONS:]
    if latest[0][0] <= warmup or not above_best(validations) > RUNAWAY:  # NaN: no verdict
        return None
    best_step, best, *_ = _best(validations[:-RUNAWAY_VALIDATIONS])
    (first, *_), (step, *_) = latest[0], latest[-1]
    then = [nll for s, nll in train_nlls if s <= best_step][-1:]
    trained, fits = "", ""
    if then:
        now = train_nlls[-1][1]
        trained = f"; the training NLL went from {then[0]:.2f} to {now:.2f} meanwhile"
        if now < (1 - TRAIN_PROGRESS) * then[0]:  # it fits its training targets instead
            fits = "; or, if it overfits, raise model.dropout or train.label_smoothing"
    return Diagnosis(
        "diverged",
        f"diverged: the validation NLL ran away from its best ({best:.2f} at step "
        f"{best_step:.0f}): {', '.join(f'{v[1]:.2f}' for v in latest)} in the validations "
        f"from step {first:.0f} to {step:.0f}, each over {RUNAWAY:g} nats above it"
        f"{trained}; {_fixes(config, clip=True)}{fits}",
    )


def above_best(validations: History, count: int = 0) -> float:
    """How far, in nats, each of the last `count` (RUNAWAY_VALIDATIONS) validations' NLL is
    above the best before them, at the least; -inf with no validation before them."""
    count = count or RUNAWAY_VALIDATIONS
    if len(validations) <= count:
        return -math.inf
    latest = float(np.min([v[1] for v in validations[-count:]]))  # NaN: no verdict
    return latest - _best(validations[:-count])[1]


def _best(validations: History) -> Sequence[float]:
    """The validation of the least NLL (one that was not a number is not the best)."""
    return min(validations, key=lambda v: math.inf if math.isnan(v[1]) else v[1])


def _moved(fell: float) -> str:
    return f"fell {fell:.1%}" if fell >= 0 else f"rose {-fell:.1%}"


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
        """Whether the run diverged: its weights may not be numbers, or be worse than they were
        (a runaway validation NLL): keep the last good ones."""
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
        self.vitals.logged(step, train_nll, grad_norm)
        self.norms = []
        if self.on:
            self._keep(check_gradients(self.config, step, self.vitals.grad_norms))
        return {"grad_norm": grad_norm} if grad_norm is not None else {}

    def validated(self, step: int, nll: float, shuffled: float, bleu: float, warmup: int) -> None:
        """At a validation: its NLL, the NLL with the sources shuffled, and BLEU."""
        v = self.vitals
        v.validated(step, nll, shuffled, bleu)
        if self.on:
            self._keep(
                check_validations(self.config, v.train_nlls, v.validations, warmup, self.unigram)
            )

    def _keep(self, found: Diagnosis | None) -> None:
        if found and not self.found:
            self.found = found
            self.vitals.stopped, self.vitals.patience = (
                found.check,
                self.config.train.health_patience,
            )
