"""Export: a trained model written in another runtime's format (`mt export`), one `Converter`
a format (mt.export.converter): `to_ctranslate2` (CTranslate2) and `to_marian` (a transformers
MarianMT folder). The way in, a Marian model read as ours, is mt.from_marian."""

from __future__ import annotations

from ..errors import ConfigError
from .converter import Converter
from .to_ctranslate2 import ToCTranslate2
from .to_marian import ToMarian

FORMATS = {"ctranslate2": ToCTranslate2, "hf": ToMarian}  # --format's values


def converter_for(fmt: str, options: dict[str, str], command: str | None = None) -> Converter:
    """The converter of `--format fmt` with the `options` given on the command line
    (quantization ...): an unknown format, and every option the format does not take,
    refused in one line. `command`: the command line, for the formats that record it."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: unknown (known: {', '.join(FORMATS)})")
    kind = FORMATS[fmt]
    foreign = [f"--{name}" for name in options if name not in kind.options]
    if foreign:
        raise ConfigError(f"{', '.join(foreign)}: not an option of --format {fmt}")
    recorded = {"command": command} if hasattr(kind, "command") else {}  # CT2's mt.json
    return kind(**options, **recorded)
