"""The commands that decode with a model: `mt translate`, `mt evaluate`, `mt score` and
`mt attention`, and what they share (opening the translator, the decoding options)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from ..messages import say
from .app import app
from .documents import input_documents, write_documents


def open_translator_for(
    checkpoint: str | None,
    config: str | None,
    overrides: list[str] | None,
    device: str,
    engine: str = "torch",
    threads: int = 0,
    ensemble: list[str] | None = None,
    **options: int | None,
):
    """The translator of a decoding command: --set decode.* and then the command's own
    options (--beam ...) over the model's decode section; `ensemble`: more checkpoints
    decoded with `checkpoint` as one model."""
    from ..decoding.engine import decode_options, open_translator

    decode = [*(overrides or []), *decode_options(**options)]
    return open_translator(checkpoint, engine, device, threads, decode, config, ensemble or ())


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
EnsembleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--checkpoint",
        help="Another checkpoint of the same tokenizers, decoded with CHECKPOINT as one "
        "ensemble (the mean of their probabilities). Repeatable.",
    ),
]
ConstraintsOption = Annotated[
    str | None,
    typer.Option(
        help="Target terms each translation must contain: a line per input, tab-separated."
    ),
]
GlossaryOption = Annotated[
    str | None,
    typer.Option(help="source TAB target terms: an input with a source term must have its target."),
]
SeedOption = Annotated[
    int | None, typer.Option(help="Seed of decode.sampling (decode.seed; default run.seed).")
]


def split_option(default: str) -> object:
    """--split-sentences/--no-split-sentences: cut each text into sentences (mt.text) or not."""
    return typer.Option(
        "--split-sentences/--no-split-sentences",
        help="Cut each text into sentences, translate them and join them, its spacing and "
        f"line breaks kept; --no-split-sentences: each text is one sentence already. {default}",
    )


@app.command(name="translate")
def translate_command(
    texts: Annotated[list[str] | None, typer.Argument(help="English sentences.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="One sentence a line; - for stdin.")
    ] = None,
    checkpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--checkpoint",
            help="Run folder (its best, else last), checkpoint folder or weights file. "
            "Default: the newest run under ./runs. Repeated: an ensemble of them.",
        ),
    ] = None,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    beam: BeamOption = None,
    nbest: Annotated[
        int | None,
        typer.Option(help="Translations per input (decode.nbest): index, rank, score, text."),
    ] = None,
    batch_tokens: BatchTokensOption = None,
    prefix: Annotated[
        str | None, typer.Option(help="Target text every translation starts with.")
    ] = None,
    seed: SeedOption = None,
    constraints: ConstraintsOption = None,
    glossary: GlossaryOption = None,
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
    split_sentences: Annotated[bool, split_option("Default: split.")] = True,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="text, or html: the text translated, the markup kept (an argument"
            " each, or the whole file or stdin).",
        ),
    ] = "text",
    out: Annotated[
        str | None,
        typer.Option(help="Write the translated document here (needed for .docx and .odt)."),
    ] = None,
) -> None:
    """Translate English to Spanish: arguments, a file, stdin, or an interactive prompt.

    Each input (an argument, a line) is cut into sentences, all of them decoded together and
    joined again with the input's spacing: one line in, one line out. With --nbest N > 1 each
    line is INDEX<TAB>RANK<TAB>SCORE<TAB>TRANSLATION (INDEX from 0, RANK from 1, SCORE the
    length-normalised log-probability); for an input of several sentences the K-th joins each
    sentence's K-th translation, its score the mean of theirs. A --file ending in .html,
    .docx, .odt or .srt is translated with its layout kept, as is --format html.
    --set decode.sampling=true samples instead of searching (decode.temperature, top_k, top_p;
    --nbest samples each). A line given a --prefix or terms (--constraints, --glossary) is
    translated whole.
    """
    documents = input_documents(texts, file, fmt, out)
    if documents and (nbest or 1) > 1:
        raise ConfigError("--nbest: a document gets one translation (--nbest 1)")
    if documents and (prefix or constraints or glossary):
        raise ConfigError("--prefix, --constraints and --glossary are for text, not documents")
    first, *others = checkpoint or [None]
    options = dict(beam=beam, nbest=nbest, batch_tokens=batch_tokens, seed=seed)
    translator = open_translator_for(
        first, config, set_, device, engine, threads, others, **options
    )
    if documents:
        write_documents(translator, documents, out, split_sentences)
        return
    lines, interactive = _input_lines(texts, file)
    steer = (prefix, constraints, glossary)
    if not interactive:
        _print_translations(translator, lines, split_sentences, *steer)
        return
    say(f"mt: translating with {translator.path} (Ctrl-D to quit)")
    while True:
        typer.echo("en> ", err=True, nl=False)  # the prompt is not output: stderr
        line = sys.stdin.readline()
        if not line:
            typer.echo(err=True)
            return
        _print_translations(translator, [line.rstrip("\n")], split_sentences, *steer)


def _input_lines(texts: list[str] | None, file: str | None) -> tuple[list[str], bool]:
    """The sentences to translate, and whether to prompt for them instead (no input given,
    stdin a terminal)."""
    from ..data.text_input import read_lines

    if texts and file:
        raise ConfigError("give sentences as arguments or --file, not both")
    lines = list(texts or [])
    if file:
        lines = read_lines(file, "--file")
    interactive = not lines and not file and sys.stdin.isatty()
    if not lines and not file and not interactive:
        lines = read_lines("-", "stdin")
    return lines, interactive


def _print_translations(
    translator,
    batch: list[str],
    split: bool,
    prefix: str | None,
    constraints: str | None,
    glossary: str | None,
) -> None:
    """Each translation on a line, or with --nbest N > 1: INDEX, RANK, SCORE, TRANSLATION;
    each starting with `prefix` and containing the terms of `constraints` and `glossary`."""
    from ..decoding.constraints import terms_of
    from ..text import translate_texts_nbest

    prefixes = None if prefix is None else [prefix] * len(batch)
    terms = terms_of(batch, constraints, glossary)
    found = translate_texts_nbest(translator, batch, None, split, len(batch) > 100, prefixes, terms)
    for i, (short, placed) in enumerate(zip(found.short, found.placed), start=1):
        if short:
            say(
                f"warning: line {i}: its translation is much shorter than the source predicts "
                "(text may be lost), even translated in smaller pieces"
            )
        if placed:
            say(
                f"warning: line {i}: {placed} span(s) (numbers, URLs, placeholders) the model "
                "did not carry over exactly: put back where their neighbours are"
            )
    for i, hyps in enumerate(found.nbest):
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
    ensemble: EnsembleOption = None,
    config: DecodeConfigOption = None,
    set_: DecodeSetOption = None,
    beam: BeamOption = None,
    seed: SeedOption = None,
    system: Annotated[
        list[str] | None,
        typer.Option(
            help="Another checkpoint to decode and compare with CHECKPOINT (the baseline) by "
            "paired tests. Repeatable."
        ),
    ] = None,
    hyp: Annotated[
        list[str] | None,
        typer.Option(
            help="Another system's translations of the set, one a line, compared with "
            "CHECKPOINT's by paired tests. Repeatable."
        ),
    ] = None,
    paired: Annotated[
        str,
        typer.Option(
            help="With --system or --hyp: bs (paired bootstrap resampling), ar (approximate "
            "randomization) or both, through sacreBLEU."
        ),
    ] = "both",
    constraints: ConstraintsOption = None,
    glossary: GlossaryOption = None,
    out: Annotated[
        list[str] | None,
        typer.Option(
            help="Write the hypotheses to this file, one a line. Repeated: then each "
            "--system's, in order."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    batch_tokens: BatchTokensOption = None,
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
    split_sentences: Annotated[
        bool,
        split_option(
            "Default: split (a test line of two sentences scores better so: docs/benchmarks.md)."
        ),
    ] = True,
) -> None:
    """Translate a test set and score it with sacreBLEU: BLEU and chrF; with --system or
    --hyp, whether the other systems differ from it significantly (p-values, 95% intervals)."""
    from ..decoding import significance
    from ..decoding.constraints import terms_of
    from ..decoding.evaluate import evaluate, evaluation_set
    from ..files import atomic_write_text
    from ..text import translate_texts

    tests = significance.parse_tests(paired)
    outs = [Path(path) for path in out or []]
    if len(outs) > 1 + len(system or []):
        raise ConfigError(
            f"--out given {len(outs)} times for {1 + len(system or [])} decoded systems "
            "(CHECKPOINT and each --system)"
        )

    options = dict(beam=beam, batch_tokens=batch_tokens, seed=seed)
    translator = open_translator_for(
        checkpoint, config, set_, device, engine, threads, ensemble, **options
    )
    # an exported folder evaluates on the split of the run it was exported from
    found = evaluation_set(translator.run_dir, translator.config, split, pairs, src, ref)
    given = significance.read_hypotheses(hyp or [], len(found[1]))
    terms = terms_of(found[1], constraints, glossary)

    def texts_of(system):  # every system decodes as the first: split into sentences or not
        options = dict(split=split_sentences, progress=True, terms=terms)
        return lambda texts: translate_texts(system, texts, **options)

    result, hypotheses = evaluate(translator, *found, texts_of(translator))
    others = [
        (path, open_translator_for(path, config, set_, device, engine, threads, **options))
        for path in system or []
    ]
    decoded = [(path, evaluate(other, *found, texts_of(other))[1]) for path, other in others]
    for path, (_, lines) in zip(outs, [(checkpoint, hypotheses), *decoded]):
        atomic_write_text(path, "".join(h + "\n" for h in lines))
    if system or hyp:
        systems = [(checkpoint, hypotheses), *decoded, *given]
        result["systems"] = significance.paired_tests(systems, found[2], tests)
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        typer.echo(
            f"{result['data']}: {result['sentences']} sentences, beam {result['beam']}, "
            f"{result['seconds']:.1f} s ({result['sentences_per_s']:.1f} sentences/s)\n"
            f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}\n"
            f"chrF {result['chrf']:.2f}  {result['chrf_signature']}"
        )
        if "systems" in result:
            typer.echo(significance.table(result["systems"], tests))


@app.command(name="score")
def score_command(
    checkpoint: Annotated[str, typer.Argument(help="Run folder, checkpoint folder or file.")],
    pairs: Annotated[
        str, typer.Option(help="The pairs to score, in any corpus format (.jsonl, .csv ...).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a pair.")] = False,
    ensemble: EnsembleOption = None,
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
    from ..data.corpus import read_pairs

    if not Path(pairs).is_file():
        raise ConfigError(f"--pairs {pairs}: no such file")
    translator = open_translator_for(
        checkpoint, config, set_, device, "torch", 0, ensemble, batch_tokens=batch_tokens
    )
    found = read_pairs([pairs], translator.config.data, "--pairs")
    scores = translator.score(found)
    for (src, tgt), s in zip(found, scores):
        if as_json:
            row = {"src": src, "tgt": tgt, **dataclasses.asdict(s)}
            typer.echo(json.dumps(row, ensure_ascii=False))
        else:
            typer.echo(f"{s.logprob:.4f}\t{s.per_token:.4f}\t{s.score:.4f}")


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
    from ..decoding.attention import plot_attention

    translator = open_translator_for(checkpoint, config, set_, device)
    translation, path = plot_attention(translator, sentence, out, layer=layer, kind=kind)
    typer.echo(translation)
    say(f"wrote {path}")


# the server's limits (their defaults: ServeSettings')
