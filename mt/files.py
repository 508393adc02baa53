"""Writing files so that nothing already there is lost: the one atomic-write rule of `mt`.

A file or folder is written under a temporary name beside its destination, flushed to disk
and renamed over it, so a reader (or a run killed at any moment) sees the old content or the
new, never a mix. A failure removes the temporary and names the path and the cause.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .errors import MachineError


@contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path` to write a file or a folder at; on success it
    replaces `path` (a folder whole), on any failure it is removed and `path` is untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove(tmp)
        _remove_leftovers(path)
        yield tmp
        _fsync_tree(tmp)
        if tmp.is_dir() and not tmp.is_symlink() and path.is_dir():  # not over a full folder
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            remove(old)
            path.rename(old)
            tmp.rename(path)
            remove(old)
        else:
            os.replace(tmp, path)
        fsync(path.parent)
    except OSError as e:
        remove(tmp)
        raise MachineError(f"{path}: cannot write: {why(e)}") from None
    except BaseException:
        remove(tmp)
        raise


def _remove_leftovers(path: Path) -> None:
    """Temporaries of `path` left by processes killed outright (kill -9, power loss)."""
    temporary = re.compile(rf"^\.{re.escape(path.name)}\.(?:tmp|old)-(\d+)")
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*-*"):
        found = temporary.match(leftover.name)
        if found and not _alive(int(found.group(1))):
            remove(leftover)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def why(error: OSError) -> str:
    """An OS error's cause as a person reads it."""
    return f"{error.strerror or error}{' (disk full)' if error.errno == errno.ENOSPC else ''}"


def remove(path: Path) -> None:
    """Delete a file, link or folder if it exists, as far as the file system lets it: a clean-up
    must not hide the error that called it (a read-only mount refuses even to unlink nothing)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            path.unlink()


def fsync(path: Path) -> None:
    """Flush a file's or a folder's entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:  # some file systems cannot sync a folder
            raise
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    if path.is_symlink():
        return
    if path.is_dir():
        for child in path.iterdir():
            _fsync_tree(child)
    fsync(path)
