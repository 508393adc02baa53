"""Who may use the server and how much: API keys and per-client limits, LibreTranslate's way.

`--api-keys FILE` holds one key a line (blank lines and `#` comments skipped), optionally
followed by that key's own limits: `KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]`. With a key
file, /translate, /detect and /translate_file need a listed key in their `api_key` field, as
LibreTranslate's clients send it: 403 without one. Keys are never logged.

Limits count per client: the key where one is given, else the address (the client's own,
or the one a `--trusted-proxies` proxy forwarded). `--req-limit` is LibreTranslate's
requests a minute per client and `--chars-per-minute` the characters a minute; a client past
either gets 429 with the seconds until it may try again. Each is a token bucket: a client
may spend a minute's allowance at once, and it refills evenly over the minute.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .batcher import BadRequest

IDLE_SECONDS = 120  # a client's buckets are forgotten after this long unused (they are full)


@dataclass(frozen=True)
class Allowance:
    """What one client may spend a minute; 0: no limit."""

    requests: int = 0
    chars: int = 0


def read_keys(path: str, default: Allowance) -> dict[str, Allowance]:
    """The keys of a key file, each with its allowance (`default` where the line names none),
    or a one-line ConfigError naming the file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--api-keys {path}: cannot read it ({e})") from None
    keys: dict[str, Allowance] = {}
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"--api-keys {path}, line {number}"
        if len(words) > 3 or not all(w.isdecimal() for w in words[1:]):
            raise ConfigError(f"{where}: expected KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]")
        if words[0] in keys:
            raise ConfigError(f"{where}: the key is listed twice")
        numbers = [int(w) for w in words[1:]] + [default.requests, default.chars][len(words) - 1 :]
        keys[words[0]] = Allowance(*numbers)
    if not keys:
        raise ConfigError(f"--api-keys {path}: no key in it")
    return keys


@dataclass
class Bucket:
    """A token bucket of `size` tokens that refills in a minute."""

    size: int
    tokens: float
    at: float

    def take(self, cost: int, now: float) -> float:
        """Take `cost` tokens: 0 if taken, else the seconds until there will be enough."""
        self.tokens = min(self.size, self.tokens + (now - self.at) * self.size / 60)
        self.at = now
        if cost <= self.tokens:
            self.tokens -= cost
            return 0.0
        return (cost - self.tokens) * 60 / self.size


@dataclass
class Access:
    """The key check and the per-client limits of a server."""

    keys: dict[str, Allowance] | None = None  # None: no key needed
    default: Allowance = Allowance()  # an address's (and an unlisted key's) allowance
    buckets: dict[tuple[str, str], Bucket] = field(default_factory=dict)
    swept: float = 0.0

    @property
    def key_required(self) -> bool:
        return self.keys is not None

    def client(self, key: object, address: str) -> tuple[str, Allowance]:
        """The client a request counts against, and its allowance; 403 for a missing or
        unknown key where keys are required."""
        if self.keys is None:
            return f"address {address}", self.default
        if not isinstance(key, str) or key not in self.keys:
            raise BadRequest(403, "Invalid API key" if key else "API key required (api_key)")
        return f"key {key}", self.keys[key]

    def charge(self, client: str, allowance: Allowance, chars: int) -> None:
        """Count one request of `chars` characters against `client`: 429 with Retry-After
        past its allowance, 413 for a request larger than a minute's characters."""
        if allowance.chars and chars > allowance.chars:
            raise BadRequest(
                413,
                f"{chars:,} characters, at most {allowance.chars:,} a minute (--chars-per-minute)",
            )
        now = time.monotonic()
        self._sweep(now)
        for kind, size, cost in (
            ("requests", allowance.requests, 1),
            ("characters", allowance.chars, chars),
        ):
            if not size:
                continue
            bucket = self.buckets.setdefault((client, kind), Bucket(size, size, now))
            wait = bucket.take(cost, now)
            if wait:
                raise BadRequest(
                    429, f"too many {kind}: at most {size:,} a minute", retry=math.ceil(wait)
                )

    def _sweep(self, now: float) -> None:
        """Forget buckets unused for IDLE_SECONDS (full again by then): memory stays
        proportional to the clients of the last minutes."""
        if now - self.swept < IDLE_SECONDS:
            return
        self.swept = now
        self.buckets = {k: b for k, b in self.buckets.items() if now - b.at < IDLE_SECONDS}
