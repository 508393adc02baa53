"""The `mt` command line: prepare, train, translate, evaluate, average.

Every command takes `--config FILE` and `--set section.key=value` overrides. Errors a person
can fix print one line on stderr and exit non-zero (2 for usage and configuration errors).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from . import __version__
from .config import Config, dump_config, load_config
from .errors import ConfigError, MtError

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
    from .files import atomic_write_text

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
    prepared = run_prepare(cfg, rebuild=rebuild)
    _write_resolved_config(cfg)  # after success: a failed prepare leaves the run folder as it was
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


@app.command()
def train(
    config: ConfigOption = "base.yaml",
    set_: SetOption = None,
    restart: Annotated[
        bool, typer.Option(help="Discard the run's checkpoints and metrics and start over.")
    ] = False,
) -> None:
    """Train a model, or resume the run in run.dir where it stopped."""
    from .train import train as run_train

    cfg = _config(config, set_)
    hint = shlex.join(
        [
            "mt",
            "train",
            "--config",
            config,
            *(arg for item in set_ or [] for arg in ("--set", item)),
        ]
    )
    run_train(cfg, restart=restart, resume_hint=hint)


def _load_checkpoint(checkpoint: str | None, device: str):
    from . import checkpoint as ckpt
    from .device import pick_device

    dev = pick_device(device)
    return ckpt.load(checkpoint or _newest_run(), dev), dev


def _newest_run() -> Path:
    """The run folder under ./runs whose checkpoint was written last."""
    links = [
        link
        for link in Path("runs").glob("*/checkpoints/*")
        if link.name in ("best", "last") and link.exists()
    ]
    if not links:
        raise ConfigError("no trained model under ./runs; pass --checkpoint RUN_DIR or FILE")
    return max(links, key=lambda p: p.stat().st_mtime).parent.parent


CheckpointOption = Annotated[
    str | None,
    typer.Option(
        "--checkpoint",
        help="Run folder (its best, else last), checkpoint folder or "
        "weights file. Default: the newest run under ./runs.",
    ),
]
BeamOption = Annotated[int | None, typer.Option(help="Beam size; 1 is greedy. Default: config.")]
BatchTokensOption = Annotated[
    int | None, typer.Option("--batch-tokens", help="Source tokens per batch. Default: config.")
]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")]


@app.command(name="translate")
def translate_command(
    texts: Annotated[list[str] | None, typer.Argument(help="English sentences.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="One sentence a line; - for stdin.")
    ] = None,
    checkpoint: CheckpointOption = None,
    beam: BeamOption = None,
    nbest: Annotated[int, typer.Option(help="Print this many translations per input.")] = 1,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
) -> None:
    """Translate English to Spanish: arguments, a file, stdin, or an interactive prompt."""
    from .evaluate import translate

    if texts and file:
        raise ConfigError("give sentences as arguments or --file, not both")
    lines = list(texts or [])
    if file:
        lines = _read_lines(file)
    interactive = not lines and not file and sys.stdin.isatty()
    if not lines and not file and not interactive:
        lines = _read_lines("-")
    loaded, dev = _load_checkpoint(checkpoint, device)
    beam = beam or loaded.config.decode.beam
    if nbest < 1 or nbest > beam:
        raise ConfigError(f"--nbest {nbest}: must be between 1 and the beam size ({beam})")

    def run(batch: list[str]) -> None:
        out = translate(
            loaded.model,
            loaded.src_tokenizer,
            loaded.tgt_tokenizer,
            batch,
            loaded.config.decode,
            beam=beam,
            nbest=nbest,
            batch_tokens=batch_tokens,
            device=dev,
            progress=len(batch) > 100,
        )
        for i, result in enumerate(out):
            if nbest == 1:
                typer.echo(result)
            else:
                for rank, line in enumerate(result, start=1):
                    typer.echo(f"{i}\t{rank}\t{line}")

    if not interactive:
        run(lines)
        return
    typer.echo(f"mt: translating with {loaded.path} (Ctrl-D to quit)", err=True)
    while True:
        try:
            line = input("en> ")
        except EOFError:
            typer.echo(err=True)
            return
        run([line])


@app.command(name="evaluate")
def evaluate_command(
    checkpoint: Annotated[str, typer.Argument(help="Run folder, checkpoint folder or file.")],
    split: Annotated[
        str, typer.Option(help="The run's own split to decode: test or valid.")
    ] = "test",
    pairs: Annotated[
        str | None, typer.Option(help='External JSON Lines {"en", "es"} (.gz allowed).')
    ] = None,
    src: Annotated[str | None, typer.Option(help="External source file, one per line.")] = None,
    ref: Annotated[str | None, typer.Option(help="Its references, one per line.")] = None,
    beam: BeamOption = None,
    out: Annotated[str | None, typer.Option(help="Write the hypotheses to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
) -> None:
    """Translate a test set and score it with sacreBLEU: BLEU and chrF."""
    import time

    from .data import normalize, read_pairs_jsonl
    from .evaluate import score, translate
    from .files import atomic_write_text

    if split not in ("test", "valid"):
        raise ConfigError(f"--split {split}: must be test or valid")
    if (src is None) != (ref is None):
        raise ConfigError("--src and --ref go together")
    if pairs and src:
        raise ConfigError("give --pairs or --src/--ref, not both")
    loaded, dev = _load_checkpoint(checkpoint, device)
    cfg = loaded.config
    if pairs:
        _require_file(pairs, "--pairs")
        sources, references = zip(*read_pairs_jsonl(pairs, cfg.data.src_lang, cfg.data.tgt_lang))
        name = pairs
    elif src and ref:
        sources = [normalize(x) for x in _read_lines(src, "--src")]
        references = [normalize(x) for x in _read_lines(ref, "--ref")]
        if len(sources) != len(references):
            raise ConfigError(
                f"--src {src} has {len(sources)} lines but --ref {ref} has {len(references)}"
            )
        name = src
    else:
        cached = _run_dir_of(loaded.path, cfg) / "data" / f"{split}.jsonl"
        if not cached.is_file():
            raise ConfigError(
                f"{cached}: the run's {split} split is not there; pass --pairs "
                "FILE or --src FILE --ref FILE"
            )
        sources, references = zip(*read_pairs_jsonl(cached, "src", "tgt"))
        name = f"{split} split of {cached.parent.parent}"
    beam = beam or cfg.decode.beam
    started = time.perf_counter()
    hypotheses = translate(
        loaded.model,
        loaded.src_tokenizer,
        loaded.tgt_tokenizer,
        sources,
        cfg.decode,
        beam=beam,
        batch_tokens=batch_tokens,
        device=dev,
        progress=True,
    )
    seconds = time.perf_counter() - started
    result = dict(
        score(hypotheses, references),
        sentences=len(sources),
        beam=beam,
        seconds=seconds,
        sentences_per_s=len(sources) / max(seconds, 1e-9),
        checkpoint=str(loaded.path),
        data=name,
    )
    result["signature"] = result["bleu_signature"]
    if out:
        atomic_write_text(Path(out), "".join(h + "\n" for h in hypotheses))
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        typer.echo(
            f"{name}: {len(sources)} sentences, beam {beam}, {seconds:.1f} s "
            f"({result['sentences_per_s']:.1f} sentences/s)\n"
            f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}\n"
            f"chrF {result['chrf']:.2f}  {result['chrf_signature']}"
        )


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
    from . import checkpoint as ckpt

    if last is not None:
        if len(checkpoints) != 1 or not Path(checkpoints[0]).is_dir():
            raise ConfigError("--last N takes exactly one run folder")
        if last < 1:
            raise ConfigError(f"--last {last}: must be at least 1")
        files = ckpt.newest_steps(Path(checkpoints[0]) / "checkpoints", last)
        if len(files) < last:
            raise ConfigError(
                f"{checkpoints[0]}: --last {last} asked, but the run has only "
                f"{len(files)} step checkpoints"
            )
    else:
        files = [ckpt.resolve(c) for c in checkpoints]
    ckpt.average(files, Path(out))
    typer.echo(f"averaged {len(files)} checkpoints into {out}", err=True)


# The help texts write mt\[plot]: rich would take a bare [plot] for markup and drop it.
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
    from .plot import plot_run

    typer.echo(f"wrote {plot_run(run_dir, out)}", err=True)


@app.command(name="attention")
def attention_command(
    checkpoint: Annotated[str, typer.Argument(help="Run folder, checkpoint folder or file.")],
    sentence: Annotated[str, typer.Argument(help="The English sentence to translate.")],
    layer: Annotated[
        int, typer.Option(help="Decoder layer: 1 is the first, -1 (default) the last.")
    ] = -1,
    kind: Annotated[
        str, typer.Option(help="cross (output vs source tokens) or self (output vs output).")
    ] = "cross",
    out: Annotated[str, typer.Option(help="The PNG to write.")] = "attention.png",
    device: DeviceOption = "auto",
) -> None:
    r"""Translate a sentence (greedy search) and draw each head's attention of a decoder layer.

    Prints the translation on stdout and the PNG's path on stderr. Needs matplotlib:
    pip install 'mt\[plot]'.
    """
    from .plot import plot_attention

    loaded, dev = _load_checkpoint(checkpoint, device)
    translation, path = plot_attention(loaded, sentence, out, layer=layer, kind=kind, device=dev)
    typer.echo(translation)
    typer.echo(f"wrote {path}", err=True)


def _read_lines(path: str, option: str = "--file") -> list[str]:
    if path == "-":
        return sys.stdin.read().splitlines()
    _require_file(path, option)
    return Path(path).read_text(encoding="utf-8").splitlines()


def _require_file(path: str, option: str) -> None:
    if not Path(path).is_file():
        raise ConfigError(f"{option} {path}: no such file")


def _run_dir_of(weights: Path, config: Config) -> Path:
    """The run folder a weights file belongs to: checkpoints/<name>/model.safetensors."""
    if weights.parent.parent.name == "checkpoints":
        return weights.parent.parent.parent
    return Path(config.run.dir)


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
