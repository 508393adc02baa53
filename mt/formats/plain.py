"""Plain text (.txt): a line a block, blank lines kept, the file's lines written back with
"\n" ends."""

from __future__ import annotations

from .limits import TextLimit
from .pieces import Block, Document


def read_text(text: str, limit: TextLimit) -> Document:
    lines = text.splitlines()

    def write(found: list[list[str]]) -> bytes:
        return "".join(line + "\n" for pieces in found for line in pieces).encode("utf-8")

    return Document([limit.count(Block([line]), "line") for line in lines], write, unit="line")
