"""Training: loss, schedule, exact resume, stopping rules, checkpoints, signals; one process."""

from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess

import pytest
import torch
import torch.nn.functional as F

from helpers.corpus import HELD_OUT, epoch_plan
from helpers.runs import metric_lines, mt_executable, tiny_config, weights
from mt import checkpoint
from mt.config import Config
from mt.config_file import load_config
from mt.data.tokenizer import PAD
from mt.errors import ConfigError, Unhealthy
from mt.training.loss import smoothed_loss
from mt.training.schedule import learning_rate
from mt.training.trainer import Trainer, train

# ----------------------------------------------------------------------------- loss and schedule


def test_smoothed_loss_and_its_gradient_match_torch_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(4, 11, (3, 5))
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    loss, nll = smoothed_loss(logits, target, 0.1)
    (ours,) = torch.autograd.grad(loss, logits)
    flat = logits.flatten(0, 1), target.flatten()
    expected = F.cross_entropy(*flat, ignore_index=PAD, label_smoothing=0.1, reduction="sum")
    (reference,) = torch.autograd.grad(expected, logits)
    plain = F.cross_entropy(*flat, ignore_index=PAD, reduction="sum")
    assert torch.allclose(loss, expected, atol=1e-10)
    assert torch.allclose(nll, plain, atol=1e-10)
    assert torch.allclose(ours, reference, atol=1e-10)  # the hand-written backward
    assert ours[2, 1:].abs().max() == 0  # no gradient through padding


def test_noam_schedule_is_the_papers_formula():
    cfg = Config()
    cfg.train.schedule, cfg.train.warmup_steps, cfg.model.d_model = "noam", 4000, 512
    for step in (1, 100, 4000, 4001, 100000):
        paper = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert learning_rate(step, cfg) == pytest.approx(paper)
    peak = max(range(1, 10000, 7), key=lambda s: learning_rate(s, cfg))
    assert abs(peak - 4000) <= 7


def test_inverse_sqrt_schedule_peaks_at_lr():
    cfg = Config()
    cfg.train.schedule, cfg.train.warmup_steps, cfg.train.lr = "inverse_sqrt", 100, 1e-3
    assert learning_rate(50, cfg) == pytest.approx(5e-4)
    assert learning_rate(100, cfg) == pytest.approx(1e-3)
    assert learning_rate(400, cfg) == pytest.approx(5e-4)


def test_cosine_schedule_warms_up_then_decays_to_zero_at_max_steps():
    cfg = Config()
    cfg.train.schedule, cfg.train.warmup_steps, cfg.train.lr, cfg.train.max_steps = (
        "cosine",
        100,
        1e-3,
        1100,
    )
    assert learning_rate(50, cfg, 1100) == pytest.approx(5e-4)
    assert learning_rate(100, cfg, 1100) == pytest.approx(1e-3)
    assert learning_rate(600, cfg, 1100) == pytest.approx(5e-4)
    assert learning_rate(1100, cfg, 1100) == pytest.approx(0.0, abs=1e-12)
    rates = [learning_rate(s, cfg, 1100) for s in range(100, 1101)]
    assert all(a >= b for a, b in itertools.pairwise(rates))


# ----------------------------------------------------------------------------- runs


def test_run_folder_has_config_tokenizer_metrics_checkpoints(corpus_file, tmp_path):
    run = tmp_path / "run"
    result = train(
        tiny_config(
            corpus_file,
            run,
            "train.max_steps=4",
            "train.eval_every=2",
            "train.save_every=2",
            "train.log_every=1",
        )
    )
    assert result["step"] == 4 and "max_steps" in result["reason"]
    assert load_config(run / "config.yaml").train.max_steps == 4
    assert (run / "tokenizer.json").is_file()
    kinds = [(m["kind"], m["step"]) for m in metric_lines(run)]
    assert kinds.count(("valid", 2)) == 1 and kinds.count(("valid", 4)) == 1
    assert [s for k, s in kinds if k == "train"] == [1, 2, 3, 4]
    ckpts = run / "checkpoints"
    assert (ckpts / "last").resolve().name == "step-00000004"
    assert (ckpts / "best").resolve().parent == ckpts.resolve()
    state = checkpoint.load_trainer_state((ckpts / "last").resolve())  # weights_only load
    assert state["state"]["step"] == 4


# packed: 3 rows of 80 tokens a batch (the default row, 128, is more than tiny's batch)
PACKED = ("train.pack=true", "train.pack_length=80", "train.max_tokens=240")


@pytest.mark.parametrize(
    "layout", [(), PACKED, ("train.ema=0.9",)], ids=["padded", "packed", "averaged"]
)
def test_resume_gives_the_same_weights_as_an_uninterrupted_run(corpus_file, tmp_path, layout):
    common = ("train.eval_every=3", "train.save_every=100", "train.log_every=1", *layout)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny_config(corpus_file, straight, "train.max_steps=8", *common))
    train(tiny_config(corpus_file, resumed, "train.max_steps=5", *common))
    assert not all(
        torch.equal(a, b) for a, b in zip(weights(straight).values(), weights(resumed).values())
    )
    train(tiny_config(corpus_file, resumed, "train.max_steps=8", *common))
    a, b = weights(straight), weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    # train.ema: the weights above are the average; those trained are in the trainer state
    trained = [
        checkpoint.load_trainer_state(r / "checkpoints" / "last") for r in (straight, resumed)
    ]
    assert ("weights" in trained[0]) == ("train.ema=0.9" in layout)
    for key, value in trained[0].get("weights", {}).items():
        assert torch.equal(value, trained[1]["weights"][key]), key
    # the same training curve, minus the stopped run's extra validation at its last step
    drop = ("elapsed_s", "tokens_per_s")
    curves = [
        [
            {k: v for k, v in m.items() if k not in drop}
            for m in metric_lines(run)
            if m["kind"] == "train" or m["step"] % 3 == 0
        ]
        for run in (straight, resumed)
    ]
    assert curves[0] == curves[1] and len(curves[0]) == 10


def test_a_resumed_run_keeps_the_batches_it_was_trained_on(corpus_file, tmp_path, monkeypatch):
    """Packed by `train.pack: auto` on CUDA, resumed on a CPU (where auto pads): still packed."""
    import mt.training.trainer

    run, args = tmp_path / "run", ("train.max_steps=2", "train.max_tokens=240")
    with monkeypatch.context() as cuda:
        cuda.setattr(mt.training.trainer, "row_length", lambda config, device_type: 80)
        train(tiny_config(corpus_file, run, *args))
    assert Trainer(tiny_config(corpus_file, run, *args)).batches.pack_length == 80


def test_a_packed_run_compiles_its_step_once_or_trains_uncompiled(
    corpus_file, tmp_path, monkeypatch, capsys
):
    """Compiled (by a backend that counts graphs), every packed batch of a run is one graph;
    a compiler that fails leaves one warning and a run that trains on, uncompiled."""
    from torch._dynamo.testing import CompileCounter

    def broken(gm, inputs):
        raise RuntimeError("no C++ compiler here")

    compile_, counter = torch.compile, CompileCounter()
    args = ("train.max_steps=6", "train.eval_every=3", "train.compile=true", *PACKED)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=counter, **kw))
    assert train(tiny_config(corpus_file, tmp_path / "counted", *args))["step"] == 6
    assert counter.frame_count == 1  # 6 updates over 3 epochs, validations between them
    assert "compiled the training step in" in capsys.readouterr().err
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=broken, **kw))
    assert train(tiny_config(corpus_file, tmp_path / "broken", *args))["step"] == 6
    err = capsys.readouterr().err
    assert err.count("warning: compiling the training step failed") == 1
    assert "no C++ compiler here" in err and "compiled the training step in" not in err


def test_same_seed_same_metrics(corpus_file, tmp_path):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train(tiny_config(corpus_file, run, "train.max_steps=3", "train.log_every=1"))
    drop = ("elapsed_s", "tokens_per_s")
    a, b = ([{k: v for k, v in m.items() if k not in drop} for m in metric_lines(r)] for r in runs)
    assert a == b and len(a) >= 3


def test_changed_config_is_refused_naming_the_keys_and_restart_starts_over(corpus_file, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(corpus_file, run, "train.max_steps=2"))
    with pytest.raises(ConfigError, match=r"model\.dropout.*--restart"):
        Trainer(tiny_config(corpus_file, run, "train.max_steps=4", "model.dropout=0.2"))
    assert (run / "checkpoints" / "last").resolve().name == "step-00000002"  # untouched
    result = train(
        tiny_config(corpus_file, run, "train.max_steps=1", "model.dropout=0.2"), restart=True
    )
    assert result["step"] == 1
    assert [m["step"] for m in metric_lines(run)] == [1]


def test_early_stopping_and_time_budget(corpus_file, tmp_path):
    # a tiny model's BLEU stays flat: the second validation cannot beat the first
    result = train(
        tiny_config(
            corpus_file,
            tmp_path / "a",
            "train.max_steps=50",
            "train.eval_every=1",
            "train.patience=1",
        )
    )
    assert result["step"] == 2 and "no better validation BLEU" in result["reason"]
    result = train(
        tiny_config(corpus_file, tmp_path / "b", "train.max_steps=0", "train.max_minutes=0.00001")
    )
    assert result["step"] == 1 and "max_minutes" in result["reason"]
    assert (tmp_path / "b" / "checkpoints" / "last").is_dir()


def test_non_finite_losses_are_skipped_then_stop(corpus_file, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    train(tiny_config(corpus_file, run, "train.max_steps=2"))
    good = weights(run)
    import mt.training.loss as mt_loss

    real = mt_loss.smoothed_loss
    calls = {"n": 0}

    def sometimes_nan(logits, target, epsilon, pad):
        calls["n"] += 1
        loss, nll = real(logits, target, epsilon, pad)
        return (loss * math.nan, nll) if calls["n"] == 1 else (loss, nll)

    monkeypatch.setattr(mt_loss, "smoothed_loss", sometimes_nan)
    result = train(tiny_config(corpus_file, run, "train.max_steps=4"))
    assert result["step"] == 4
    assert "non-finite loss" in capsys.readouterr().err

    monkeypatch.setattr(mt_loss, "smoothed_loss", lambda *a: (real(*a)[0] * math.nan, real(*a)[1]))
    with pytest.raises(Unhealthy, match="diverged: the loss was not a finite number in 5 "):
        train(tiny_config(corpus_file, run, "train.max_steps=20"))
    after = weights(run)  # the last good checkpoint is still there and loads
    assert after.keys() == good.keys()
    assert metric_lines(run)[-1] == {"kind": "health", "step": 4, "check": "diverged",
                                     "message": metric_lines(run)[-1]["message"]}  # fmt: skip


# ----------------------------------------------------------------------------- the loop's rules


def test_max_epochs_ends_with_the_last_batch_of_the_epoch(corpus_file, tmp_path):
    config = tiny_config(corpus_file, tmp_path / "run", "train.max_steps=0", "train.max_epochs=1")
    trainer = Trainer(config)
    per_epoch = len(epoch_plan(trainer.batches, 0))
    result = trainer.run()
    assert result["step"] == per_epoch and result["epoch"] == 1, result
    assert "max_epochs" in result["reason"]


def test_stop_reason_has_one_fixed_priority():
    from mt.config import TrainConfig
    from mt.training.state import TrainState
    from mt.training.trainer import stop_reason

    t = TrainConfig(max_steps=5, max_minutes=1, patience=2)
    state = TrainState(step=5)
    state.vitals.stopped = "collapsed"
    assert stop_reason(t, state, "SIGINT", True, True) == "stopped by SIGINT"
    assert stop_reason(t, state, "", True, True) == "the health check 'collapsed' fired"
    state.vitals.stopped = ""
    assert "max_steps" in stop_reason(t, state, "", True, True)
    state.step = 4
    assert "max_minutes" in stop_reason(t, state, "", True, True)
    assert "no better validation BLEU" in stop_reason(t, state, "", True, False)
    assert stop_reason(t, state, "", False, False) == ""


def test_fresh_start_and_resume_forget_metrics_of_undone_steps(corpus_file, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # an earlier attempt killed before its first checkpoint, its last line half written
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n{"kind": "tra')
    train(tiny_config(corpus_file, run, "train.max_steps=2", "train.log_every=1"))
    assert [m["step"] for m in metric_lines(run)] == [1, 2, 2]  # train 1, 2; valid 2
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 3}\n{"kind": "tr')  # after the checkpoint, cut
    train(tiny_config(corpus_file, run, "train.max_steps=3", "train.log_every=1"))
    assert [m["step"] for m in metric_lines(run)] == [1, 2, 2, 3, 3]


def test_decoding_keys_and_compile_may_change_on_resume(corpus_file, tmp_path):
    run = tmp_path / "run"
    train(tiny_config(corpus_file, run, "train.max_steps=2"))
    changed = (
        "decode.beam=3",
        "decode.alpha=1.0",
        "decode.no_repeat_ngram=2",
        "decode.precision=bf16",
        "train.keep_last=3",
    )
    result = train(tiny_config(corpus_file, run, "train.max_steps=3", *changed))
    assert result["step"] == 3


def test_weight_decay_applies_to_matrices_only(corpus_file, tmp_path):
    trainer = Trainer(tiny_config(corpus_file, tmp_path / "run", "train.weight_decay=0.1"))
    decayed, plain = trainer.updater.optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decayed["params"]) and decayed["params"]
    assert all(p.dim() == 1 for p in plain["params"]) and plain["params"]  # biases, LayerNorm
    count = sum(map(len, (decayed["params"], plain["params"])))
    assert count == len(list(trainer.model.parameters()))


def test_validation_loss_keeps_eos_of_cut_sentences():
    import numpy as np

    from mt.config import ModelConfig
    from mt.data.store import Split
    from mt.model import Transformer
    from mt.training.validation import validation_loss

    model = Transformer(ModelConfig(d_model=16, heads=2, d_ff=32, max_positions=6), 50, 50).eval()
    lengths = [3, 9, 5]  # 9 > max_positions - 1: cut to 5, and EOS still counted
    split = Split([np.arange(4, 4 + n) for n in lengths], [np.arange(4, 4 + n) for n in lengths])
    _, _, tokens = validation_loss(model, split, 1000, 0.1, torch.device("cpu"))
    assert tokens == sum(min(n, 5) + 1 for n in lengths)


def test_off_a_terminal_progress_is_plain_lines_and_stdout_stays_empty(corpus_file, tmp_path):
    result = subprocess.run(
        [
            mt_executable(), "train", "--config", "tiny.yaml",
            "--set", f"data.files.train={corpus_file}", "--set", f"run.dir={tmp_path / 'run'}",
            "--set", f"data.valid_size={HELD_OUT}", "--set", f"data.test_size={HELD_OUT}",
            "--set", "train.max_steps=4", "--set", "train.log_every=2",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # results only; nothing to say here
    assert "\r" not in result.stderr  # neither our bar nor those of datasets and tokenizers
    assert "step 2: loss" in result.stderr and "step 4: loss" in result.stderr


def test_training_without_any_limit_is_refused_before_anything_is_written(corpus_file, tmp_path):
    with pytest.raises(ConfigError, match=r"train.max_steps: training would never stop"):
        Trainer(tiny_config(corpus_file, tmp_path / "run", "train.max_steps=0"))
    assert not (tmp_path / "run").exists()


def test_a_trainer_state_comes_back_from_what_is_saved_of_it():
    from mt.data.batches import Position
    from mt.training.budget import Horizon
    from mt.training.state import TrainState

    state = TrainState(
        step=9, position=Position(epoch=2, batch=3), rng={"cpu": [torch.get_rng_state()]}
    )
    state.horizon = Horizon(at=40, update_times=[1.0, 2.0], validate_s=4.0, fitted_at=6.0)
    again = TrainState.from_dict(dataclasses.asdict(state))  # as a checkpoint saves it
    assert (again.step, again.position, again.horizon) == (9, state.position, state.horizon)
    assert torch.equal(again.rng["cpu"][0], state.rng["cpu"][0])


def test_the_state_keeps_the_best_bleu_and_counts_patience_from_it():
    from mt.training.state import TrainState

    state, seen = TrainState(), []
    for bleu in (10.0, 12.0, 12.0, 11.0, 13.0, 9.0):
        seen.append((state.validated(bleu), state.bad_evals, state.out_of_patience(2)))
    assert seen == [(True, 0, False), (True, 0, False), (False, 1, False), (False, 2, True),
                    (True, 0, False), (False, 1, False)]  # fmt: skip
    assert state.best_bleu == 13.0 and not state.out_of_patience(0)  # 0: no patience rule


def test_a_log_window_averages_over_its_updates_and_starts_over():
    from mt.training.metrics import Window
    from mt.training.update import Update

    window = Window()  # 2 updates: a resumed run's first window is short of train.log_every
    for loss in (2.0, 4.0):
        window.add(Update(loss, loss / 2, tokens=100, lr=0.1, padded=5, cells=50), 0.5)
    record = window.close(lr=0.2, world=2)  # 200 tokens a rank in 1 s, 2 ranks
    assert record == {"loss": 3.0, "nll": 1.5, "ppl": math.exp(1.5), "lr": 0.2,
                      "tokens_per_s": 400.0, "padding": 0.1}  # fmt: skip
    assert window.close(lr=0.2, world=1)["tokens_per_s"] == 0.0  # a new window


def test_generator_states_saved_by_the_ranks_restore_the_same_draws():
    from mt.training.ranks import Ranks

    ranks = Ranks("cpu")
    torch.manual_seed(7)
    saved = ranks.rng_states()
    assert list(saved) == ["cpu"] and len(saved["cpu"]) == ranks.world == 1
    drawn = torch.rand(5)
    ranks.restore_rng(saved)
    assert torch.equal(torch.rand(5), drawn)


def test_each_validation_measures_the_length_carried_afresh(corpus_file, tmp_path):
    """What an earlier validation measured (the model as it was then) bounds nothing."""
    from mt.data.prepare import prepare
    from mt.decoding.trained import Trained
    from mt.training.validation import validation_record

    config = tiny_config(corpus_file, tmp_path / "run", "train.max_steps=2", "train.eval_every=2")
    train(config)
    data = prepare(config, write=False)
    model = checkpoint.load(tmp_path / "run" / "checkpoints" / "last").model
    cpu = torch.device("cpu")
    found = [
        validation_record(model, data, config, cpu, Trained(before, 1.0))[0]
        for before in (2, config.data.max_length)
    ]
    assert found[0]["carried"] == found[1]["carried"]
    assert found[0]["placed"] == found[1]["placed"] == 0  # the tiny corpus has no spans
