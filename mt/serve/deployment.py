"""How a server is deployed: where clients reach it (`--public-url`, `--url-prefix`), the
proxies whose X-Forwarded-For it believes (`--trusted-proxies`), the web pages of other
origins that may call it (`--cors-origins`), who may read its metrics (`--metrics-token`) and
what its replicas share (`--shared-storage`). Each value is checked once, at start: a
mistake is one line naming its option."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from .shared import check_url

PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")  # path segments of unreserved characters
ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


@dataclass(frozen=True)
class Deployment:
    """The settings of a server's place among others, checked (`checked`)."""

    public_url: str = ""  # where clients reach the server, for download links; "": relative
    url_prefix: str = ""  # the path it is served under (/mt); "": the root
    trusted_proxies: str = ""  # addresses or networks, comma-separated
    cors_origins: tuple[str, ...] = ("*",)  # ("*",): any page; (): none
    metrics_token: str = ""  # "": /metrics open to anyone
    shared_storage: str = ""  # redis://HOST:PORT/N; "": this process's memory

    @classmethod
    def checked(
        cls,
        public_url: str | None = None,
        url_prefix: str = "",
        trusted_proxies: str = "",
        cors_origins: str = "*",
        metrics_token: str = "",
        shared_storage: str = "",
    ) -> Deployment:
        """The deployment of these option values, or a one-line ConfigError naming the
        option whose value is wrong."""
        if public_url is not None and not public_url.startswith(("http://", "https://")):
            raise ConfigError(f"--public-url {public_url}: expected http://... or https://...")
        return cls(
            (public_url or "").rstrip("/"),
            prefix(url_prefix),
            trusted_proxies,
            origins(cors_origins),
            token(metrics_token),
            check_url(shared_storage) if shared_storage else "",
        )


def prefix(value: str) -> str:
    """A URL prefix as LibreTranslate takes it (`mt`, `/mt`, `/mt/`: /mt), or "" for none."""
    path = "/" + value.strip("/") if value.strip("/") else ""
    if path and (not PREFIX.fullmatch(path) or {".", ".."} & set(path.split("/"))):
        raise ConfigError(
            f"--url-prefix {value}: expected a path such as /mt (letters, digits, . _ ~ - "
            "between slashes)"
        )
    return path


def origins(value: str) -> tuple[str, ...]:
    """The origins of `--cors-origins`: `*` (any), none (""), or a comma-separated list of
    scheme://host[:port] (a browser's Origin header, compared exactly)."""
    listed = tuple(dict.fromkeys(o.strip().rstrip("/") for o in value.split(",") if o.strip()))
    if listed == ("*",) or all(ORIGIN.fullmatch(o) for o in listed):
        return listed
    wrong = next(o for o in listed if not ORIGIN.fullmatch(o))
    raise ConfigError(
        f"--cors-origins {value}: {wrong!r} is not an origin (expected *, or origins such as "
        "https://example.org, comma-separated)"
    )


def token(value: str) -> str:
    """A metrics token: what an Authorization header can carry (visible ASCII)."""
    if value and not re.fullmatch(r"[!-~]+", value):
        raise ConfigError("--metrics-token: expected visible ASCII characters, no space")
    return value
