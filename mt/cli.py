"""The `mt` command line: prepare, train, translate, evaluate, average.

Every command takes `--config FILE` and `--set section.key=value` overrides. Errors a person
can fix print one line on stderr and exit non-zero (2 for usage and configuration errors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from . import __version__
from .config import Config, MtError, dump_config, load_config

app = typer.Typer(
    add_completion=False,
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


def _config(config: str, overrides: list[str] | None) -> Config:
    return load_config(config, overrides or [])


def _write_resolved_config(config: Config) -> None:
    from .data import atomic_write_text

    run_dir = Path(config.run.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", dump_config(config))


@app.command()
def prepare(
    config: ConfigOption = "base.yaml",
    set_: SetOption = None,
    rebuild: Annotated[bool, typer.Option(help="Ignore the cache and build anew.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Load, clean and split the corpus, learn the tokenizers, encode and cache everything."""
    from .data import prepare as run_prepare

    cfg = _config(config, set_)
    _write_resolved_config(cfg)
    prepared = run_prepare(cfg, rebuild=rebuild)
    stats = dict(prepared.stats, reused_cache=prepared.reused, run_dir=cfg.run.dir)
    if prepared.reused:
        typer.echo(
            f"reusing the cached data in {cfg.run.dir}/data (fingerprint {stats['fingerprint']})",
            err=True,
        )
    if as_json:
        typer.echo(json.dumps(stats, ensure_ascii=False))
    else:
        typer.echo(format_summary(stats))


def format_summary(stats: dict) -> str:
    """The data summary as a small plain-text table."""
    lines = [
        f"{'split':<8}{'pairs':>10}{'src tokens':>14}{'tgt tokens':>14}"
        f"{'src mean':>10}{'tgt mean':>10}"
    ]
    for name, pairs in stats["pairs"].items():
        src, tgt = stats["tokens"][name]["src"], stats["tokens"][name]["tgt"]
        per_pair = max(pairs, 1)
        lines.append(
            f"{name:<8}{pairs:>10,}{src:>14,}{tgt:>14,}"
            f"{src / per_pair:>10.1f}{tgt / per_pair:>10.1f}"
        )
    dropped = ", ".join(f"{why} {n:,}" for why, n in stats["dropped"].items())
    vocab, rt = stats["vocab_size"], stats["round_trip"]
    lines += [
        f"dropped: {dropped}",
        f"vocabulary: source {vocab['src']:,}, target {vocab['tgt']:,}",
        f"round trip decode(encode(s)) == s: source {rt['src']:.2%}, target {rt['tgt']:.2%} "
        f"of {rt['sentences']:,} held-out sentences",
        f"cache: {stats['run_dir']}/data (fingerprint {stats['fingerprint']})",
    ]
    return "\n".join(lines)


def main() -> None:
    try:
        app()
    except MtError as e:
        print(f"mt: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
