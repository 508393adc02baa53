"""The text files a command is given, a line a text (`--file`, `--src`, `--ref`, `--hyp`,
`--constraints`, `--glossary`, stdin), and the UTF-8 check every reader of text shares: an
encoding error or a NUL byte named by its file and line."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InputError


def read_lines(path: str, option: str) -> list[str]:
    """The lines of a UTF-8 text file, or of stdin for "-", ended by a line feed (its CR
    dropped) as training's aligned text, sacreBLEU and `wc -l` count them: another line
    separator of Unicode's (U+2028, a form feed) is inside a line. An encoding error or a
    NUL byte (a binary file, not text: refused) names the file and the line."""
    name = "stdin" if path == "-" else f"{option} {path}"
    if path == "-":
        stream = sys.stdin
        data = (
            stream.buffer.read()
            if hasattr(stream, "buffer")
            else stream.read().encode("utf-8", "surrogateescape")
        )
    elif not Path(path).is_file():
        raise InputError(f"{option} {path}: no such file")
    else:
        data = Path(path).read_bytes()
    lines = decode_text(data, name).split("\n")
    if lines[-1] == "":  # the last line's line feed, or an empty file
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def decode_text(data: bytes, name: str, line: int = 1) -> str:
    """UTF-8 text (a byte-order mark dropped), or a one-line error naming the line at fault
    (`data` begins at line `line` of `name`)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line += data[: e.start].count(b"\n")
        byte = e.start - data.rfind(b"\n", 0, e.start) - 1  # counted from the line's start
        why = f"{e.reason} at byte {byte} of the line"
        raise InputError(f"{name}:{line}: not UTF-8 text ({why})") from None
    if "\0" in text:
        line += text[: text.index("\0")].count("\n")
        raise InputError(f"{name}:{line}: a NUL byte, so not a text file; refusing it")
    return text
