"""The learning-rate schedule: the paper's (noam), inverse square root, or a warm-up then a
decay (cosine or linear) from `train.lr` to `train.min_lr` at a horizon: `train.max_steps`
when it is set, else the updates that fit in `train.max_minutes` (mt.training.budget).
"""

from __future__ import annotations

import math

from ..config import Config


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
