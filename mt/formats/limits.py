"""What reading a document may cost, checked while it is read, so that a hostile file fails
fast with one line naming the limit: the zip a .docx or .odt is, and the text of any document.

Zips, as OWASP's guidance on archives has it: before python-docx or odfdo sees one, its
directory is checked against these caps (always, mt translate --file too),

    MAX_MEMBERS  10,000 files (a document with many images holds a few hundred)
    MAX_MEMBER   64 MiB a file, as its header declares it (the XML of 400,000 characters
                 of text with tables and styles is a few MB; a large photograph, tens)
    MAX_TOTAL    256 MiB all files together
    MAX_RATIO    all files together at most 100 times the zip's size (the XML of Word and
                 LibreOffice compresses 5 to 30 times, images not at all)
    METHODS      stored or deflate only, the formats' own (bzip2 and lzma inflate without
                 bound in each of zipfile's reads)

then every file is inflated a chunk at a time into a stored copy of the zip, which is what
the libraries open. zipfile stops a file at its declared size, but inflates as much as it is
asked for in one call: read whole by a library from the original, a file whose header lies
about its size would be inflated whole before being cut; read here in chunks, it is cut
after one. Its tags are counted meanwhile, every "<" of every file (the libraries parse
whatever part the document names, and an image holds one "<" in 256 bytes):

    MAX_TAGS     500,000 (400,000 characters of text in 4,000 paragraphs, a table and an
                 image, from python-docx: 96,000; Word writes about three times as many):
                 the XML trees the libraries build take 120 to 300 bytes an element, so
                 a document costs at most about 250 MB, however compressible its XML

Text: `TextLimit` counts each block's characters (its text as the model reads it) and the
blocks themselves as a reader makes them, and refuses the document as soon as there is more
text than `max_chars` or more blocks than a quarter of it (BLOCK_CHARS: empty paragraphs and
table cells cost time and memory too, 10 to 20 µs each to walk; the document above has one
for every 90 characters), so that a reader walking a .docx or .odt stops there, not at its
end; None: no limit (mt translate --file).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from ..errors import ConfigError
from .pieces import Block

MAX_MEMBERS = 10_000
MAX_MEMBER = 64 << 20
MAX_TOTAL = 256 << 20
MAX_RATIO = 100
MAX_TAGS = 500_000
BLOCK_CHARS = 4
METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
CHUNK = 1 << 20  # inflated at a time


class DocumentError(ConfigError):
    """A document that cannot be read: not of its type, broken, or with nothing to translate."""


class DocumentTooLarge(DocumentError):
    """A document past a limit (its text, its blocks, its zip's caps); the message names the
    file and the limit."""


class MarkupTooCostly(DocumentTooLarge):
    """HTML whose parse would cost out of proportion to its size (html_cost.py)."""


def unzipped(data: bytes, where: str) -> io.BytesIO:
    """The zip `data` (the file `where`) as a stored copy, once its directory is within the
    caps; each file inflated a chunk at a time, its tags counted."""
    tags, out = 0, io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as archive, zipfile.ZipFile(out, "w") as stored:
        members = archive.infolist()
        _check(members, len(data), where)
        for info in members:
            with archive.open(info) as member, stored.open(info.filename, "w") as copy:
                while chunk := member.read(CHUNK):
                    copy.write(chunk)
                    tags += chunk.count(b"<")
                    if tags > MAX_TAGS:
                        raise DocumentTooLarge(
                            f"{where}: more than {MAX_TAGS:,} XML tags (at most {MAX_TAGS:,})"
                        )
    out.seek(0)
    return out


def _check(members: list[zipfile.ZipInfo], size: int, where: str) -> None:
    if len(members) > MAX_MEMBERS:
        raise DocumentTooLarge(
            f"{where}: {len(members):,} files in its zip, at most {MAX_MEMBERS:,}"
        )
    for info in members:
        if info.compress_type not in METHODS:
            method = zipfile.compressor_names.get(info.compress_type, info.compress_type)
            raise DocumentError(
                f"{where}: {info.filename} is compressed by {method} (only stored or deflate)"
            )
        if info.file_size > MAX_MEMBER:
            size, most = f"{info.file_size:,}", f"{MAX_MEMBER:,}"
            raise DocumentTooLarge(
                f"{where}: {info.filename} unzips to {size} bytes, at most {most}"
            )
    total = sum(info.file_size for info in members)
    if total > MAX_TOTAL:
        raise DocumentTooLarge(f"{where}: unzips to {total:,} bytes, at most {MAX_TOTAL:,}")
    if total > MAX_RATIO * size:
        raise DocumentTooLarge(
            f"{where}: unzips to {total:,} bytes, {total // size:,} times its {size:,} "
            f"(at most {MAX_RATIO} times)"
        )


@dataclass
class TextLimit:
    """The text and the blocks of the document `where`, counted as they are read."""

    where: str
    max_chars: int | None = None
    chars: int = 0
    blocks: int = 0

    def count(self, block: Block, unit: str) -> Block:
        """`block` (a `unit`: paragraph, cue ...), counted; DocumentTooLarge once the
        document has more text than max_chars, or more blocks than BLOCK_CHARS allows."""
        if self.max_chars is None:
            return block
        self.chars += len(block.source)
        self.blocks += 1
        most, blocks = self.max_chars, self.max_chars // BLOCK_CHARS
        if self.chars > most:
            raise DocumentTooLarge(
                f"{self.where}: more than {most:,} characters of text (at most {most:,})"
            )
        if self.blocks > blocks:
            raise DocumentTooLarge(
                f"{self.where}: more than {blocks:,} {unit}s (at most {blocks:,}, one for "
                f"every {BLOCK_CHARS} characters of text allowed)"
            )
        return block
