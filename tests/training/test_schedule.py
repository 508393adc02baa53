"""The learning-rate schedule and its horizon fitted to a wall-clock budget, on a fake clock:
no test here waits for real time."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
from pathlib import Path

import pytest
import torch

from helpers.runs import after_each_update, tiny_config, weights
from mt import checkpoint
from mt.config import Config, TrainConfig
from mt.errors import ConfigError
from mt.training.budget import Horizon, fit_horizon, time_fitted
from mt.training.schedule import learning_rate, warmup_updates
from mt.training.trainer import Trainer


def decaying(schedule: str, norm_first: bool = True, **train) -> Config:
    cfg = Config()
    cfg.model.norm_first = norm_first
    cfg.train = TrainConfig(schedule=schedule, lr=1e-3, max_minutes=20, **train)
    return cfg


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
@pytest.mark.parametrize("horizon", [7, 100, 2468])
def test_decay_is_monotone_after_warmup_and_ends_at_the_floor(schedule, horizon):
    cfg = decaying(schedule, warmup_fraction=0.1, min_lr=1e-5)
    warmup = warmup_updates(cfg, horizon)
    assert warmup == max(1, round(0.1 * horizon))
    rates = [learning_rate(s, cfg, horizon) for s in range(1, horizon + 1)]
    assert all(a < b for a, b in itertools.pairwise(rates[:warmup]))  # warm-up rises
    assert rates[warmup - 1] == pytest.approx(1e-3)  # to the peak
    assert all(a >= b for a, b in itertools.pairwise(rates[warmup - 1 :]))  # then decays
    assert rates[-1] == pytest.approx(1e-5)  # the last update runs at the floor
    assert learning_rate(horizon + 50, cfg, horizon) == pytest.approx(1e-5)


def test_warmup_in_updates_is_capped_at_half_a_short_horizon():
    cfg = decaying("cosine", warmup_steps=200)
    assert warmup_updates(cfg, 2400) == 200
    assert warmup_updates(cfg, 300) == 150
    assert warmup_updates(decaying("cosine", warmup_fraction=0.1), 0) == 0  # not known yet
    assert learning_rate(1, decaying("cosine", warmup_fraction=0.1), 0) == 0.0


def test_a_post_norm_model_warms_up_for_warmup_steps_at_least():
    post = decaying("cosine", norm_first=False, warmup_fraction=0.05, warmup_steps=4000)
    assert warmup_updates(post, 8350) == 4000  # not the 417 that collapsed base.yaml's model
    assert warmup_updates(post, 6000) == 3000  # at most half the horizon
    assert warmup_updates(post, 200_000) == 10_000  # the fraction, when it is longer
    pre = decaying("cosine", warmup_fraction=0.05, warmup_steps=4000)
    assert warmup_updates(pre, 8350) == 418


def test_floor_holds_for_the_other_schedules():
    cfg = decaying("inverse_sqrt", warmup_steps=10, min_lr=1e-4)
    assert learning_rate(10**9, cfg) == pytest.approx(1e-4)


def test_fit_horizon_leaves_room_for_validations_saves_and_the_final_ones():
    t = TrainConfig(schedule="cosine", max_minutes=10, eval_every=100, save_every=100)
    # 600 s, 1 s an update, 10 s per validation and save: 600 - 20 = 580 s left for updates
    # that cost 1.2 s each with their share of the periodic ones
    assert fit_horizon(t, 0, 0.0, 1.0, 10.0, 10.0) == 483
    assert fit_horizon(t, 300, 590.0, 1.0, 10.0, 10.0) == 300  # out of time: stop now
    assert time_fitted(t) and not time_fitted(TrainConfig(schedule="cosine", max_steps=9))


def rises_after_the_peak(rates: list[float]) -> float:
    """The largest relative increase of the rate from one update to the next after its peak."""
    after = rates[rates.index(max(rates)) :]
    return max(b / a - 1 for a, b in itertools.pairwise(after))


def test_a_noisy_clock_moves_the_horizon_but_never_the_rate_back_up():
    """Update times drawn from a wide distribution, as a GPU's vary with the batches' shapes:
    the horizon's estimates swing, yet after the warm-up the rate never rises from one
    update to the next, the budget is filled and the last update runs at the floor."""
    cfg = decaying("cosine", warmup_fraction=0.05, min_lr=1e-5, eval_every=500, save_every=500)
    t, rng = cfg.train, random.Random(0)
    for moves in (False, True):  # False: what the horizon's naive re-fits did to the rate
        horizon, step, elapsed, rates, fits = Horizon(), 0, 0.0, [], []
        while not horizon.reached(step) and elapsed < t.max_minutes * 60:
            rates.append(horizon.rate(step + 1, cfg))
            seconds = 0.05 * rng.lognormvariate(0, 0.8)
            step, elapsed = step + 1, elapsed + seconds
            horizon.timed_update(seconds)
            if step % t.eval_every == 0:  # a validation and a save: 3 s
                horizon.validate_s, horizon.save_s = 2.0, 1.0
                elapsed += 3.0
            at = horizon.propose(t, step, elapsed, step)
            if at and at != horizon.at:
                fits.append(at)
                horizon.move(cfg, step, at) if moves else setattr(horizon, "at", at)
        late = fits[len(fits) // 10 :]
        assert max(late) / min(late) > 1.05  # the estimates swing by more than 5%
        if not moves:
            assert rises_after_the_peak(rates) > 0.05  # so did the rate, up to this
    assert rises_after_the_peak(rates) <= 0.01
    filled = (elapsed + horizon.validate_s + horizon.save_s) / (t.max_minutes * 60)
    assert 0.97 <= filled <= 1.01  # with the final validation and save
    assert step == horizon.at and rates[-1] == pytest.approx(t.min_lr)


def test_only_the_first_horizon_warns_of_a_shortened_warm_up():
    post = decaying("cosine", norm_first=False, warmup_steps=100)
    horizon = Horizon()
    warning = horizon.move(post, 0, 60)
    assert warning.startswith("warning: about 60 updates fit in train.max_minutes (20); ")
    assert "shortened from 100 to 30 updates" in warning and "post-norm" in warning
    assert horizon.move(post, 10, 50) == ""  # moved again: said once
    pre = decaying("cosine", warmup_fraction=0.1, warmup_steps=100)  # a fraction: no floor
    assert Horizon().move(pre, 0, 60) == "" and Horizon().move(post, 0, 400) == ""


def test_the_clock_keeps_a_reserve_for_the_final_validation_and_save_unless_fitted():
    horizon = Horizon(validate_s=5.0, save_s=3.0)
    fixed = TrainConfig(max_minutes=1, max_steps=100)  # noam: the horizon is not the budget
    assert not horizon.out_of_time(fixed, 51.9) and horizon.out_of_time(fixed, 52.0)
    fitted = TrainConfig(schedule="cosine", max_minutes=1)  # the fit keeps the reserve
    assert not horizon.out_of_time(fitted, 59.9) and horizon.out_of_time(fitted, 60.0)
    assert not horizon.out_of_time(TrainConfig(max_steps=100), 1e9)  # no budget


def test_a_session_starts_by_refusing_a_spent_budget_or_refitting_a_grown_one():
    t = TrainConfig(schedule="cosine", max_minutes=2)
    with pytest.raises(ConfigError, match=r"train.max_minutes: 2 is spent: .* 2.5 minutes"):
        Horizon().start(t, 10, 150.0)
    horizon = Horizon(at=10, update_times=[6.0], since_step=8, since_progress=0.5)
    assert horizon.start(t, 10, 60.0) == "train.max_minutes grew to 2: about 20 updates"
    # 60 s left at 6 s an update; the decay is the longer budget's from the start
    assert (horizon.at, horizon.since) == (20, (0, 0.0))
    assert Horizon(at=30, update_times=[6.0]).start(t, 10, 60.0) == ""  # not reached: goes on


def test_config_errors_of_a_budget():
    from mt.config_file import load_config

    base = ["data.source=hub", "train.schedule=cosine", "train.max_steps=0"]
    with pytest.raises(
        ConfigError, match=r"train.schedule: cosine decays .* set train.max_minutes"
    ):
        load_config("tiny.yaml", [*base, "train.max_minutes=0"])
    with pytest.raises(ConfigError, match=r"train.max_minutes: must not be negative"):
        load_config("tiny.yaml", [*base, "train.max_minutes=-1"])
    with pytest.raises(ConfigError, match=r"train.warmup_fraction: must be in \[0, 0.5\]"):
        load_config("tiny.yaml", [*base, "train.max_minutes=1", "train.warmup_fraction=0.9"])
    with pytest.raises(ConfigError, match=r"warmup_fraction: is a fraction of a horizon, which"):
        load_config("tiny.yaml", ["data.source=hub", "train.warmup_fraction=0.1"])
    with pytest.raises(ConfigError, match=r"train.min_lr: 0.5 is above the peak"):
        load_config("tiny.yaml", [*base, "train.max_minutes=1", "train.min_lr=0.5"])


# ----------------------------------------------------------------------------- on a fake clock


class FakeClock:
    """Seconds as a function of the updates started: update s costs 1 + (s % 5) / 4 seconds,
    so the pace changes and the horizon must be re-estimated; validations and saves cost
    nothing. With `stop_at`, SIGINT arrives during that update, as from a person."""

    def __init__(self, stop_at: int = 0, noisy: bool = False):
        self.started, self.stop_at = 0, stop_at
        # noisy: from 0.2 to 2 s an update, 3 times as slow for the first 12 (a machine that
        # speeds up: the horizon's estimates grow)
        noise = lambda s: random.Random(s).uniform(0.2, 2.0) * (3 if s <= 12 else 1)  # noqa: E731
        self.cost = noise if noisy else None

    def watch(self, trainer: Trainer) -> None:
        self.started = trainer.state.step
        after_each_update(trainer, self.updated)

    def updated(self, update, batches) -> None:
        self.started += 1
        if self.started == self.stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    def __call__(self) -> float:
        cost = self.cost or (lambda s: 1 + (s % 5) / 4)
        return float(sum(cost(s) for s in range(1, self.started + 1)))


def budget_run(
    corpus: Path, run: Path, stop_at: int = 0, minutes: float = 1.0, noisy: bool = False
):
    config = tiny_config(
        corpus, run, "train.max_steps=0", f"train.max_minutes={minutes}",
        "train.schedule=cosine", "train.warmup_fraction=0.1", "train.min_lr=1e-4",
        "train.eval_every=8", "train.save_every=8", "train.log_every=1",
    )  # fmt: skip
    clock = FakeClock(stop_at, noisy)
    trainer = Trainer(config, clock=clock)
    clock.watch(trainer)
    return trainer, trainer.run()


def records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_budget_run_ends_at_the_floor_inside_the_budget(corpus_file, tmp_path):
    trainer, result = budget_run(corpus_file, tmp_path / "run")
    state = trainer.state
    assert "fit in 1 minutes" in result["reason"]
    assert state.step == state.horizon.at and 30 <= state.step <= 60  # ~1.5 s an update
    assert state.elapsed <= 60.0
    train = records(tmp_path / "run", "train")
    assert train[-1]["step"] == state.step and train[-1]["lr"] == pytest.approx(1e-4)
    fits = records(tmp_path / "run", "horizon")
    assert len(fits) >= 3 and fits[-1]["horizon"] == state.horizon.at  # re-estimated as it ran
    saved = checkpoint.load_trainer_state(tmp_path / "run" / "checkpoints" / "last")
    assert saved["state"]["horizon"]["at"] == state.horizon.at


def test_a_budget_run_on_a_noisy_clock_decays_without_climbing_back(corpus_file, tmp_path):
    trainer, _ = budget_run(corpus_file, tmp_path / "run", noisy=True)
    train, fits = records(tmp_path / "run", "train"), records(tmp_path / "run", "horizon")
    assert len({r["horizon"] for r in fits[4:]}) >= 3  # the horizon moved after the warm-up
    assert rises_after_the_peak([r["lr"] for r in train]) <= 0.01
    assert train[-1]["lr"] == pytest.approx(1e-4) and trainer.state.elapsed <= 60.0


def test_a_stopped_and_resumed_budget_run_equals_the_uninterrupted_one(corpus_file, tmp_path):
    straight, _ = budget_run(corpus_file, tmp_path / "straight")
    stopped, result = budget_run(corpus_file, tmp_path / "resumed", stop_at=13)
    assert result["signal"] == "SIGINT" and stopped.state.step == 13
    saved = checkpoint.load_trainer_state(tmp_path / "resumed" / "checkpoints" / "last")
    resumed, _ = budget_run(corpus_file, tmp_path / "resumed")
    assert saved["state"]["horizon"]["at"] == stopped.state.horizon.at > 0
    assert resumed.state.step == resumed.state.horizon.at == straight.state.horizon.at
    assert resumed.state.elapsed == pytest.approx(straight.state.elapsed)
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    fits = [(r["step"], r["horizon"]) for r in records(tmp_path / "straight", "horizon")]
    assert fits == [(r["step"], r["horizon"]) for r in records(tmp_path / "resumed", "horizon")]


def test_a_budget_already_spent_is_refused(corpus_file, tmp_path):
    budget_run(corpus_file, tmp_path / "run", minutes=0.5)
    with pytest.raises(ConfigError, match=r"train.max_minutes: 0.25 is spent: .* 0.5 minutes"):
        budget_run(corpus_file, tmp_path / "run", minutes=0.25)
    trainer, result = budget_run(corpus_file, tmp_path / "run", minutes=1)  # more: goes on
    assert trainer.state.elapsed > 30 and "fit in 1 minutes" in result["reason"]
