"""SubRip subtitles (.srt, read and written by `srt`): each cue's text a block, its lines the
pieces (so a two-line cue stays two lines), its number and timings as they were."""

from __future__ import annotations

from .pieces import Block, Document


def read_srt(text: str) -> Document:
    """The cues of an .srt file as blocks; a cue that ends before it starts is refused."""
    import srt

    cues = list(srt.parse(text))
    for cue in cues:
        if cue.end < cue.start:
            raise ValueError(f"cue {cue.index}: ends ({cue.end}) before it starts ({cue.start})")
    blocks = [Block(_lines(cue.content)) for cue in cues]

    def write(found: list[list[str]]) -> bytes:
        for cue, pieces in zip(cues, found):
            cue.content = "".join(pieces)
        return srt.compose(cues, reindex=False).encode("utf-8")

    return Document(blocks, write, unit="cue")


def _lines(content: str) -> list[str]:
    """A cue's lines and the line breaks between them, each a piece."""
    pieces = []
    for i, line in enumerate(content.split("\n")):
        pieces += ["\n", line] if i else [line]
    return pieces
