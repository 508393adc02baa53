"""SubRip subtitles (.srt): each cue's text a block, its lines the pieces (so a two-line cue
stays two lines), its number and timings as they were.

Read here and written by `srt`, whose reader is one regex that backtracks: a file of 1,200
digits took it 17 s, one of 20,000 spaces 20 s. This reader takes the files srt's takes, into
the same cues (tests/serve/test_hostile_input.py compares them), in one pass over the lines, each
matched by an anchored pattern with one way to match: a cue is its number (which may be
missing), its timing line, and its text, up to a blank line followed by the next cue's number
or timing (a blank line followed by anything else is text), or up to the next cue's number
and timing line with no blank line between (as in files stripped of a language's lines); "."
or ":" may stand for the "," of a timing.
"""

from __future__ import annotations

import re
from typing import Any

from .limits import TextLimit
from .pieces import Block, Document

_SEP = "[,.:，．。：]"  # srt's, full-width forms included
_TIMESTAMP = rf"\d+{_SEP}\d+{_SEP}\d+(?:{_SEP}\d*)?"  # srt's, with one way to match
TIMESTAMP = re.compile(_TIMESTAMP)
TIMING = re.compile(rf"({_TIMESTAMP}) *-[ -] *> *({_TIMESTAMP}) ?(.*)")  # and the rest
NUMBER = re.compile(r"(-?\d+)(?:\.\d*)?\s*")  # a cue's number; srt reads 12.5 as 12


def read_srt(text: str, limit: TextLimit) -> Document:
    """The cues of an .srt file as blocks; a cue that ends before it starts is refused."""
    import srt

    cues = _cues(text)
    for cue in cues:
        if cue.end < cue.start:
            raise ValueError(f"cue {cue.index}: ends ({cue.end}) before it starts ({cue.start})")
    blocks = [limit.count(Block(_lines(cue.content)), "cue") for cue in cues]

    def write(found: list[list[str]]) -> bytes:
        for cue, pieces in zip(cues, found):
            cue.content = "".join(pieces)
        return srt.compose(cues, reindex=False).encode("utf-8")

    return Document(blocks, write, unit="cue")


def _cues(text: str) -> list[Any]:
    """The cues of `text` as srt.Subtitle, or ValueError naming the line that is not one."""
    import srt

    *broken, rest = text.split("\n")  # lines that end in "\n" or "\r\n", and the rest
    lines = [line.removesuffix("\r") for line in broken] + [rest]
    at = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if at < len(lines):  # spaces before the first cue are no part of it
        lines[at] = lines[at].lstrip()
    cues = []
    while at < len(lines):
        index, timed = None, _timing_after(lines, at)  # a number, then a timing
        if timed is not None:
            index, at = int(NUMBER.fullmatch(lines[at])[1]), timed
        timing = TIMING.fullmatch(lines[at])
        if not timing:
            raise ValueError(
                f"line {at + 1}: expected a cue's timing (00:00:01,000 --> 00:00:02,500), "
                f"got {lines[at][:40]!r}"
            )
        end, after = _text_end(lines, at + 1)
        start, stop = (srt.srt_timestamp_to_timedelta(t) for t in timing.group(1, 2))
        cues.append(srt.Subtitle(index, start, stop, "\n".join(lines[at + 1 : end]), timing[3]))
        at = after
    return cues


def _text_end(lines: list[str], first: int) -> tuple[int, int]:
    """Where the text of a cue whose text starts at line `first` ends (its lines are
    lines[first:end]) and where the next cue starts: (end, next), as srt finds them."""
    last = len(lines) - 1
    if first > last or (first == last and not lines[first]):  # the file ends after the timing
        return first, len(lines)
    if not lines[first]:  # no text, if a cue follows the blank line
        after = _after_break(lines, first + 1)
        if after is not None:
            return first, after
    for end in range(first + 1, len(lines)):
        after = _after_break(lines, end)
        if after is not None:
            return end, after
    return len(lines), len(lines)


def _after_break(lines: list[str], at: int) -> int | None:
    """Where the next cue starts if the text before the line break ending line `at - 1` is a
    cue's whole text, else None: the end of the file, a blank line and a cue's number or
    timing line after it, or a cue's number and timing line with no blank line before."""
    last = len(lines) - 1
    if at == last and not lines[at]:
        return len(lines)
    if not lines[at]:
        if at + 1 == last and not lines[last]:
            return len(lines)
        return at + 1 if _starts_cue(lines, at + 1, numbered=False) else None
    return at if _starts_cue(lines, at, numbered=True) else None


def _starts_cue(lines: list[str], at: int, numbered: bool) -> bool:
    """Whether line `at` starts a cue: a cue's number and a timing, or (unless `numbered`) a
    line starting with a timing."""
    if not numbered and TIMESTAMP.match(lines[at]):
        return True
    return _timing_after(lines, at) is not None


def _timing_after(lines: list[str], at: int) -> int | None:
    """The line starting with a timing that follows a cue's number on line `at` (blank lines
    may come between, as srt reads them), or None."""
    if not NUMBER.fullmatch(lines[at]):
        return None
    following = at + 1
    while following < len(lines) and not lines[following].strip():
        following += 1
    return following if following < len(lines) and TIMESTAMP.match(lines[following]) else None


def _lines(content: str) -> list[str]:
    """A cue's lines and the line breaks between them, each a piece."""
    pieces = []
    for i, line in enumerate(content.split("\n")):
        pieces += ["\n", line] if i else [line]
    return pieces
