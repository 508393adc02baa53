"""The one shape of an exporter: a `Converter` says what its format cannot hold and writes a
folder; `convert` runs the sequence every format shares, so that an export either refuses
in one line before the slow part or leaves a whole folder.

The sequence: an existing OUT refused unless --force, the checkpoint resolved, every reason
the format cannot hold it refused at once (from its config, before the weights are read),
the format's optional extra required, the checkpoint loaded, and the folder written under a
temporary name and renamed into place (mt.files.atomic_path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

from ..errors import ConfigError
from ..files import atomic_path


class Converter(Protocol):
    """An export format (one of mt.export.FORMATS), built with the options it takes."""

    cannot: ClassVar[str]  # "CTranslate2 cannot represent": how a refusal begins
    options: ClassVar[tuple[str, ...]]  # the options of `mt export` it takes (quantization)

    def refusals(self, file: Path) -> list[str]:
        """Every reason the format cannot hold checkpoint `file` (none: it can)."""
        ...

    def require(self) -> None:
        """Refuse in one line where the format's optional extra is not installed."""
        ...

    def write(self, loaded: Any, folder: Path) -> None:
        """Write `loaded` (a `checkpoint.Loaded`) as the folder `folder`, which does not
        exist yet."""
        ...


def convert(converter: Converter, checkpoint: str | Path, out: str | Path, force: bool) -> Path:
    """Write `checkpoint` (a run folder, checkpoint folder or file) as the folder `out` in
    `converter`'s format and return its path (the module's docstring)."""
    from .. import checkpoint as ckpt

    out = Path(out)
    if out.exists() and not force:
        raise ConfigError(f"{out}: already exists (pass --force to replace it)")
    file = ckpt.resolve(checkpoint)
    refusals = converter.refusals(file)
    if refusals:
        raise ConfigError(f"{file}: {converter.cannot} {'; '.join(refusals)}")
    converter.require()
    loaded = ckpt.load(file)
    with atomic_path(out) as tmp:
        converter.write(loaded, tmp)
    return out
