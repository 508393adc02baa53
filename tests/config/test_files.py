"""mt/files.py's atomic writes: a folder replaced whole, and what a process killed in the
middle of a write leaves, which the next write of the same path puts right."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mt import files

ROOT = Path(__file__).resolve().parents[2]

# A writer that replaces the folder `target` (its file f: "old") with one whose f is "new",
# killed (SIGKILL, nothing cleaned up) at the worst moment of the way it replaces it: between
# the two renames, or after the swap but before the old folder is removed.
KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from mt import files

target, way = Path(sys.argv[1]), sys.argv[2]
if way == "renames":
    files._exchange = lambda a, b: False  # a system that cannot swap
    rename = Path.rename

    def killed(self, to):
        if ".tmp-" in self.name:  # the new folder, about to take the old one's place
            os.kill(os.getpid(), signal.SIGKILL)
        return rename(self, to)

    Path.rename = killed
else:
    remove = files.remove

    def killed(path):
        if ".tmp-" in path.name and (path / "f").is_file():  # the old folder, swapped out
            os.kill(os.getpid(), signal.SIGKILL)
        remove(path)

    files.remove = killed
with files.atomic_path(target) as tmp:
    tmp.mkdir()
    (tmp / "f").write_text("new")
"""


def write_folder(path: Path, text: str) -> None:
    with files.atomic_path(path) as tmp:
        tmp.mkdir()
        (tmp / "f").write_text(text)


@pytest.mark.parametrize("way", ["renames", "swap"])
def test_a_writer_killed_mid_replace_leaves_the_old_folder_or_the_new(tmp_path, way):
    target = tmp_path / "folder"
    write_folder(target, "old")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target), way], env=env, stderr=subprocess.PIPE
    )
    assert child.wait(60) == -signal.SIGKILL, child.stderr.read().decode()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p != target)
    if way == "renames":  # the old folder aside, none in its place, the new one beside
        assert not target.exists()
        assert leftovers == [f".folder.old-{child.pid}", f".folder.tmp-{child.pid}"]
    else:  # swapped: the new folder in place, the old one still beside it
        assert (target / "f").read_text() == "new"
        assert leftovers == [f".folder.tmp-{child.pid}"]
    with files.atomic_path(target) as tmp:  # the next write puts the old one back first
        assert (target / "f").read_text() == ("old" if way == "renames" else "new")
        tmp.mkdir()
        (tmp / "f").write_text("newer")
    assert (target / "f").read_text() == "newer"
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]


def test_a_folder_is_replaced_whole_where_the_system_cannot_swap(tmp_path, monkeypatch):
    target = tmp_path / "folder"
    write_folder(target, "old")
    (target / "stale").write_text("x")
    for swaps in (True, False):
        if not swaps:
            monkeypatch.setattr(files, "_exchange", lambda a, b: False)
        write_folder(target, f"new {swaps}")
        assert sorted(p.name for p in target.iterdir()) == ["f"]
        assert (target / "f").read_text() == f"new {swaps}"
        assert [p.name for p in tmp_path.iterdir()] == ["folder"]


def test_leftovers_of_dead_processes_are_removed_where_the_folder_is_next_written(tmp_path):
    dead = tmp_path / ".data.tmp-999999999"  # no such process
    dead.mkdir()
    mine = tmp_path / f".data.tmp-{os.getppid()}"  # a live writer's: kept
    mine.mkdir()
    files.atomic_write_text(tmp_path / "data", "x")
    assert not dead.exists() and mine.exists()
