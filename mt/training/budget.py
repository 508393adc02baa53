"""A wall-clock budget's horizon: the update at which a decaying schedule reaches its floor,
when `train.max_minutes` rather than `train.max_steps` ends the run. It is re-estimated as the
run goes from the measured cost of an update, a validation and a save, so that the last
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
from .schedule import decayed, learning_rate, warmup_updates


def time_fitted(t: TrainConfig) -> bool:
    """True when the horizon is the time budget rather than a step count."""
    return t.schedule in DECAYING and not t.max_steps and t.max_minutes > 0


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
