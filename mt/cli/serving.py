"""`mt serve`: a model put to work behind an HTTP API and a web page."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ConfigError
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
WorkersOption = Annotated[
    int, typer.Option(help="Threads that parse requests and documents and write translations.")
]
MaxConnectionsOption = Annotated[int, typer.Option(help="Open connections at once (503 beyond).")]
CharLimitOption = Annotated[
    int, typer.Option(help="Characters a request, all its texts (413 beyond); 0: no limit.")
]
ReqLimitOption = Annotated[
    int, typer.Option(help="Requests a minute per client, key or address (429 beyond); 0: none.")
]
CharsPerMinuteOption = Annotated[
    int, typer.Option(help="Characters a minute per client, key or address (429); 0: none.")
]
KeptMbOption = Annotated[int, typer.Option(help="Megabytes of translated files kept.")]
KeptMinutesOption = Annotated[int, typer.Option(help="Minutes a translated file is kept.")]
ApiKeysOption = Annotated[
    str | None,
    typer.Option(
        help="File of API keys, one a line (KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]): "
        "requests then need one in api_key (403 without)."
    ),
]
PublicUrlOption = Annotated[
    str | None,
    typer.Option(help="The server's URL as clients reach it, for download links (else relative)."),
]
TrustedProxiesOption = Annotated[
    str,
    typer.Option(help="Addresses or networks, comma-separated, whose X-Forwarded-For is believed."),
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
    workers: WorkersOption = ServeSettings.workers,
    max_connections: MaxConnectionsOption = ServeSettings.max_connections,
    char_limit: CharLimitOption = ServeSettings.char_limit,
    req_limit: ReqLimitOption = ServeSettings.req_limit,
    chars_per_minute: CharsPerMinuteOption = ServeSettings.chars_per_minute,
    kept_mb: KeptMbOption = ServeSettings.kept_mb,
    kept_minutes: KeptMinutesOption = ServeSettings.kept_minutes,
    api_keys: ApiKeysOption = None,
    public_url: PublicUrlOption = None,
    trusted_proxies: TrustedProxiesOption = "",
) -> None:
    r"""Serve translations over HTTP: LibreTranslate's JSON API and a page.

    Open http://HOST:PORT/ in a browser. Ctrl-C or SIGTERM finishes the requests in flight
    and stops. Needs starlette and uvicorn: pip install 'mt\[serve]'. Before exposing it,
    read docs/serve.md (keys, limits, a reverse proxy).
    """
    from ..serve.access import Access, Allowance, read_keys
    from ..serve.app import run

    settings = ServeSettings(
        max_chars=max_chars,
        max_texts=max_texts,
        max_requests=max_requests,
        batch_texts=batch_texts,
        batch_wait_ms=batch_wait_ms,
        workers=workers,
        max_connections=max_connections,
        char_limit=char_limit,
        req_limit=req_limit,
        chars_per_minute=chars_per_minute,
        kept_mb=kept_mb,
        kept_minutes=kept_minutes,
    )
    default = Allowance(req_limit, chars_per_minute)
    access = Access(read_keys(api_keys, default) if api_keys else None, default)
    if public_url is not None and not public_url.startswith(("http://", "https://")):
        raise ConfigError(f"--public-url {public_url}: expected http://... or https://...")
    run(
        lambda: open_translator_for(checkpoint, config, set_, device, engine, threads),
        settings,
        host,
        port,
        access,
        public_url,
        trusted_proxies,
    )
