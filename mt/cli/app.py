"""The `mt` command line's application and what its commands share: the `--config` and
`--set` options and reading the config they name, and a bad value said of the environment
variable it came from."""

from __future__ import annotations

import os
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


def from_environment(ctx: typer.Context, name: str, why: str) -> str | None:
    """What is wrong with the option `name`'s value (`why`), said of the environment variable
    it came from (`mt serve` reads MT_SERVE_<OPTION>: click's auto_envvar_prefix), as
    "MT_SERVE_PORT=abc: why (--port)"; None if it came from the command line or a default."""
    from typer._click.core import ParameterSource

    if ctx.get_parameter_source(name) is not ParameterSource.ENVIRONMENT:
        return None
    param = next(p for p in ctx.command.params if p.name == name)
    variable = param.envvar if isinstance(param.envvar, str) else None
    variable = variable or f"{ctx.auto_envvar_prefix}_{name.upper()}"
    flag = param.opts[0] if param.opts[0].startswith("-") else name
    return f"{variable}={os.environ.get(variable, '')}: {why} ({flag})"
