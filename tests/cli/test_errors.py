"""Every bad input is one line on stderr, a non-zero exit, no traceback, and nothing changed in
the run folder; a resume refuses what it cannot continue. One tiny trained run serves all."""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from helpers.corpus import PAIRS, write_jsonl
from helpers.files import (
    RESTORE,
    SETS,
    Evil,
    copy_run,
    fill,
    full_disk,
    mount,
    rewrite_weights,
    snapshot,
    tmpfs,
)
from helpers.runs import tiny_config
from mt import checkpoint
from mt.training.trainer import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(corpus, run): a tiny model trained for 30 updates, checkpoints at 10, 20 and 30."""
    tmp = tmp_path_factory.mktemp("errors")
    corpus = write_jsonl(tmp / "corpus.jsonl", PAIRS)
    train(tiny_config(corpus, tmp / "run", *SETS))
    return corpus, tmp / "run"


def train_args(corpus: Path, run: Path, *extra: str) -> list[str]:
    """The `mt train` command line of the fixture's run (tiny_config's keys, SETS)."""
    sets = [
        f"data.files.train={corpus}",
        f"run.dir={run}",
        "data.valid_size=8",
        "data.test_size=8",
        "train.max_tokens=200",
        "train.eval_sentences=4",
        "train.eval_examples=0",
        *SETS,
        *extra,
    ]
    return ["train", "--config", "tiny.yaml", *(a for s in sets for a in ("--set", s))]


# Each case: set-up(corpus, run, tmp, monkeypatch) -> (argv, folder that must stay unchanged);
# then the exit status and a word the one stderr line must hold.
def _corpus_changed(corpus, run, tmp, mp):
    saved, stat = corpus.read_bytes(), corpus.stat()
    corpus.write_bytes(saved + b'{"en": "New.", "es": "Nuevo."}\n')

    def restore():
        corpus.write_bytes(saved)
        os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    RESTORE.append(restore)
    return train_args(corpus, run), run


def _tokenizer_changed(corpus, run, tmp, mp):
    run = copy_run(run, tmp)
    with open(run / "tokenizer.json", "a") as f:
        f.write(" ")
    return train_args(corpus, run), run


def _shapes_differ(corpus, run, tmp, mp):
    run = copy_run(run, tmp)

    def change(tensors, meta):
        name = next(k for k, v in tensors.items() if v.dim() == 2)
        tensors[name] = torch.zeros(3, 3)

    rewrite_weights((run / "checkpoints" / "last").resolve(), change)
    return train_args(corpus, run), run


def _trainer_state(content: bytes | Callable[[Path], None] | None):
    def setup(corpus, run, tmp, mp):
        run = copy_run(run, tmp)
        last = (run / "checkpoints" / "last").resolve()
        if content is None:  # missing everywhere: nothing to fall back to
            for step in (run / "checkpoints").glob("step-*"):
                (step / checkpoint.TRAINER).unlink()
        elif callable(content):
            content(last / checkpoint.TRAINER)
        else:
            (last / checkpoint.TRAINER).write_bytes(content)
        return train_args(corpus, run), run

    return setup


def _bad_metadata(key: str, value: str | None, command: str):
    def setup(corpus, run, tmp, mp):
        run = copy_run(run, tmp)

        def change(tensors, meta):
            if value is None:
                del meta[key]
            else:
                meta[key] = value

        for path in {(run / "checkpoints" / name).resolve() for name in ("last", "best")}:
            rewrite_weights(path, change)  # once where the best is the last
        if command == "train":
            return train_args(corpus, run), run
        return ["translate", "--checkpoint", str(run), "Hello."], run

    return setup


def _data_file(content: bytes):
    def setup(corpus, run, tmp, mp):
        bad = tmp / "bad.jsonl"
        bad.write_bytes(content)
        return train_args(bad, tmp / "new"), tmp

    return setup


def _pairs(name: str, content: bytes):
    def setup(corpus, run, tmp, mp):
        (tmp / name).write_bytes(content)
        return ["evaluate", str(run), "--pairs", str(tmp / name)], run

    return setup


def _src_ref(src: bytes, ref: bytes):
    def setup(corpus, run, tmp, mp):
        (tmp / "src.txt").write_bytes(src)
        (tmp / "ref.txt").write_bytes(ref)
        return [
            "evaluate",
            str(run),
            "--src",
            str(tmp / "src.txt"),
            "--ref",
            str(tmp / "ref.txt"),
        ], run

    return setup


def _translate_file(content: bytes):
    def setup(corpus, run, tmp, mp):
        (tmp / "in.txt").write_bytes(content)
        return ["translate", "--checkpoint", str(run), "--file", str(tmp / "in.txt")], run

    return setup


def _translate_stdin(corpus, run, tmp, mp):
    stdin = io.TextIOWrapper(io.BytesIO(b"Hello.\ncaf\xe9\n"), errors="surrogateescape")
    mp.setattr(sys, "stdin", stdin)
    return ["translate", "--checkpoint", str(run), "--file", "-"], run


def _config(*sets: str):
    def setup(corpus, run, tmp, mp):
        return train_args(corpus, tmp / "new", *sets), tmp

    return setup


def _run_dir_under_file(command: str):
    def setup(corpus, run, tmp, mp):
        (tmp / "file").write_text("x")
        args = train_args(corpus, tmp / "file" / "run")
        if command == "prepare":
            args = ["prepare", *args[1:]]
        return args, tmp

    return setup


def _read_only(command: str):
    def setup(corpus, run, tmp, mp):
        def refuse(path, *args, **kwargs):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

        mp.setattr(os, "mkdir", refuse)  # as root, a chmod would not stop the writes
        args = train_args(corpus, tmp / "new")
        return (["prepare", *args[1:]] if command == "prepare" else args), tmp

    return setup


def _full_disk_save(corpus, run, tmp, mp):
    run = copy_run(run, tmp)
    full_disk(mp)
    return train_args(corpus, run, "train.max_steps=31"), run


def _full_disk_out(command: str):
    def setup(corpus, run, tmp, mp):
        full_disk(mp)
        out = tmp / "out"
        if command == "evaluate":
            return ["evaluate", str(run), "--out", str(out)], run
        return ["average", str(run), "--last", "2", "--out", str(out)], run

    return setup


def _real_full_disk_save(at: str):
    """Resume on a disk with room for the small files and half of the weights, or of the
    trainer state (safetensors and torch each say a full disk their own way)."""

    def setup(corpus, run, tmp, mp):
        run = copy_run(run, tmpfs(tmp))
        last = (run / "checkpoints" / "last").resolve()
        weights, trainer = (
            (last / f).stat().st_size for f in (checkpoint.WEIGHTS, checkpoint.TRAINER)
        )
        room = weights // 2 if at == "weights" else weights + trainer // 2
        fill(run.parent, 64 * 1024 + room)  # 64 KiB: config.yaml, README.md, metrics.jsonl
        return train_args(corpus, run, "train.max_steps=31"), run

    return setup


def _real_full_disk_average(corpus, run, tmp, mp):
    disk = tmpfs(tmp)
    fill(disk, (run / "checkpoints" / "last" / checkpoint.WEIGHTS).stat().st_size // 2)
    return ["average", str(run), "--last", "2", "--out", str(disk / "avg.safetensors")], disk


def _real_read_only_resume(corpus, run, tmp, mp):
    copy_run(run, tmp / "rw")
    (tmp / "ro").mkdir()
    mount(tmp / "ro", "-o", "bind,ro", str(tmp / "rw"))  # the same run, seen read-only
    if not os.statvfs(tmp / "ro").f_flag & os.ST_RDONLY:
        pytest.skip("mount -o bind,ro left the mount writable (util-linux before 2.27)")
    return train_args(corpus, tmp / "ro" / "run", "train.max_steps=31"), tmp / "ro"


LATIN1 = '{"en": "café", "es": "café"}\n'.encode("latin-1")
FULL = "cannot write: No space left on device (disk full)"
LINES_49 = "".join(json.dumps({"en": en, "es": es}) + "\n" for en, es in PAIRS[:49]).encode()

CASES = {
    # resume: refuse before anything is rebuilt
    "corpus changed under the run": (_corpus_changed, 2, "training data"),
    "tokenizer changed": (_tokenizer_changed, 2, "tokenizer.json"),
    "last has other shapes": (_shapes_differ, 2, "does not fit"),
    "trainer.pt missing everywhere": (_trainer_state(None), 2, "no complete checkpoint"),
    "trainer.pt random bytes": (_trainer_state(os.urandom(512)), 2, "not a trainer state"),
    "trainer.pt of another structure": (
        _trainer_state(lambda p: torch.save({"weights": torch.zeros(2)}, p)),
        2,
        "not a trainer state",
    ),
    "trainer.pt a malicious pickle": (
        _trainer_state(pickle.dumps(Evil())),
        2,
        "refusing to unpickle it",
    ),
    "config metadata not JSON (train)": (_bad_metadata("config", "{", "train"), 2, "'config'"),
    "config metadata not JSON (translate)": (
        _bad_metadata("config", "{", "translate"),
        2,
        "'config'",
    ),
    "no tokenizer in the metadata": (
        _bad_metadata("src_tokenizer", None, "translate"),
        2,
        "tokenizers",
    ),
    # training data
    "latin-1 training file": (_data_file(LATIN1), 2, "bad.jsonl:1: not UTF-8"),
    "a list as text": (_data_file(b'{"en": ["a"], "es": "b"}\n'), 2, "row 1: 'en' is list"),
    "a number as text": (_data_file(b'{"en": "a", "es": 7}\n'), 2, "row 1: 'es' is int"),
    "an empty data file": (_data_file(b""), 2, "bad.jsonl: an empty file"),
    # evaluate
    "--pairs corrupt gzip": (_pairs("p.jsonl.gz", b"not gzip at all"), 2, "p.jsonl.gz"),
    "--pairs empty": (_pairs("p.jsonl", b""), 2, "p.jsonl: an empty file"),
    "--pairs a number as text": (_pairs("p.jsonl", b'{"en": 1, "es": "b"}\n'), 2, "'en' is int"),
    "--pairs not UTF-8": (_pairs("p.jsonl", LATIN1), 2, "p.jsonl:1: not UTF-8"),
    "--src and --ref empty": (_src_ref(b"", b""), 2, "no sentences"),
    "--src not UTF-8": (_src_ref(b"caf\xe9\n", b"x\n"), 2, "src.txt:1: not UTF-8"),
    # translate
    "--file not UTF-8": (_translate_file(b"Hello.\ncaf\xe9\n"), 2, "in.txt:2: not UTF-8"),
    "--file with a NUL byte": (_translate_file(b"Hello.\nA\0B\n"), 2, "in.txt:2: a NUL byte"),
    "stdin not UTF-8": (_translate_stdin, 2, "stdin:2: not UTF-8"),
    # config values torch would reject late
    "train.lr NaN": (_config("train.lr=.nan"), 2, "train.lr"),
    "max_positions too small": (_config("model.max_positions=8"), 2, "model.max_positions"),
    "absurd d_model": (_config("model.d_model=4000000", "model.heads=1"), 2, "GiB"),
    # the file system
    "run.dir under a file (train)": (_run_dir_under_file("train"), 1, "file/run"),
    "run.dir under a file (prepare)": (_run_dir_under_file("prepare"), 1, "file/run"),
    "read-only run.dir (train)": (_read_only("train"), 1, "Read-only file system"),
    "read-only run.dir (prepare)": (_read_only("prepare"), 1, "Read-only file system"),
    "full disk at a checkpoint save": (_full_disk_save, 1, "No space left"),
    "full disk at evaluate --out": (_full_disk_out("evaluate"), 1, "No space left"),
    "full disk at average --out": (_full_disk_out("average"), 1, "No space left"),
    "real full disk at average --out": (_real_full_disk_average, 1, f"avg.safetensors: {FULL}"),
    "real read-only run.dir at a resume": (
        _real_read_only_resume,
        1,
        "ro/run/config.yaml: cannot write: Read-only file system",
    ),
    "a JSONL line neither UTF-8 nor JSON": (
        _data_file(LINES_49 + b"\xff\xfe\x00garbage\n"),
        2,
        "bad.jsonl:50: not UTF-8",
    ),
    "a JSONL line not JSON": (
        _data_file(LINES_49 + b'{"en": "a", "es": \n'),
        2,
        "bad.jsonl:50: invalid JSON",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_input_is_one_line_and_changes_nothing(
    case, trained, cli_main, tmp_path, monkeypatch
):
    corpus, run = trained
    setup, status, culprit = CASES[case]
    try:  # a case's mounts are undone however it ends
        argv, folder = setup(corpus, run, tmp_path, monkeypatch)
        before = snapshot(folder)
        code, _, err = cli_main(*argv)
        after = snapshot(folder)
    finally:
        while RESTORE:
            RESTORE.pop()()
    lines = [line for line in err.splitlines() if not line.startswith("mt: warning")]
    assert code == status, err
    assert len(lines) == 1 and lines[0].startswith("mt: error: "), err
    assert culprit in lines[0], err
    assert after == before
    assert not Path("/tmp/mt-pwned").exists()


def test_a_full_disk_leaves_last_loadable(trained, cli_main, tmp_path, monkeypatch):
    corpus, run = trained
    run = copy_run(run, tmp_path)
    last = os.readlink(run / "checkpoints" / "last")
    full_disk(monkeypatch)
    code, _, err = cli_main(*train_args(corpus, run, "train.max_steps=31"))
    monkeypatch.undo()
    assert code == 1 and "No space left on device" in err
    assert os.readlink(run / "checkpoints" / "last") == last
    assert not list((run / "checkpoints").glob(".*"))  # no temporary left behind
    checkpoint.load(run / "checkpoints" / "last")
    checkpoint.load_trainer_state(run / "checkpoints" / "last")


@pytest.mark.parametrize("at", ["weights", "trainer"])
def test_a_real_full_disk_at_a_save_is_one_line_and_keeps_last(
    at, trained, cli_main, tmp_path, monkeypatch
):
    """Training goes on until its save at update 31 fails: its progress, then the error alone."""
    try:
        argv, run = _real_full_disk_save(at)(*trained, tmp_path, monkeypatch)
        before = snapshot(run / "checkpoints")  # config.yaml and metrics.jsonl do change
        code, _, err = cli_main(*argv)
        after = snapshot(run / "checkpoints")
        checkpoint.load(run / "checkpoints" / "last")
    finally:
        while RESTORE:
            RESTORE.pop()()
    assert code == 1, err
    assert err.splitlines()[-1] == f"mt: error: {run}/checkpoints/step-00000031: {FULL}", err
    assert err.count("mt: error") == 1, err
    assert after == before  # last and what it points to untouched, no temporary left


def test_a_dangling_last_resumes_from_the_newest_complete_checkpoint(trained, cli_main, tmp_path):
    corpus, run = trained
    run = copy_run(run, tmp_path)
    ckpt = run / "checkpoints"
    shutil.rmtree(ckpt / "step-00000030")
    older = {path: snapshot(path) for path in ckpt.glob("step-*")}
    code, _, err = cli_main(*train_args(corpus, run, "train.max_steps=32"))
    assert code == 0, err
    assert "resuming from step-00000020, the newest complete checkpoint" in err
    for path, found in older.items():  # earlier checkpoints are not redone (those kept)
        assert not path.is_dir() or snapshot(path) == found
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    kinds = [json.loads(line)["kind"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(set(zip(kinds, steps))) == len(steps)  # no step recorded twice
    assert os.readlink(ckpt / "last") == "step-00000032"


def test_usage_errors_are_one_line(cli_main):
    for argv, culprit in [
        (["--bogus"], "--bogus"),
        (["translate", "--beam"], "--beam"),
        (["evaluate"], "checkpoint"),
    ]:
        code, _, err = cli_main(*argv)
        assert code == 2 and err.count("\n") == 1 and culprit in err, err


def test_a_half_written_metrics_line_is_skipped_with_a_warning(trained, tmp_path, capsys):
    from mt.training.metrics import read_metrics

    run = copy_run(trained[1], tmp_path)
    whole = read_metrics(run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "tr')
    assert read_metrics(run) == whole
    assert "partial last line" in capsys.readouterr().err


def test_a_metrics_line_that_cannot_be_written_is_one_error_naming_the_file(tmp_path):
    from mt.errors import MtError
    from mt.training import metrics

    (tmp_path / metrics.FILE).mkdir()  # any OSError at the append: a full disk, a lost mount
    with pytest.raises(MtError, match=f"{tmp_path / metrics.FILE}: cannot write: "):
        metrics.append(tmp_path, {"kind": "train", "step": 1})
