"""`mt serve`: a model put to work behind an HTTP API and a web page."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from ..errors import ConfigError
from ..serve.batcher import Settings as ServeSettings  # the options; no server deps
from .app import app, from_environment
from .decoding import (
    DecodeConfigOption,
    DecodeSetOption,
    DeviceOption,
    EngineOption,
    ThreadsOption,
    open_translator_for,
)

# The help texts write mt\[plot]: rich would take a bare [plot] for markup and drop it.


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
UrlPrefixOption = Annotated[
    str,
    typer.Option(help="Serve under this path (/mt) behind a proxy that forwards it as it is."),
]
CorsOriginsOption = Annotated[
    str,
    typer.Option(
        help="Origins whose web pages may call the server from a browser, comma-separated "
        "(https://example.org); * any (LibreTranslate's), '' none."
    ),
]
MetricsTokenOption = Annotated[
    str,
    typer.Option(
        "--metrics-token",
        "--metrics-auth-token",
        help="Serve /metrics only with Authorization: Bearer TOKEN (else to anyone).",
    ),
]
SharedStorageOption = Annotated[
    str,
    typer.Option(
        help="redis://HOST:PORT/N: the limits, key list and downloads shared by the replicas "
        "of one service (else in this process)."
    ),
]


def with_settings(command: Callable) -> Callable:
    """`command`, which takes **settings, with an option for each of the server's Settings
    (its default and help from the field): typer reads the signature made here."""
    signature = inspect.signature(command, eval_str=True)

    def option(f: dataclasses.Field) -> Any:
        names = [f"--{f.name.replace('_', '-')}", f.metadata["also"]] if f.metadata["also"] else []
        return typer.Option(*names, help=f.metadata["help"])

    options = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=Annotated[type(f.default), option(f)],
        )
        for f in dataclasses.fields(ServeSettings)
    ]
    named = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=named + options)
    return command


# every option's environment variable: MT_SERVE_<OPTION> (MT_SERVE_PORT, MT_SERVE_MAX_CHARS),
# as LibreTranslate's LT_<OPTION>; a flag on the command line wins over it
@app.command(name="serve", context_settings={"auto_envvar_prefix": "MT_SERVE"})
@with_settings
def serve_command(
    ctx: typer.Context,
    checkpoints: Annotated[
        list[str] | None,
        typer.Argument(
            help="Run folders, checkpoint folders or files, or folders from mt export: one "
            "model a pair of languages, requests routed by their source and target. "
            "Default: the newest run under ./runs. From the environment: MT_SERVE_CHECKPOINTS "
            "(separated by spaces).",
            envvar="MT_SERVE_CHECKPOINTS",
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8000,
    config: DecodeConfigOption = None,
    set: DecodeSetOption = None,  # (not set_: its environment variable is MT_SERVE_SET)
    device: DeviceOption = "auto",
    engine: EngineOption = "auto",
    threads: ThreadsOption = 0,
    api_keys: ApiKeysOption = None,
    public_url: PublicUrlOption = None,
    trusted_proxies: TrustedProxiesOption = "",
    url_prefix: UrlPrefixOption = "",
    cors_origins: CorsOriginsOption = "*",
    metrics_token: MetricsTokenOption = "",
    shared_storage: SharedStorageOption = "",
    **settings: Any,
) -> None:
    r"""Serve translations over HTTP: LibreTranslate's JSON API and a page; several models
    (en→es and es→en, say) behind one API.

    Open http://HOST:PORT/ in a browser. Ctrl-C or SIGTERM finishes the requests in flight
    and stops; SIGHUP reads the key file again. Needs starlette, uvicorn and prometheus_client:
    pip install 'mt\[serve]'. Before exposing it, read docs/serve.md (keys, limits, a reverse
    proxy, CORS, metrics, a container, replicas sharing Redis). Every option can be
    given in the environment as MT_SERVE_<OPTION> (MT_SERVE_PORT=8080, MT_SERVE_API_KEYS=
    keys.txt); one given on the command line wins.
    """
    from ..serve.access import Access, Allowance
    from ..serve.app import run
    from ..serve.deployment import Deployment

    try:
        settings = ServeSettings(**settings)
        default = Allowance(settings.req_limit, settings.chars_per_minute)
        access = Access.of_file(api_keys, default) if api_keys else Access(None, default)
        deployment = Deployment.checked(
            public_url, url_prefix, trusted_proxies, cors_origins, metrics_token, shared_storage
        )
    except ConfigError as e:  # "--max-texts 0: why", of MT_SERVE_MAX_TEXTS if it came from it
        flag, _, rest = str(e).partition(" ")
        name = flag.removeprefix("--").replace("-", "_")
        said = name in ctx.params and from_environment(ctx, name, rest.partition(": ")[2])
        raise ConfigError(said or str(e)) from None
    run(
        [
            functools.partial(open_translator_for, checkpoint, config, set, device, engine, threads)
            for checkpoint in checkpoints or [None]
        ],
        settings,
        host,
        port,
        access,
        deployment,
    )
