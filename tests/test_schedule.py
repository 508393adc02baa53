"""The learning-rate schedule and its horizon fitted to a wall-clock budget, on a fake clock:
no test here waits for real time."""

from __future__ import annotations

import itertools
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from test_train import tiny_config, weights

from mt import checkpoint
from mt.config import Config, TrainConfig
from mt.errors import ConfigError
from mt.schedule import fit_horizon, learning_rate, time_fitted, warmup_updates
from mt.train import Trainer


def decaying(schedule: str, **train) -> Config:
    cfg = Config()
    cfg.train = TrainConfig(schedule=schedule, lr=1e-3, max_minutes=20, **train)
    return cfg


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
@pytest.mark.parametrize("horizon", [7, 100, 2468])
def test_decay_is_monotone_after_warmup_and_ends_at_the_floor(schedule, horizon):
    cfg = decaying(schedule, warmup_fraction=0.1, min_lr=1e-5)
    warmup = warmup_updates(cfg.train, horizon)
    assert warmup == max(1, round(0.1 * horizon))
    rates = [learning_rate(s, cfg, horizon) for s in range(1, horizon + 1)]
    assert all(a < b for a, b in itertools.pairwise(rates[:warmup]))  # warm-up rises
    assert rates[warmup - 1] == pytest.approx(1e-3)  # to the peak
    assert all(a >= b for a, b in itertools.pairwise(rates[warmup - 1 :]))  # then decays
    assert rates[-1] == pytest.approx(1e-5)  # the last update runs at the floor
    assert learning_rate(horizon + 50, cfg, horizon) == pytest.approx(1e-5)


def test_warmup_in_updates_is_capped_at_half_a_short_horizon():
    t = TrainConfig(schedule="cosine", warmup_steps=200, max_minutes=5)
    assert warmup_updates(t, 2400) == 200
    assert warmup_updates(t, 300) == 150
    assert warmup_updates(TrainConfig(warmup_fraction=0.1), 0) == 0  # not known yet
    assert learning_rate(1, decaying("cosine", warmup_fraction=0.1), 0) == 0.0


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


def test_config_errors_of_a_budget():
    from mt.config import load_config

    base = ["data.source=hub", "train.schedule=cosine", "train.max_steps=0"]
    with pytest.raises(
        ConfigError, match=r"train.schedule: cosine decays .* set train.max_minutes"
    ):
        load_config("tiny.yaml", [*base, "train.max_minutes=0"])
    with pytest.raises(ConfigError, match=r"train.max_minutes: must not be negative"):
        load_config("tiny.yaml", [*base, "train.max_minutes=-1"])
    with pytest.raises(ConfigError, match=r"train.warmup_fraction: must be in \[0, 0.5\]"):
        load_config("tiny.yaml", [*base, "train.max_minutes=1", "train.warmup_fraction=0.9"])
    with pytest.raises(ConfigError, match=r"train.min_lr: 0.5 is above the peak"):
        load_config("tiny.yaml", [*base, "train.max_minutes=1", "train.min_lr=0.5"])


# ----------------------------------------------------------------------------- on a fake clock


class FakeClock:
    """Seconds as a function of the updates started: update s costs 1 + (s % 5) / 4 seconds,
    so the pace changes and the horizon must be re-estimated; validations and saves cost
    nothing. With `stop_at`, SIGINT arrives during that update, as from a person."""

    def __init__(self, stop_at: int = 0):
        self.started, self.stop_at = 0, stop_at

    def watch(self, trainer: Trainer) -> None:
        self.started = trainer.state.step
        trainer.on_update.append(self.updated)

    def updated(self, update, batches) -> None:
        self.started += 1
        if self.started == self.stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    def __call__(self) -> float:
        return float(sum(1 + (s % 5) / 4 for s in range(1, self.started + 1)))


def budget_run(corpus: Path, run: Path, stop_at: int = 0, minutes: float = 1.0):
    config = tiny_config(
        corpus, run, "train.max_steps=0", f"train.max_minutes={minutes}",
        "train.schedule=cosine", "train.warmup_fraction=0.1", "train.min_lr=1e-4",
        "train.eval_every=8", "train.save_every=8", "train.log_every=1",
    )  # fmt: skip
    clock = FakeClock(stop_at)
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
