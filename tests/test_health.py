"""Health checks as pure functions, on histories measured on the CPU (Tatoeba files, 6+6
layers at d_model 64, lr 5e-3 and 10 warm-up updates): post-norm collapsed, pre-norm learned."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from test_train import metric_lines

from mt import checkpoint
from mt.config import Config, load_config
from mt.errors import ConfigError
from mt.health import (
    check_gradients,
    check_validations,
    diverged,
    unigram_entropy,
)

UNIGRAM = 5.930  # entropy of the Tatoeba training targets' tokens, 2,000-token vocabulary
# (step, training NLL, validation NLL, BLEU) every 50 updates
POST_NORM = [
    (50, 6.11, 6.019, 0.01),
    (100, 6.03, 6.0, 0),
    (150, 5.87, 5.999, 0),
    (200, 6.05, 5.983, 0),
]
PRE_NORM = [
    (50, 5.77, 5.606, 0.2),
    (100, 5.4, 5.383, 0),
    (150, 5.05, 5.247, 0.06),
    (200, 5.27, 5.141, 0.06),
]
POST_NORM_100 = [(150, 5.81, 5.892, 0.0), (200, 5.86, 5.725, 0.16), (250, 5.58, 5.682, 0.0)]
# (100 warm-up updates)


def config(norm_first: bool = False, **train) -> Config:
    cfg = Config()
    cfg.model.norm_first = norm_first
    for key, value in train.items():
        setattr(cfg.train, key, value)
    return cfg


def test_unigram_entropy_counts_the_end_of_each_sentence():
    targets = [np.array([4, 5]), np.array([6])]  # with the end token 3: 3, 3, 4, 5, 6
    p = np.array([2, 1, 1, 1]) / 5
    assert unigram_entropy(targets, 3) == pytest.approx(-(p * np.log(p)).sum())
    assert unigram_entropy([np.array([7])] * 3, 3) == pytest.approx(math.log(2))


def test_a_collapsed_post_norm_run_is_called_at_the_third_validation():
    cfg = config()
    assert check_validations(cfg, POST_NORM[:2], 10, UNIGRAM) is None  # not yet 3 of them
    found = check_validations(cfg, POST_NORM[:3], 10, UNIGRAM)
    assert found.check == "collapsed" and "\n" not in found.message
    assert "from step 50 to 150" in found.message and "NLL 6.00 against" in found.message
    assert "model.norm_first=true" in found.message and "train.warmup_steps" in found.message
    assert "norm_first" not in check_validations(config(True), POST_NORM, 10, UNIGRAM).message


def test_a_learning_run_is_never_called_collapsed():
    for end in range(1, len(PRE_NORM) + 1):
        assert check_validations(config(True), PRE_NORM[:end], 10, UNIGRAM) is None
    assert check_validations(config(), POST_NORM_100, 100, UNIGRAM) is None


@pytest.mark.parametrize(
    "history, warmup",
    [
        (POST_NORM[:3], 50),  # validations during the warm-up are not judged
        ([*POST_NORM[:2], (150, 5.9, 5.999, 1.5)], 10),  # it translates something
        ([(50, 6, 6.1, 0), (100, 6, 6.0, 0), (150, 6, 5.9, 0)], 10),  # still falling (3%)
        ([(50, 6.2, 6, 0), (100, 6.0, 6, 0), (150, 5.8, 6, 0)], 10),  # training NLL: 6%
        ([(50, 6, 6.0, 0), (100, 6, 6.0, 0), (150, 6, 5.3, 0)], 10),  # below 0.9 x unigram
        ([(50, 6, 6.0, 0), (100, 6, 6.0, 0), (150, 3, 6.0, 0)], 10),  # over-fits: it learns
        ([(50, 6, 6.0, 0), (100, 6, 6.0, 0), (150, math.nan, 6.0, 0)], 10),  # no log yet
    ],
)
def test_each_condition_of_a_collapse_is_needed(history, warmup):
    assert check_validations(config(), history, warmup, UNIGRAM) is None


def test_health_patience_is_the_number_of_validations_judged():
    assert check_validations(config(health_patience=4), POST_NORM[:3], 10, UNIGRAM) is None
    assert check_validations(config(health_patience=4), POST_NORM, 10, UNIGRAM)


def test_gradient_norms_that_explode_or_are_not_finite():
    usual = [1.0, 0.8, 1.2, 0.9]
    assert check_gradients(config(), 500, [*usual, 50.0]) is None
    found = check_gradients(config(), 500, [*usual, 150.0])
    assert found.check == "exploded" and "150 at step 500, 158 times its usual 0.95" in (
        found.message
    )
    assert "train.clip_norm" in found.message
    assert "clip_norm" not in check_gradients(config(clip_norm=1.0), 5, [*usual, 150.0]).message
    assert check_gradients(config(), 5, [0.1, 150.0]) is None  # too little history
    assert check_gradients(config(), 5, [math.inf]).check == "diverged"
    assert "was nan at step 5" in check_gradients(config(), 5, [*usual, math.nan]).message


def test_non_finite_losses_in_a_row_diverge():
    assert diverged(config(), 7, 4) is None
    found = diverged(config(), 7, 5)
    assert found.check == "diverged" and "5 updates in a row at step 7" in found.message


@pytest.mark.parametrize(
    "item, message",
    [
        ("train.health_patience=0", "train.health_patience: must be positive, got 0"),
        ("train.health_checks=maybe", "train.health_checks: expected true or false"),
    ],
)
def test_health_settings_out_of_range(item, message):
    with pytest.raises(ConfigError, match=message):
        load_config("tiny.yaml", ["data.source=hub", item])


# ----------------------------------------------------------------------------- in training

# A deep post-norm model, warmed up for 5 updates to a high rate: on the tiny corpus it
# collapses (training loss flat at the unigram level from update ~20, BLEU 0); pre-norm, the
# same settings learn (training NLL 5.3 at update 10, 3.5 at 60, BLEU 4.4 at 100).
DEEP = (
    "model.encoder_layers=6", "model.decoder_layers=6", "train.lr=0.03",
    "train.warmup_steps=5", "train.clip_norm=1.0", "train.max_steps=100",
    "train.eval_every=10", "train.log_every=10", "train.save_every=1000",
)  # fmt: skip


def train_args(corpus: Path, run: Path, *extra: str) -> list[str]:
    args = [f"data.files.train={corpus}", f"run.dir={run}", "data.valid_size=8",
            "data.test_size=8", "train.max_tokens=200", "train.eval_sentences=4",
            "train.eval_examples=0", *DEEP, *extra]  # fmt: skip
    return ["train", "--config", "tiny.yaml", *(a for item in args for a in ("--set", item))]


def test_a_collapsing_run_stops_with_a_diagnosis_and_exit_3(corpus_file, tmp_path, cli_main):
    run = tmp_path / "run"
    code, _, err = cli_main(*train_args(corpus_file, run))
    assert code == 3
    last = err.strip().splitlines()[-1]
    assert last.startswith("mt: error: collapsed: BLEU below 1 in 3 validations from step ")
    assert "model.norm_first=true" in last
    fired = [r for r in metric_lines(run) if r["kind"] == "health"]
    assert len(fired) == 1 and fired[0]["check"] == "collapsed"
    assert fired[0]["step"] <= 60  # within 6 validations of a 100-update run
    saved = checkpoint.load_trainer_state(run / "checkpoints" / "last")
    assert saved["state"]["step"] == fired[0]["step"]  # what was there is saved
    assert saved["state"]["vitals"]["stopped"] == "collapsed"
    # resumed as it was, it is refused; resumed anyway, it goes on
    code, _, err = cli_main(*train_args(corpus_file, run))
    assert code == 2 and "the health check 'collapsed' stopped this run" in err
    assert "--set train.health_checks=false" in err
    anyway = ("train.health_checks=false", f"train.max_steps={fired[0]['step'] + 10}")
    code, _, err = cli_main(*train_args(corpus_file, run, *anyway))
    assert code == 0 and "reached train.max_steps" in err


def test_the_same_run_pre_norm_learns_and_is_not_stopped(corpus_file, tmp_path, cli_main):
    pre_norm = ("model.norm_first=true", "train.max_steps=60")  # 6 validations
    code, _, err = cli_main(*train_args(corpus_file, tmp_path / "run", *pre_norm))
    assert code == 0 and "reached train.max_steps (60)" in err
    assert not [r for r in metric_lines(tmp_path / "run") if r["kind"] == "health"]
