"""Writing files so that nothing already there is lost: the one atomic-write rule of `mt`.

A file or folder is written under a temporary name beside its destination, flushed to disk
and renamed over it, so a reader (or a run killed at any moment) sees the old content or the
new, never a mix. A failure removes the temporary and names the path and the cause.

A folder cannot be renamed over a full one: on Linux the two are swapped in one step
(renameat2's RENAME_EXCHANGE), then the old one removed. Elsewhere (or on a file system that
cannot swap) the old folder is first renamed aside to `.NAME.old-PID`; a process killed
before the new one took its place leaves no `NAME`, and the next write of it puts the old one
back.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
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
        _restore_leftovers(path)
        yield tmp
        _fsync_tree(tmp)
        if tmp.is_dir() and not tmp.is_symlink() and path.is_dir():  # not over a full folder
            _replace_folder(tmp, path)
        else:
            os.replace(tmp, path)
        fsync(path.parent)
    except OSError as e:
        remove(tmp)
        raise MachineError(f"{path}: cannot write: {why(e)}") from None
    except BaseException:
        remove(tmp)
        raise


def _replace_folder(tmp: Path, path: Path) -> None:
    """The folder `tmp` put in the place of the folder `path`, whose content is then removed:
    swapped in one step where the system can, else in two renames."""
    if _exchange(tmp, path):
        remove(tmp)  # now the old folder
        return
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    remove(old)
    path.rename(old)
    tmp.rename(path)
    remove(old)


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries `a` and `b` atomically (Linux 3.15+, glibc 2.28+); False where the
    system or the file system cannot, having changed nothing."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


AT_FDCWD, RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


@cache
def _renameat2() -> Callable[..., int] | None:
    """libc's renameat2, or None."""
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p] * 2 + [ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


def _restore_leftovers(path: Path) -> None:
    """Put back the folder a process killed between the two renames of a replace left aside
    (`.NAME.old-PID`, its process dead, `path` missing), and remove the other temporaries of
    `path` left by processes killed outright (kill -9, power loss)."""
    temporary = re.compile(rf"^\.{re.escape(path.name)}\.(tmp|old)-(\d+)")
    for leftover in sorted(path.parent.glob(f".{glob.escape(path.name)}.*-*")):
        found = temporary.match(leftover.name)
        if not found or _alive(int(found.group(2))):
            continue
        if found.group(1) == "old" and not os.path.lexists(path):
            leftover.rename(path)
        else:
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
