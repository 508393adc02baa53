"""The learning-rate schedule, and its horizon fitted to a wall-clock budget.

A decaying schedule (cosine or linear) warms up, then decays from `train.lr` to
`train.min_lr` at the horizon: `train.max_steps` when it is set, else the number of updates
that fit in `train.max_minutes` on the machine at hand. That number is re-estimated as the
run goes, from the measured cost of an update, a validation and a save, so that the last
update runs at the floor and the final validation and save end inside the budget, on a fast
machine or a slow one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import ClassVar

from ..config import DECAYING, Config, TrainConfig
from ..errors import ConfigError


def time_fitted(t: TrainConfig) -> bool:
    """True when the horizon is the time budget rather than a step count."""
    return t.schedule in DECAYING and not t.max_steps and t.max_minutes > 0


def warmup_updates(cfg: Config, horizon: int) -> int:
    """Warm-up length: `warmup_fraction` of the horizon, or `warmup_steps` but at most half
    the horizon, so that a short budget still decays; 0 while a fraction has no horizon.

    A post-norm model warms up for `warmup_steps` at least (at most half the horizon) even
    under a fraction: a fraction of a short horizon is too brief a warm-up for it (Xiong et
    al. 2020); see `train.warmup_fraction`."""
    t = cfg.train
    if t.warmup_fraction:
        if not horizon:
            return 0
        least = 1 if cfg.model.norm_first else min(t.warmup_steps, horizon // 2)
        return max(1, round(t.warmup_fraction * horizon), least)
    return max(1, min(t.warmup_steps, horizon // 2)) if horizon else t.warmup_steps


def learning_rate(
    step: int, cfg: Config, horizon: int = 0, since: tuple[int, float] = (0, 0.0)
) -> float:
    """The rate for update `step` (1-based): linear warm-up, then the schedule's decay, which
    for cosine and linear reaches `min_lr` at update `horizon` (0: not known yet).

    `since` is (update, progress) where the decay was when the horizon last moved (see
    `Horizon.move`; (0, 0.0): it has not moved since the warm-up ended): the decay goes on
    from there to the floor in equal steps, so a new horizon changes how fast the rate falls,
    never sends it back up."""
    t, step = cfg.train, max(step, 1)
    if t.schedule == "noam":  # the paper, eq. 3
        rate = t.lr_scale * cfg.model.d_model**-0.5 * min(step**-0.5, step * t.warmup_steps**-1.5)
        return max(rate, t.min_lr)
    warmup = warmup_updates(cfg, horizon)
    if not warmup:  # the first update of a run whose horizon is not measured yet
        return 0.0
    if not since[0] and step <= warmup:
        return t.lr * step / warmup
    if t.schedule == "inverse_sqrt":
        return max(t.lr * (warmup / step) ** 0.5, t.min_lr)
    if not horizon:  # decaying, horizon unknown: only during the first updates of a run
        return t.lr
    progress = decayed(step, warmup, horizon, since)
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if t.schedule == "cosine" else 1 - progress
    return t.min_lr + (t.lr - t.min_lr) * shape


def decayed(step: int, warmup: int, horizon: int, since: tuple[int, float]) -> float:
    """How far the decay is at update `step`, 0 at the peak and 1 at the floor: on a straight
    line from where it was `since` (from the warm-up's end if it has not moved) to 1 at the
    horizon."""
    start, done = since if since[0] else (warmup, 0.0)
    return min(done + (1 - done) * (step - start) / max(horizon - start, 1), 1.0)


def shortened_warmup(cfg: Config, at: int) -> str:
    """The warning of a first horizon `at` that cuts `train.warmup_steps` short ("": it does
    not): to half of it, under a fraction too for a post-norm model (`warmup_updates`)."""
    t, post_norm = cfg.train, not cfg.model.norm_first  # warmup_steps is a post-norm's floor
    warmup = warmup_updates(cfg, at)
    if (t.warmup_fraction and not post_norm) or t.warmup_steps <= warmup:
        return ""
    return (
        f"warning: about {at} updates fit in train.max_minutes ({t.max_minutes:g}); warm-up "
        f"shortened from {t.warmup_steps} to {warmup} updates, half of them"
        + ("; a post-norm model may collapse (model.norm_first=true)" if post_norm else "")
    )


def fit_horizon(
    t: TrainConfig,
    step: int,
    elapsed: float,
    update_s: float,
    validate_s: float,
    save_s: float,
) -> int:
    """The last update that fits in the budget, from `step` updates done in `elapsed`
    seconds: each update to come costs `update_s` plus its share of the periodic validations
    and saves, and the final validation and save must end inside the budget too."""
    left = t.max_minutes * 60 - elapsed - validate_s - save_s
    per_update = update_s + validate_s / t.eval_every + save_s / t.save_every
    return max(step + math.floor(left / max(per_update, 1e-9)), step, 1)


@dataclass
class Horizon:
    """The update at which a decaying schedule reaches its floor, and the costs measured to
    fit it to the budget: decisions of the clock, a part of the training state so that a
    resumed run decides as the uninterrupted one would on the same clock readings."""

    WINDOW: ClassVar[int] = 49  # latest updates whose median is the cost of one: robust to
    # a slow first one
    at: int = 0  # 0: not known yet
    update_times: list[float] = field(default_factory=list)  # seconds of the latest updates
    validate_s: float = 0.0  # seconds the last validation took
    save_s: float = 0.0  # seconds the last save took
    fitted_at: float = 0.0  # training seconds when it was last fitted
    # where the decay was when the horizon last moved after the warm-up (update, progress);
    # 0: it has not
    since_step: int = 0
    since_progress: float = 0.0

    @property
    def since(self) -> tuple[int, float]:
        return self.since_step, self.since_progress

    def rate(self, step: int, cfg: Config) -> float:
        """The learning rate of update `step`."""
        return learning_rate(step, cfg, self.at, self.since)

    def move(self, cfg: Config, step: int, at: int) -> str:
        """The horizon becomes `at` after `step` updates. Once the decay has begun it goes on
        from where it is to the floor at the new horizon: the rate never climbs back, however
        the estimates of an update's cost move (a GPU's vary with the batches' shapes).
        Returns a warning when the first horizon cuts the warm-up short ("" otherwise)."""
        warning = "" if self.at else shortened_warmup(cfg, at)
        warmup = warmup_updates(cfg, self.at)
        if self.at and (self.since_step or step >= warmup):
            self.since_step, self.since_progress = step, decayed(step, warmup, self.at, self.since)
        self.at = at
        return warning

    def record(self, step: int, elapsed: float, budget_s: float) -> dict[str, float]:
        """The "horizon" record of metrics.jsonl: where it is now and the costs it is fitted
        from, after `step` updates in `elapsed` of `budget_s` seconds."""
        return {
            "kind": "horizon",
            "step": step,
            "horizon": self.at,
            "update_s": self.update_s,
            "validate_s": self.validate_s,
            "save_s": self.save_s,
            "elapsed_s": elapsed,
            "budget_s": budget_s,
        }

    def reached(self, step: int) -> bool:
        return bool(self.at) and step >= self.at

    def timed_update(self, seconds: float) -> None:
        self.update_times = [*self.update_times[1 - self.WINDOW :], seconds]

    @property
    def update_s(self) -> float:
        """The cost of an update: the median of the latest."""
        return statistics.median(self.update_times)

    def fit(self, t: TrainConfig, step: int, elapsed: float) -> int:
        """The last update that fits in the budget, from what has been measured so far."""
        return fit_horizon(t, step, elapsed, self.update_s, self.validate_s, self.save_s)

    def start(self, t: TrainConfig, step: int, elapsed: float) -> str:
        """At the start of a session: refuse a budget already spent; `max_steps` is the
        horizon of a decaying schedule, and a budget extended after its horizon was reached
        is fitted again (then a line that says so; "" otherwise)."""
        if t.max_minutes and elapsed >= t.max_minutes * 60:
            raise ConfigError(
                f"train.max_minutes: {t.max_minutes:g} is spent: this run has trained "
                f"{elapsed / 60:.1f} minutes; give a larger budget to go on"
            )
        if t.schedule in DECAYING and t.max_steps:
            self.at = t.max_steps
        elif time_fitted(t) and self.reached(step):
            # more time, asked for: the schedule becomes the longer budget's from the start
            self.at, self.since_step, self.since_progress = self.fit(t, step, elapsed), 0, 0.0
            return f"train.max_minutes grew to {t.max_minutes:g}: about {self.at} updates"
        return ""

    def out_of_time(self, t: TrainConfig, elapsed: float) -> bool:
        """Whether the clock says the budget is spent after `elapsed` training seconds. A
        fitted horizon keeps the reserve for the final validation and save, and the clock is
        only a backstop; otherwise the clock must keep that reserve itself."""
        reserve = 0.0 if time_fitted(t) else self.validate_s + self.save_s
        return bool(t.max_minutes) and t.max_minutes * 60 - elapsed - reserve <= 0

    def propose(self, t: TrainConfig, step: int, elapsed: float, updates: int) -> int:
        """A new horizon when a fit is due (0: keep this one), after `updates` updates of this
        session: after updates 1, 2, 4, ... 64, then every hundredth of the budget."""
        if not time_fitted(t) or (self.reached(step) and updates > 1):
            return 0  # the last update ran at the floor: done (a resume may extend the budget)
        early = step & (step - 1) == 0 and step <= 64
        if not (early or elapsed - self.fitted_at >= t.max_minutes * 60 / 100):
            return 0
        self.fitted_at = elapsed
        return max(self.fit(t, step, elapsed), step + 1)  # the update that ends the run runs
        # at the floor
