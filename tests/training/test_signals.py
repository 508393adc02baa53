"""Training stopped by a signal: SIGINT and SIGTERM finish the update, save and exit
128 + the signal; a kill at any moment leaves a loadable last checkpoint."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.corpus import HELD_OUT
from helpers.runs import mt_executable
from mt import checkpoint


def _start_training(corpus: Path, run: Path, *extra: str) -> subprocess.Popen:
    args = [
        mt_executable(),
        "train",
        "--config",
        "tiny.yaml",
        "--set",
        f"data.files.train={corpus}",
        "--set",
        f"run.dir={run}",
        "--set",
        f"data.valid_size={HELD_OUT}",
        "--set",
        f"data.test_size={HELD_OUT}",
        "--set",
        "train.max_steps=100000",
        "--set",
        "train.log_every=1",
        "--set",
        "train.eval_every=100000",
        *extra,
    ]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"training ended or timed out: {process.communicate()}")
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_finishes_the_update_saves_and_exits_128_plus_signal(corpus_file, tmp_path, sig):
    run = tmp_path / "run"
    process = _start_training(corpus_file, run)
    _wait_for(
        lambda: (
            (run / "metrics.jsonl").is_file()
            and len((run / "metrics.jsonl").read_text().splitlines()) >= 3
        ),
        process,
    )
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, err  # 130, 143: a script can tell it from the end
    assert f"stopped by {sig.name}" in err
    assert "resume with: mt train --config tiny.yaml" in err
    last = (run / "checkpoints" / "last").resolve()
    step = checkpoint.load_trainer_state(last)["state"]["step"]
    assert step >= 3 and last.name == f"step-{step:08d}"
    assert "Traceback" not in err


def test_kill_at_any_moment_leaves_a_loadable_last(corpus_file, tmp_path, cli_main):
    """kill -9 at 20 random moments (start-up, updates, saves: every update saves); each
    time `mt translate` loads `last` and the next `mt train` resumes without a complaint.
    (A full disk during a save: tests/cli/test_errors.py::test_a_full_disk_leaves_last_loadable.)"""
    run = tmp_path / "run"
    ckpt = run / "checkpoints"
    extra = ("--set", "train.save_every=1", "--set", "train.keep_last=2")
    moments = random.Random(13)
    process = _start_training(corpus_file, run, *extra)
    _wait_for(lambda: (ckpt / "last").exists(), process)  # one checkpoint to come back to
    for _ in range(20):
        time.sleep(moments.uniform(0, 3))  # start-up takes about as long on a busy machine
        assert process.poll() is None, process.communicate()  # it resumed: not refused
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate()
        assert "error" not in err and "Traceback" not in err, err
        code, out, err = cli_main("translate", "--checkpoint", str(ckpt / "last"), "Hello.")
        assert code == 0 and out.count("\n") == 1, err
        loaded = checkpoint.load(run)  # weights, config, tokenizers
        last = (ckpt / "last").resolve()
        assert loaded.metadata["step"] == last.name.split("-")[1].lstrip("0")
        checkpoint.load_trainer_state(last)
        process = _start_training(corpus_file, run, *extra)
    step = int(last.name.split("-")[1])
    _wait_for(lambda: int((ckpt / "last").resolve().name.split("-")[1]) > step, process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    assert not [p.name for p in ckpt.iterdir() if ".tmp-" in p.name]  # the dead ones' too
