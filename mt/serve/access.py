"""Who may use the server and how much: API keys and per-client limits, LibreTranslate's way.

`--api-keys FILE` holds one key a line (blank lines and `#` comments skipped), optionally
followed by that key's own limits: `KEY [REQUESTS_A_MINUTE [CHARACTERS_A_MINUTE]]`. With a key
file, /translate, /detect and /translate_file need a listed key in their `api_key` field, as
LibreTranslate's clients send it: 403 without one. Keys are never logged. The file is read
again on SIGHUP and when it changes (looked at every `CHECK_SECONDS`); a file that no longer
reads keeps the keys read before, and says why in the log. Replicas sharing a store
(mt.serve.shared) read theirs again when one of them has: the key list's revision.

Limits count per client: the key where one is given, else the address (the client's own,
or the one a `--trusted-proxies` proxy forwarded). `--req-limit` is LibreTranslate's
requests a minute per client and `--chars-per-minute` the characters a minute; a client past
either gets 429 with the seconds until it may try again. Each is a token bucket, kept by the
store: a client may spend a minute's allowance at once, and it refills evenly over the minute.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .batcher import BadRequest, log
from .shared import Memory, Shared

CHECK_SECONDS = 1.0  # how often the key file and the key list's revision are looked at


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


def stamp(path: str) -> tuple | None:
    """What says a file changed: its inode, size and time of change (None: not there)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


@dataclass
class Access:
    """The key check and the per-client limits of a server. `path`: the key file `keys`
    were read from (None: no key needed)."""

    keys: dict[str, Allowance] | None = None  # None: no key needed
    default: Allowance = Allowance()  # an address's (and an unlisted key's) allowance
    path: str | None = None
    store: Memory | Shared = field(default_factory=lambda: Memory(0, 0))
    hangup: bool = False  # SIGHUP came: read the keys again
    seen: tuple[tuple | None, int] = (None, 0)  # the file's stamp and the revision read

    @classmethod
    def of_file(cls, path: str, default: Allowance) -> Access:
        """The keys of the file at `path` (a one-line ConfigError if it cannot be read)."""
        seen = stamp(path)
        return cls(read_keys(path, default), default, path, seen=(seen, 0))

    @property
    def key_required(self) -> bool:
        return self.keys is not None

    def client(self, key: object, address: str) -> tuple[str, Allowance]:
        """The client a request counts against, and its allowance; 403 for a missing or
        unknown key where keys are required."""
        keys = self.keys
        if keys is None:
            return f"address {address}", self.default
        if not isinstance(key, str) or key not in keys:
            raise BadRequest(403, "Invalid API key" if key else "API key required (api_key)")
        return f"key {key}", keys[key]

    async def charge(self, client: str, allowance: Allowance, chars: int) -> None:
        """Count one request of `chars` characters against `client`: 429 with Retry-After
        past its allowance, 413 for a request larger than a minute's characters."""
        if allowance.chars and chars > allowance.chars:
            most = f"{allowance.chars:,}"
            why = f"{chars:,} characters, at most {most} a minute (--chars-per-minute)"
            raise BadRequest(413, why, limit="chars_per_minute")
        costs = [
            (kind, size, cost)
            for kind, size, cost in (
                ("requests", allowance.requests, 1),
                ("characters", allowance.chars, chars),
            )
            if size
        ]
        if not costs:
            return
        found = await self.store.take(client, costs)
        if found is not None:
            kind, size, wait = found
            limit = "req_limit" if kind == "requests" else "chars_per_minute"
            why = f"too many {kind}: at most {size:,} a minute"
            raise BadRequest(429, why, retry=math.ceil(wait), limit=limit)

    def hung_up(self) -> None:
        """SIGHUP came: the key file is read again within CHECK_SECONDS."""
        self.hangup = True

    def reload(self, why: str) -> bool:
        """Read the key file again (`why`: what made it, for the log); whether the keys
        were replaced (a file that does not read keeps those of before)."""
        try:
            keys = read_keys(self.path, self.default)
        except ConfigError as e:
            log(f"{why}: {e}: the keys read before are kept")
            return False
        self.keys = keys
        log(f"{why}: {len(keys)} API key(s) read from {self.path}")
        return True

    async def watch(self, sleep: Any) -> None:
        """Read the key file again whenever SIGHUP comes, the file changes or another
        replica has read its own (the key list's revision in the shared store went up),
        looking every CHECK_SECONDS (`sleep`: asyncio.sleep), forever. A reload of this
        replica's raises the revision, for the others."""
        with contextlib.suppress(BadRequest):  # the shared store is down: it says so in the log
            self.seen = (self.seen[0], await self.store.revision())
        while True:
            await sleep(CHECK_SECONDS)
            with contextlib.suppress(BadRequest):
                await self._look()

    async def _look(self) -> None:
        now = stamp(self.path)
        file, revision = self.seen
        if self.hangup or now != file:
            why = "SIGHUP" if self.hangup else "the key file changed"
            self.hangup, self.seen = False, (now, revision)
            if self.reload(why):
                await self.store.revise()
                self.seen = (now, await self.store.revision())
            return
        latest = await self.store.revision()
        if latest != revision:
            self.seen = (now, latest)
            self.reload("another replica read its keys again")
