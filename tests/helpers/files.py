"""A run folder's files under test: a snapshot of them, a copy of a run, its weights
rewritten, a disk that is full, a tmpfs mounted to fill (and the unmounts to do after)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.runs import tiny_config
from mt import checkpoint, files
from mt.config_file import dump_config

# the settings of the errors tests' run (tests/cli/test_errors.py's `trained`)
SETS = [
    "train.max_steps=30",
    "train.save_every=10",
    "train.eval_every=10",
    "train.keep_last=3",
    "train.lr=0.01",
]
# what undoes the mounts a test made, run at its end
RESTORE: list[Callable[[], None]] = []


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's content hash and every link's target under `folder`."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            found[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def copy_run(run: Path, tmp: Path) -> Path:
    """A copy of the fixture's run; its config.yaml names its own run.dir, as a run's does."""
    copy = tmp / "run"
    shutil.copytree(run, copy, symlinks=True)
    config = tiny_config(run.parent / "corpus.jsonl", copy, *SETS)
    (copy / "config.yaml").write_text(dump_config(config), encoding="utf-8")
    return copy


def rewrite_weights(step_dir: Path, change: Callable[[dict, dict], None]) -> None:
    """Re-save a checkpoint's weights after `change(tensors, metadata)`."""
    file = step_dir / checkpoint.WEIGHTS
    tensors, meta = checkpoint.load_weights(file)
    change(tensors, meta)
    aliases = json.loads(meta.get("aliases", "{}"))
    tensors = {k: v for k, v in tensors.items() if k not in aliases}
    from safetensors.torch import save_file

    save_file(tensors, str(file), metadata=meta)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/mt-pwned",))


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every atomic write fails as on a full disk, when its data is flushed."""

    def no_space(path: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "_fsync_tree", no_space)


# The same failures, real: a file system the test mounts (root only; skipped elsewhere).
def mount(target: Path, *args: str) -> None:
    """`mount ARGS TARGET`, undone when the case ends, or a skip where this machine cannot."""
    try:
        subprocess.run(["mount", *args, str(target)], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount here: {getattr(e, 'stderr', '') or e}".strip())
    # lazy: a file a failed case left open (its traceback holds it) must not keep it mounted
    RESTORE.append(lambda: subprocess.run(["umount", "--lazy", str(target)], check=True))


def fill(disk: Path, leave: int) -> None:
    """Take all the free space of `disk` but `leave` bytes."""
    (disk / "fill").write_bytes(bytes(shutil.disk_usage(disk).free - leave))


def tmpfs(tmp: Path) -> Path:
    disk = tmp / "disk"
    disk.mkdir()
    mount(disk, "-t", "tmpfs", "-o", "size=16m", "tmpfs")
    return disk
