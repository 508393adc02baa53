"""The translated files /translate_file made, kept in memory for /download_file: the newest
first, at most `--kept-mb` megabytes in all and none older than `--kept-minutes`. A file's name
is a random UUID and its own name: it cannot be guessed, and only its requester learns it.
(Replicas keep them in Redis instead: mt.serve.shared.)"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict

from .batcher import BadRequest


class Downloads:
    def __init__(self, max_bytes: int, max_seconds: float) -> None:
        self.max_bytes, self.max_seconds = max_bytes, max_seconds
        self.files: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # oldest first
        self.size = 0

    def add(self, name: str, data: bytes) -> str:
        """Keep `data` as a file named `name`; its download name. The oldest go first to make
        room."""
        stored = stored_name(name, data, self.max_bytes)
        self.files[stored] = (time.monotonic(), data)
        self.size += len(data)
        while self.size > self.max_bytes:
            self._drop()
        return stored

    def get(self, stored: str) -> bytes | None:
        """The file `stored`, or None if there is none of that name (or no longer)."""
        now = time.monotonic()
        while self.files and now - next(iter(self.files.values()))[0] > self.max_seconds:
            self._drop()
        kept = self.files.get(stored)
        return None if kept is None else kept[1]

    def _drop(self) -> None:
        _, (_, data) = self.files.popitem(last=False)
        self.size -= len(data)


def stored_name(name: str, data: bytes, max_bytes: int) -> str:
    """The download name of a file `name` of `data`: a random UUID and its name; a file
    larger than the whole store (`max_bytes`) is a 413."""
    if len(data) > max_bytes:
        raise BadRequest(
            413,
            f"{name}: its translation is {len(data):,} bytes, more than the "
            f"{max_bytes:,} kept for downloads (--kept-mb)",
            limit="kept_mb",
        )
    return f"{uuid.uuid4()}.{name}"
