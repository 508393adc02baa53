"""The `mt` command line: prepare, train, translate, evaluate, score, average.

Every command takes `--config FILE` and `--set section.key=value` overrides. Errors a person
can fix print one line on stderr and exit non-zero (2 for usage and configuration errors);
MT_DEBUG=1 prints their traceback too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from . import __version__
from .config import Config, load_config
from .errors import ConfigError, MtError
from .serve import Settings as ServeSettings  # its defaults are the options'; no server deps

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


def _config(config: str, overrides: list[str] | None) -> Config:
    return load_config(config, overrides or [])


@app.command()
def prepare(
    config: ConfigOption = "base.yaml",
    set_: SetOption = None,
    rebuild: Annotated[bool, typer.Option(help="Ignore the cache and build anew.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Load, clean and split the corpus, learn the tokenizers, encode and cache everything."""
    from .data import prepare as run_prepare
    from .finetune import base

    cfg = _config(config, set_)
    prepared = run_prepare(cfg, rebuild=rebuild, base=base)
    stats = dict(prepared.stats, reused_cache=prepared.reused, run_dir=cfg.run.dir)
    if prepared.reused:
        typer.echo(
            f"reusing the cached data in {cfg.run.dir}/data (fingerprint {stats['fingerprint']})",
            err=True,
        )
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
    from .train import train as run_train

    set_ = [*(set_ or []), *([f"train.init={init}"] if init else [])]
    cfg = _config(config, set_)
    hint = shlex.join(
        ["mt", "train", "--config", config, *(a for item in set_ for a in ("--set", item))]
    )
    result = run_train(cfg, restart=restart, resume_hint=hint)
    if result["signal"]:
        raise typer.Exit(SIGNAL_EXIT.get(result["signal"], 1))


def _open(
    checkpoint: str | None,
    config: str | None,
    overrides: list[str] | None,
    device: str,
    engine: str = "torch",
    threads: int = 0,
    **options: int | None,
):
    """The translator of a decoding command: --set decode.* and then the command's own
    options (--beam ...) over the model's decode section."""
    from .engine import decode_options, open_translator

    decode = [*(overrides or []), *decode_options(**options)]
    return open_translator(checkpoint, engine, device, threads, decode, config)


EngineOption = Annotated[
    str,
    typer.Option(
        help="auto (ctranslate2 for a folder from mt export, else torch), torch or ctranslate2."
    ),
]
ThreadsOption = Annotated[
    int, typer.Option(help="CPU threads of the ctranslate2 engine; 0: its default.")
]


CheckpointOption = Annotated[
    str | None,
    typer.Option(
        "--checkpoint",
        help="Run folder (its best, else last), checkpoint folder or "
        "weights file. Default: the newest run under ./runs.",
    ),
]
DecodeConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config", "-c", help="A config whose decode section applies (default: the checkpoint's)."
    ),
]
DecodeSetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a decoding key: decode.key=value. Repeatable."),
]
BeamOption = Annotated[int | None, typer.Option(help="Beam size (decode.beam); 1 is greedy.")]
BatchTokensOption = Annotated[
    int | None,
    typer.Option("--batch-tokens", help="Source tokens a batch (decode.batch_tokens)."),
]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")]


@app.command(name="translate")
def translate_command(
    texts: Annotated[list[str] | None, typer.Argument(help="English sentences.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="One sentence a line; - for stdin.")
    ] = None,
    checkpoint: CheckpointOption = None,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    beam: BeamOption = None,
    nbest: Annotated[
        int | None,
        typer.Option(help="Translations per input (decode.nbest): index, rank, score, text."),
    ] = None,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
) -> None:
    """Translate English to Spanish: arguments, a file, stdin, or an interactive prompt.

    With --nbest N > 1 each line is INDEX<TAB>RANK<TAB>SCORE<TAB>TRANSLATION (INDEX from 0,
    RANK from 1, SCORE the length-normalised log-probability).
    """
    lines, interactive = _input_lines(texts, file)
    translator = _open(
        checkpoint,
        config,
        set_,
        device,
        engine,
        threads,
        beam=beam,
        nbest=nbest,
        batch_tokens=batch_tokens,
    )
    if not interactive:
        _print_translations(translator, lines)
        return
    typer.echo(f"mt: translating with {translator.path} (Ctrl-D to quit)", err=True)
    while True:
        typer.echo("en> ", err=True, nl=False)  # the prompt is not output: stderr
        line = sys.stdin.readline()
        if not line:
            typer.echo(err=True)
            return
        _print_translations(translator, [line.rstrip("\n")])


def _input_lines(texts: list[str] | None, file: str | None) -> tuple[list[str], bool]:
    """The sentences to translate, and whether to prompt for them instead (no input given,
    stdin a terminal)."""
    from .corpus import read_lines

    if texts and file:
        raise ConfigError("give sentences as arguments or --file, not both")
    lines = list(texts or [])
    if file:
        lines = read_lines(file, "--file")
    interactive = not lines and not file and sys.stdin.isatty()
    if not lines and not file and not interactive:
        lines = read_lines("-", "stdin")
    return lines, interactive


def _print_translations(translator, batch: list[str]) -> None:
    """Each translation on a line, or with --nbest N > 1: INDEX, RANK, SCORE, TRANSLATION."""
    found = translator.translate_nbest(batch, progress=len(batch) > 100)
    for i, hyps in enumerate(found):
        if translator.config.decode.nbest == 1:
            typer.echo(hyps[0][0])
        else:
            for rank, (text, score) in enumerate(hyps, start=1):
                typer.echo(f"{i}\t{rank}\t{score:.4f}\t{text}")


@app.command(name="evaluate")
def evaluate_command(
    checkpoint: Annotated[
        str,
        typer.Argument(help="Run folder, checkpoint folder or file, or a folder from mt export."),
    ],
    split: Annotated[
        str, typer.Option(help="The run's own split to decode: test or valid.")
    ] = "test",
    pairs: Annotated[
        str | None,
        typer.Option(help="External pairs in any corpus format (.jsonl, .csv, .parquet ...)."),
    ] = None,
    src: Annotated[str | None, typer.Option(help="External source file, one per line.")] = None,
    ref: Annotated[str | None, typer.Option(help="Its references, one per line.")] = None,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    beam: BeamOption = None,
    out: Annotated[str | None, typer.Option(help="Write the hypotheses to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
) -> None:
    """Translate a test set and score it with sacreBLEU: BLEU and chrF."""
    from .evaluate import evaluate, evaluation_set
    from .files import atomic_write_text

    translator = _open(
        checkpoint, config, set_, device, engine, threads, beam=beam, batch_tokens=batch_tokens
    )
    # an exported folder evaluates on the split of the run it was exported from
    found = evaluation_set(translator.run_dir, translator.config, split, pairs, src, ref)
    result, hypotheses = evaluate(translator, *found)
    if out:
        atomic_write_text(Path(out), "".join(h + "\n" for h in hypotheses))
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        typer.echo(
            f"{result['data']}: {result['sentences']} sentences, beam {result['beam']}, "
            f"{result['seconds']:.1f} s ({result['sentences_per_s']:.1f} sentences/s)\n"
            f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}\n"
            f"chrF {result['chrf']:.2f}  {result['chrf_signature']}"
        )


@app.command(name="score")
def score_command(
    checkpoint: Annotated[str, typer.Argument(help="Run folder, checkpoint folder or file.")],
    pairs: Annotated[
        str, typer.Option(help="The pairs to score, in any corpus format (.jsonl, .csv ...).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a pair.")] = False,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
) -> None:
    """Print the model's log-probability of each pair's translation given its source.

    Each line is LOGPROB<TAB>PER_TOKEN<TAB>SCORE for a pair, in order: the total over the
    target's tokens and EOS, per token, and length-normalised as beam search ranks
    (decode.alpha). With --json, an object a line with the pair and its token count too.
    """
    from .corpus import read_pairs

    if not Path(pairs).is_file():
        raise ConfigError(f"--pairs {pairs}: no such file")
    translator = _open(checkpoint, config, set_, device, "torch", batch_tokens=batch_tokens)
    found = read_pairs([pairs], translator.config.data, "--pairs")
    scores = translator.score(found)
    for (src, tgt), s in zip(found, scores):
        if as_json:
            row = {"src": src, "tgt": tgt, **dataclasses.asdict(s)}
            typer.echo(json.dumps(row, ensure_ascii=False))
        else:
            typer.echo(f"{s.logprob:.4f}\t{s.per_token:.4f}\t{s.score:.4f}")


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
    from .layout import checkpoints_dir

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
    typer.echo(f"averaged {len(files)} checkpoints into {out}", err=True)


@app.command(name="export")
def export_command(
    checkpoint: Annotated[
        str, typer.Argument(help="Run folder (its best, else last), checkpoint folder or file.")
    ],
    out: Annotated[str, typer.Option(help="The folder to write.")],
    fmt: Annotated[str, typer.Option("--format", help="ctranslate2.")] = "ctranslate2",
    quantization: Annotated[
        str, typer.Option(help="int8, int8_float32, bfloat16, float16 or float32.")
    ] = "float32",
    force: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    r"""Export a checkpoint (or mt average's output) for serving with CTranslate2.

    The folder holds the CT2 model, the tokenizers and mt.json; mt translate and mt evaluate
    accept it. Needs ctranslate2: pip install 'mt\[export]'.
    """
    from .export import export

    command = shlex.join(["mt", *sys.argv[1:]])
    typer.echo(f"wrote {export(checkpoint, out, fmt, quantization, force, command)}", err=True)


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
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    device: DeviceOption = "auto",
) -> None:
    r"""Translate a sentence (greedy search) and draw each head's attention of a decoder layer.

    Prints the translation on stdout and the PNG's path on stderr. Needs matplotlib:
    pip install 'mt\[plot]'.
    """
    from .plot import plot_attention

    translator = _open(checkpoint, config, set_, device)
    translation, path = plot_attention(translator, sentence, out, layer=layer, kind=kind)
    typer.echo(translation)
    typer.echo(f"wrote {path}", err=True)


@app.command(name="serve")
def serve_command(
    checkpoint: Annotated[
        str | None,
        typer.Argument(
            help="Run folder, checkpoint folder or file, or a folder from mt export. "
            "Default: the newest run under ./runs."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8000,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
    max_chars: Annotated[
        int, typer.Option(help="Characters a text may have (413 beyond).")
    ] = ServeSettings.max_chars,
    max_texts: Annotated[
        int, typer.Option(help="Texts a request may hold (413 beyond).")
    ] = ServeSettings.max_texts,
    max_requests: Annotated[
        int, typer.Option(help="Requests waiting or decoding at once (503 beyond).")
    ] = ServeSettings.max_requests,
    batch_texts: Annotated[
        int, typer.Option(help="Texts of concurrent requests one decoder batch gathers at most.")
    ] = ServeSettings.batch_texts,
    batch_wait_ms: Annotated[
        float, typer.Option(help="How long a batch waits for more requests after its first.")
    ] = ServeSettings.batch_wait_ms,
) -> None:
    r"""Serve translations over HTTP: LibreTranslate's JSON API and a page.

    Open http://HOST:PORT/ in a browser. Ctrl-C or SIGTERM finishes the requests in flight
    and stops. Needs starlette and uvicorn: pip install 'mt\[serve]'.
    """
    from .serve import run

    settings = ServeSettings(max_chars, max_texts, max_requests, batch_texts, batch_wait_ms)
    run(lambda: _open(checkpoint, config, set_, device, engine, threads), settings, host, port)


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
    """The one error boundary: an expected failure (MtError, a usage error) is one stderr line
    `mt: error: ...` and its exit status (2 for usage, configuration and input errors); with
    MT_DEBUG=1 its traceback comes first. Anything else is a bug and keeps its traceback."""
    from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer's own click

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as e:  # plain `mt`: the help, as before
        e.show()
        code = e.exit_code
    except UsageError as e:  # unknown option, missing argument, bad value
        code = _fail(e.format_message(), 2)
    except typer.Abort:  # end of input at a prompt
        code = _fail("interrupted", 130)
    except MtError as e:
        code = _fail(str(e), e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> int:
    if os.environ.get("MT_DEBUG") == "1":
        traceback.print_exc()
    print(f"mt: error: {' '.join(message.split())}", file=sys.stderr)
    return code
