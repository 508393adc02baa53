"""`mt serve`: a model put to work behind an HTTP API and a web page."""

from __future__ import annotations

from typing import Annotated

import typer

from ..serve.batcher import (
    Settings as ServeSettings,  # its defaults are the options'; no server deps
)
from .app import app
from .decoding import (
    DecodeConfigOption,
    DecodeSetOption,
    DeviceOption,
    EngineOption,
    ThreadsOption,
    open_translator_for,
)

# The help texts write mt\[plot]: rich would take a bare [plot] for markup and drop it.


MaxCharsOption = Annotated[int, typer.Option(help="Characters a text may have (413 beyond).")]
MaxTextsOption = Annotated[int, typer.Option(help="Texts a request may hold (413 beyond).")]
MaxRequestsOption = Annotated[
    int, typer.Option(help="Requests waiting or decoding at once (503 beyond).")
]
BatchTextsOption = Annotated[
    int, typer.Option(help="Texts of concurrent requests one decoder batch gathers at most.")
]
BatchWaitOption = Annotated[
    float, typer.Option(help="How long a batch waits for more requests after its first.")
]


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
    max_chars: MaxCharsOption = ServeSettings.max_chars,
    max_texts: MaxTextsOption = ServeSettings.max_texts,
    max_requests: MaxRequestsOption = ServeSettings.max_requests,
    batch_texts: BatchTextsOption = ServeSettings.batch_texts,
    batch_wait_ms: BatchWaitOption = ServeSettings.batch_wait_ms,
) -> None:
    r"""Serve translations over HTTP: LibreTranslate's JSON API and a page.

    Open http://HOST:PORT/ in a browser. Ctrl-C or SIGTERM finishes the requests in flight
    and stops. Needs starlette and uvicorn: pip install 'mt\[serve]'.
    """
    from ..serve.app import run

    settings = ServeSettings(max_chars, max_texts, max_requests, batch_texts, batch_wait_ms)
    run(
        lambda: open_translator_for(checkpoint, config, set_, device, engine, threads),
        settings,
        host,
        port,
    )
