"""train.ema: validation and checkpoints take the moving average of the weights, training goes
on from its own; a bad decay is refused in one line. Exact resume with it: test_train.py."""

from __future__ import annotations

import torch

from helpers.runs import after_each_update, metric_lines, tiny_config, weights
from mt import checkpoint
from mt.training.trainer import Trainer
from mt.training.validation import validation_loss


def test_the_saved_weights_are_the_moving_average_of_the_weights_trained(corpus_file, tmp_path):
    run, decay = tmp_path / "run", 0.9
    config = tiny_config(
        corpus_file, run, "train.max_steps=6", "train.eval_every=3", f"train.ema={decay}"
    )
    trainer = Trainer(config)
    trained = [{k: v.double() for k, v in trainer.model.state_dict().items()}]  # initial

    def record(update, batches):
        if update.counted:
            trained.append({k: v.double() for k, v in trainer.model.state_dict().items()})

    after_each_update(trainer, record)
    trainer.run()
    assert len(trained) == 7
    average = trained[0]
    for step, now in enumerate(trained[1:], 1):  # warmed up: 2/11, 3/12, ..., then 0.9
        d = min(decay, (1 + step) / (10 + step))
        average = {k: d * average[k] + (1 - d) * now[k] for k in now}
    saved = weights(run)
    assert saved.keys() == average.keys()
    for key, value in saved.items():
        torch.testing.assert_close(value.double(), average[key], rtol=0, atol=1e-6, msg=key)
    raw = checkpoint.load_trainer_state(run / "checkpoints" / "last")["weights"]
    assert all(torch.equal(raw[k].double(), trained[-1][k]) for k in raw)  # to go on from
    assert not all(torch.equal(saved[k], raw[k]) for k in raw)

    # the validation at step 6 was the average's: its NLL, not that of the weights trained
    valid = trainer.data.splits["valid"]
    nll = [
        validation_loss(model, valid, config.train.max_tokens, 0.1, trainer.device)[1]
        for model in (trainer.validated_model, trainer.model)
    ]
    logged = [m["nll"] for m in metric_lines(run) if m["kind"] == "valid" and m["step"] == 6]
    assert logged == [nll[0]] and nll[0] != nll[1]


def test_a_decay_outside_0_to_1_is_refused_in_one_line(corpus_file, tmp_path, cli_main):
    for bad in ("-0.1", "1.0"):
        sets = [
            f"data.files.train={corpus_file}",
            f"run.dir={tmp_path / 'run'}",
            f"train.ema={bad}",
        ]
        code, _, err = cli_main(
            "train", "--config", "tiny.yaml", *(a for s in sets for a in ("--set", s))
        )
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("mt: error: "), err
        assert f"train.ema: must be in [0, 1), got {bad}" in err, err
    assert not (tmp_path / "run").exists()
