"""What mt tells the person watching: a message on stderr, written in one whole write."""

from __future__ import annotations

import sys

from tqdm import tqdm


def say(message: str) -> None:
    """`message` and its newline on stderr in one write, above any progress bar (which is
    drawn again below it): lines that processes or threads write at once (the ranks of a
    run, the server's) never run together."""
    with tqdm.external_write_mode(file=sys.stderr):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
