"""The commands that make a model: `mt prepare`, `mt train`, `mt average` and `mt plot`."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from ..messages import say
from .app import ConfigOption, SetOption, app, config_of


@app.command()
def prepare(
    config: ConfigOption = "base.yaml",
    set_: SetOption = None,
    rebuild: Annotated[bool, typer.Option(help="Ignore the cache and build anew.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Load, clean and split the corpus, learn the tokenizers, encode and cache everything."""
    from ..data.prepare import prepare as run_prepare
    from ..training.finetune import adopt, base

    cfg = config_of(config, set_)
    adopt(cfg)  # train.init a Marian model: its sections are the run's, as `mt train` takes them
    prepared = run_prepare(cfg, rebuild=rebuild, base=base)
    stats = dict(prepared.stats, reused_cache=prepared.reused, run_dir=cfg.run.dir)
    if prepared.reused:
        say(f"reusing the cached data in {cfg.run.dir}/data (fingerprint {stats['fingerprint']})")
    typer.echo(json.dumps(stats, ensure_ascii=False) if as_json else format_summary(stats))


# Exit statuses after a run stopped by a signal was saved: 128 + the signal's number, as
# shells and schedulers expect, so that a script can tell it from a finished run (0).
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


@app.command()
def train(
    config: ConfigOption = "base.yaml",
    set_: SetOption = None,
    restart: Annotated[
        bool, typer.Option(help="Discard the run's checkpoints and metrics and start over.")
    ] = False,
    init: Annotated[
        str | None,
        typer.Option(help="Fine-tune: start from this model (train.init): run or checkpoint."),
    ] = None,
) -> None:
    """Train a model, or resume the run in run.dir where it stopped.

    Ctrl-C or SIGTERM finishes the update, saves, and exits with 130 or 143. A run that
    collapsed or diverged (a health check, see train.health_checks) saves and exits with 3.
    """
    from ..training.trainer import train as run_train

    set_ = [*(set_ or []), *([f"train.init={init}"] if init else [])]
    cfg = config_of(config, set_)
    hint = shlex.join(
        ["mt", "train", "--config", config, *(a for item in set_ for a in ("--set", item))]
    )
    result = run_train(cfg, restart=restart, resume_hint=hint)
    if result["signal"]:
        raise typer.Exit(SIGNAL_EXIT.get(result["signal"], 1))


@app.command()
def average(
    checkpoints: Annotated[
        list[str], typer.Argument(help="A run folder (with --last) or checkpoint folders/files.")
    ],
    out: Annotated[str, typer.Option(help="The averaged weights file to write (.safetensors).")],
    last: Annotated[
        int | None, typer.Option(help="Average the newest N step checkpoints of a run folder.")
    ] = None,
) -> None:
    """Average the weights of several checkpoints into one."""
    from .. import checkpoint as ckpt
    from ..run_folder import checkpoints_dir

    if last is not None:
        if len(checkpoints) != 1 or not Path(checkpoints[0]).is_dir():
            raise ConfigError("--last N takes exactly one run folder")
        if last < 1:
            raise ConfigError(f"--last {last}: must be at least 1")
        files = ckpt.newest_steps(checkpoints_dir(checkpoints[0]), last)
        if len(files) < last:
            raise ConfigError(
                f"{checkpoints[0]}: --last {last} asked, but the run has only "
                f"{len(files)} step checkpoints"
            )
    else:
        files = [ckpt.resolve(c) for c in checkpoints]
    ckpt.average(files, Path(out))
    say(f"averaged {len(files)} checkpoints into {out}")


@app.command(name="plot")
def plot_command(
    run_dir: Annotated[str, typer.Argument(help="The run folder (with metrics.jsonl).")],
    out: Annotated[
        str | None, typer.Option(help="The PNG to write. Default: RUN_DIR/training.png.")
    ] = None,
) -> None:
    r"""Plot loss, validation BLEU, learning rate and tokens/s against updates (and time).

    Works while the run is still training. Needs matplotlib: pip install 'mt\[plot]'.
    """
    from ..training.plot import plot_run

    say(f"wrote {plot_run(run_dir, out)}")


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
