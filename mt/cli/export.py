"""`mt export`: a checkpoint written for another runtime, CTranslate2 or transformers
(mt.export)."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer

from ..messages import say
from .app import app


@app.command(name="export")
def export_command(
    checkpoint: Annotated[
        str, typer.Argument(help="Run folder (its best, else last), checkpoint folder or file.")
    ],
    out: Annotated[str, typer.Option(help="The folder to write.")],
    fmt: Annotated[
        str, typer.Option("--format", help="ctranslate2, or hf (a transformers MarianMT folder).")
    ] = "ctranslate2",
    quantization: Annotated[
        str | None,
        typer.Option(
            help="int8, int8_float32, bfloat16, float16 or float32 (ctranslate2 only; "
            "default float32)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
) -> None:
    r"""Export a checkpoint (or mt average's output) for serving with CTranslate2, or as a
    transformers MarianMT folder (--format hf).

    The CT2 folder holds the CT2 model, the tokenizers and mt.json; mt translate and mt
    evaluate accept it. Needs ctranslate2: pip install 'mt\[export]'. The hf folder loads with
    AutoModelForSeq2SeqLM, AutoTokenizer and pipeline("translation"); mt opens it too. Needs
    pip install 'mt\[hf]'.
    """
    from ..export import converter_for
    from ..export.converter import convert

    given = {"quantization": quantization} if quantization is not None else {}
    converter = converter_for(fmt, given, shlex.join(["mt", *sys.argv[1:]]))
    say(f"wrote {convert(converter, checkpoint, out, force)}")
