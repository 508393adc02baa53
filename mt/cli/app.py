"""The `mt` command line's application and what its commands share: the `--config` and
`--set` options and reading the config they name."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import __version__
from ..config import Config
from ..config_file import load_config

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="English→Spanish neural machine translation with the Transformer.",
)

ConfigOption = Annotated[
    str, typer.Option("--config", "-c", help="YAML config: a path, or the name of a shipped one.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a key: section.key=value (YAML value). Repeatable."),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mt {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """English→Spanish neural machine translation with the Transformer."""


def config_of(config: str, overrides: list[str] | None) -> Config:
    """The config a command's --config and --set name."""
    return load_config(config, overrides or [])
