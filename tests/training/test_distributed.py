"""Many processes: the device of each rank, and two gloo ranks launched by docs/train.md's own
torchrun commands (one machine, and two "machines" meeting through c10d rendezvous)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.corpus import HELD_OUT
from helpers.runs import mt_executable
from mt import checkpoint
from mt.device import pick_device
from mt.errors import ConfigError

TORCHRUN = Path(sys.executable).parent / "torchrun"
needs_torchrun = pytest.mark.skipif(
    not (torch.distributed.is_available() and TORCHRUN.is_file()), reason="no torchrun"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sets(corpus: Path, run_dir: Path, *overrides: str) -> list[str]:
    return [
        f"data.files.train={corpus}",
        f"run.dir={run_dir}",
        f"data.valid_size={HELD_OUT}",
        f"data.test_size={HELD_OUT}",
        "train.max_tokens=100",
        "train.log_every=1",
        "train.eval_every=1000",
        "train.eval_sentences=2",
        "train.eval_examples=0",
        *overrides,
    ]


def _train(corpus: Path, run_dir: Path, *overrides: str) -> list[str]:
    """`mt train --config tiny.yaml --set ...`, the program torchrun starts."""
    sets = _sets(corpus, run_dir, *overrides)
    return [
        mt_executable(),
        "train",
        "--config",
        "tiny.yaml",
        *(x for s in sets for x in ("--set", s)),
    ]


def _one_machine(*program: str) -> subprocess.Popen:
    """docs/train.md: `torchrun --nproc_per_node 2 .venv/bin/mt train ...` (a free port here)."""
    command = [str(TORCHRUN), "--nproc_per_node", "2", "--master-port", str(_free_port())]
    return _start([*command, *program])


def _two_machines(*program: str) -> list[subprocess.Popen]:
    """docs/train.md: the same command on each of two machines, meeting at rank 0's address."""
    endpoint = f"127.0.0.1:{_free_port()}"
    command = [str(TORCHRUN), "--nnodes", "2", "--nproc_per_node", "1"]
    command += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "test"]
    return [_start([*command, *program]) for _ in range(2)]


def _start(command: list[str]) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen) -> str:
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return err


def _worker_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The process of `rank` among torchrun's children (Linux /proc)."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    for child in children:
        if f"RANK={rank}".encode() in Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
            return int(child)
    raise AssertionError(f"no rank {rank} among {children}")


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_weights(run_dir / "checkpoints" / "last" / checkpoint.WEIGHTS)[0]


# ----------------------------------------------------------------------------- device per rank


@pytest.mark.parametrize(
    ("name", "local_rank", "expected"),
    [
        ("auto", 0, "cuda:0"),
        ("auto", 3, "cuda:3"),
        ("cuda", 0, "cuda:0"),
        ("cuda", 2, "cuda:2"),  # not GPU 0 for every rank
        ("cuda:1", 0, "cuda:1"),
        ("cuda:1", 2, "cuda:3"),  # cuda:N is the first GPU of this machine's ranks
        ("cpu", 5, "cpu"),
    ],
)
def test_each_local_rank_gets_its_own_gpu(name, local_rank, expected):
    assert pick_device(name, local_rank, cuda_devices=4, mps=False) == torch.device(expected)


def test_device_without_cuda_or_with_too_few_gpus():
    assert pick_device("auto", 1, cuda_devices=0, mps=False) == torch.device("cpu")
    assert pick_device("auto", 0, cuda_devices=0, mps=True) == torch.device("mps")
    with pytest.raises(ConfigError, match=r"run\.device: cuda:1 requested but CUDA"):
        pick_device("cuda:1", 0, cuda_devices=0)
    with pytest.raises(ConfigError, match="local rank 2 needs GPU 3, but this machine has 3"):
        pick_device("cuda:1", 2, cuda_devices=3)


# ----------------------------------------------------------------------------- two gloo ranks

RANK_SCRIPT = """\
import os, sys, torch
import mt.decoding.evaluate
from mt.config_file import load_config
from mt.training.trainer import Trainer

rank, scored = int(os.environ["RANK"]), []


def score(hypotheses, references):  # rank 0: a flat BLEU; rank 1 would see it rise
    scored.append(1)
    return {"bleu": 10.0 if rank == 0 else 10.0 + len(scored)}


mt.decoding.evaluate.bleu_chrf = score
trainer = Trainer(load_config("tiny.yaml", sys.argv[2:]))
first = [int(x) for x in trainer.batches._locate(0, 0)[1]]  # epoch 0's first batch
result = trainer.run()
out = {"weights": trainer.model.state_dict(), "first": first, "scored": len(scored)}
out["average"] = trainer.validated_model.state_dict()  # train.ema's
torch.save(dict(out, reason=result["reason"], step=result["step"]), f"{sys.argv[1]}{rank}.pt")
"""


@needs_torchrun
def test_ranks_train_in_lockstep_and_stop_together_though_their_bleu_differs(corpus_file, tmp_path):
    """With train.ema: every rank keeps the same average, which rank 0 alone saves."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    sets = _sets(
        corpus_file,
        tmp_path / "run",
        "train.max_steps=50",
        "train.eval_every=1",
        "train.patience=2",
        "train.ema=0.5",
    )
    _finish(_one_machine(str(script), str(tmp_path / "rank"), *sets))
    r0, r1 = (torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(2))
    assert r0["first"] != r1["first"]  # each rank trains on its own batches
    last = tmp_path / "run" / "checkpoints" / "last"
    saved = {"average": _weights(tmp_path / "run")}
    saved["weights"] = checkpoint.load_trainer_state(last)["weights"]
    for kind in ("weights", "average"):
        for key, value in r0[kind].items():
            assert torch.equal(value, r1[kind][key]), key
            assert torch.equal(value, saved[kind][key]), key
    assert not all(torch.equal(v, r0["average"][k]) for k, v in r0["weights"].items())
    # 10 (best), 10, 10: patience 2 is out at step 3 on both ranks; rank 1 never decoded
    assert r0["reason"] == r1["reason"] == "no better validation BLEU in 2 validations"
    assert r0["step"] == r1["step"] == 3
    # each of rank 0's 3 validations scores its BLEU, then the joined lines and the singles of
    # every length it tries for the length carried (the same BLEU at each: all of them, alike
    # at every validation); rank 1 none
    assert r0["scored"] % 3 == 0 and (r0["scored"] // 3 - 1) % 2 == 0 and r0["scored"] >= 9
    assert r1["scored"] == 0
    assert (tmp_path / "run" / "checkpoints" / "best").is_dir()  # written by rank 0 only
    assert not list((tmp_path / "run" / "checkpoints").glob(".step-*"))


@needs_torchrun
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds ranks through /proc")
def test_sigterm_to_one_rank_then_resume_ends_as_an_uninterrupted_run(corpus_file, tmp_path):
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    launcher = _one_machine(*_train(corpus_file, stopped))
    metrics = stopped / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.communicate()
        time.sleep(0.05)
    os.kill(_worker_pid(launcher, 1), signal.SIGTERM)
    _, err = launcher.communicate(timeout=60)
    assert "stopped by SIGTERM (to another process)" in err  # rank 0's words: both stopped
    assert "resume with: mt train" in err
    assert launcher.returncode != 0  # every rank exits 143: torchrun reports the stop
    step = checkpoint.load_trainer_state(stopped / "checkpoints" / "last")["state"]["step"]
    assert step >= 3
    before = _weights(stopped)

    # one process cannot resume what two trained: refused in one line, nothing touched
    alone = subprocess.run(_train(corpus_file, stopped), capture_output=True, text=True)
    assert alone.returncode == 2, alone.stderr
    assert alone.stderr.strip().startswith("mt: error: ")
    assert "trained by 2 processes but resumed by 1" in alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1
    assert all(torch.equal(v, before[k]) for k, v in _weights(stopped).items())

    end = f"train.max_steps={step + 3}"
    _finish(_one_machine(*_train(corpus_file, stopped, end)))
    for node in _two_machines(*_train(corpus_file, whole, end)):
        _finish(node)
    resumed, uninterrupted = _weights(stopped), _weights(whole)
    assert json.loads(metrics.read_text().splitlines()[-1])["step"] == step + 3
    for key, value in uninterrupted.items():
        assert torch.equal(value, resumed[key]), key


FAILING_RANK_SCRIPT = """\
import os, sys
import mt.training.rehearsal
from mt.cli import main
from mt.errors import ConfigError
from mt.training.rehearsal import Rehearsal


def rehearse(forward, batch, model, compile, max_tokens, say, state_bytes=0):
    if os.environ["RANK"] == "1":  # as rehearsal.rehearse refuses a batch too big for a GPU
        raise ConfigError(f"train.max_tokens: a batch of {max_tokens} tokens does not fit")
    return Rehearsal(forward, False, 0.0, 0)


mt.training.rehearsal.rehearse = rehearse
sys.argv = ["mt", *sys.argv[1:]]
main()
"""


@needs_torchrun
def test_a_rank_that_fails_its_rehearsal_stops_every_rank_with_one_line(corpus_file, tmp_path):
    """Rank 1 alone finds its first batch too big: without telling, rank 0 would wait for it
    at the first update's gradient exchange until gloo's timeout (30 minutes)."""
    script = tmp_path / "rank.py"
    script.write_text(FAILING_RANK_SCRIPT)
    program = _train(corpus_file, tmp_path / "run", "train.compile=true")[1:]  # rehearsed
    launcher = _one_machine(str(script), *program)
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    lines = sorted(line for line in err.splitlines() if line.startswith("mt: error: "))
    assert lines == [
        "mt: error: rank 1 failed its rehearsal of the first update: train.max_tokens: a "
        "batch of 100 tokens does not fit",
        "mt: error: train.max_tokens: a batch of 100 tokens does not fit",
    ]
    frames = [line for line in err.splitlines() if line.strip().startswith('File "')]
    assert not [f for f in frames if "/mt/" in f]  # torchrun's own traceback only
