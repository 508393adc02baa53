"""What a server's replicas share: the per-client buckets of its limits, the revision of its
key list and the translated files kept for download. `Memory` keeps them in this process
(one server alone: today's behaviour); `Shared` in a Redis database (`--shared-storage
redis://HOST:PORT/N`), so that N replicas behind a load balancer enforce one limit per client
and serve each other's downloads.

In Redis every change is one Lua script, run atomically, on Redis's own clock (`TIME`): two
replicas taking from one bucket at once take in turn, and their clocks need not agree. Keys
are under `mt:serve:`; a client's bucket is named by a hash of the client (an API key is
never written to Redis), and expires once unused long enough to be full again. A Redis that
cannot be reached is a 503 with Retry-After to the requests that need it, one line in the
log; the other requests go on.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError
from .batcher import BadRequest, log
from .downloads import Downloads, stored_name

IDLE_SECONDS = 120  # a client's buckets are forgotten after this long unused (they are full)
PREFIX = "mt:serve:"
TIMEOUT_SECONDS = 5  # of a connection to Redis, and of one command
SCHEMES = ("redis", "rediss", "unix")

# KEYS: a bucket a limit; ARGV: each one's size and cost, then IDLE_SECONDS. Each bucket is
# refilled for the time since it was last used and `cost` taken from it, in order; the first
# that has too little answers its index and the seconds until it will have enough.
TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
for i, key in ipairs(KEYS) do
  local size, cost = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local kept = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(kept[1]) or size
  tokens = math.min(size, tokens + (now - (tonumber(kept[2]) or now)) * size / 60)
  local wait = 0
  if cost <= tokens then tokens = tokens - cost else wait = (cost - tokens) * 60 / size end
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', tostring(now))
  redis.call('EXPIRE', key, ARGV[#ARGV])
  if wait > 0 then return {i, tostring(wait)} end
end
return {0, '0'}
"""

# KEYS: the index of files (a sorted set: when each was added, in ms), their sizes (a hash)
# and their total; ARGV: the prefix of a file's key, the file's name, its bytes, the bytes
# kept at most, the milliseconds a file is kept. Files past their time leave the index (Redis
# has expired their bytes), the oldest are dropped until the file fits (it is never one of
# them: files added in one millisecond are ordered by name), then the file is added.
KEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local index, sizes, total = KEYS[1], KEYS[2], KEYS[3]
local prefix, name, data, most, ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local function drop(old)
  redis.call('DECRBY', total, redis.call('HGET', sizes, old) or 0)
  redis.call('HDEL', sizes, old)
  redis.call('ZREM', index, old)
  redis.call('DEL', prefix .. old)
end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now - tonumber(ms))) do
  drop(old)
end
while tonumber(redis.call('GET', total) or 0) + #data > most do
  local oldest = redis.call('ZRANGE', index, 0, 0)[1]
  if not oldest then break end
  drop(oldest)
end
redis.call('SET', prefix .. name, data, 'PX', ms)
redis.call('ZADD', index, now, name)
redis.call('HSET', sizes, name, #data)
return redis.call('INCRBY', total, #data)
"""


def check_url(url: str) -> str:
    """`url` if it names a Redis database (redis://HOST:PORT/N, rediss://..., unix://PATH),
    else a one-line ConfigError."""
    why = ConfigError(
        f"--shared-storage {shown(url)}: expected redis://HOST:PORT/N (or rediss://..., "
        "unix://PATH)"
    )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise why from None
    database = parts.path.strip("/")
    if parts.scheme == "unix":
        good = bool(parts.path)
    else:
        good = parts.scheme in SCHEMES and bool(parts.hostname)
        good = good and (database == "" or database.isdecimal())
    if not good:
        raise why
    return url


def shown(url: str) -> str:
    """`url` with its password, if any, replaced by ***: what the log may say."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def reachable(url: str) -> None:
    """A one-line ConfigError unless the Redis of `url` answers PING (checked at start, so
    that a mistyped address stops the server rather than every request)."""
    import redis

    try:
        with redis.Redis.from_url(url, socket_timeout=TIMEOUT_SECONDS) as client:
            client.ping()
    except redis.RedisError as e:
        raise ConfigError(f"--shared-storage {shown(url)}: cannot reach it ({e})") from None


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


class Memory:
    """What a server keeps in its own memory: one server alone."""

    def __init__(self, kept_bytes: int, kept_seconds: float) -> None:
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.swept = 0.0
        self.downloads = Downloads(kept_bytes, kept_seconds)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def take(self, client: str, costs: list[tuple[str, int, int]]) -> tuple | None:
        """Take each (kind, size, cost) from `client`'s bucket of that kind, in order: None
        once all are taken, else (kind, size, seconds to wait) of the first that has too
        little (those before it are spent)."""
        now = time.monotonic()
        self._sweep(now)
        for kind, size, cost in costs:
            bucket = self.buckets.setdefault((client, kind), Bucket(size, size, now))
            wait = bucket.take(cost, now)
            if wait:
                return kind, size, wait
        return None

    def _sweep(self, now: float) -> None:
        """Forget buckets unused for IDLE_SECONDS (full again by then): memory stays
        proportional to the clients of the last minutes."""
        if now - self.swept < IDLE_SECONDS:
            return
        self.swept = now
        self.buckets = {k: b for k, b in self.buckets.items() if now - b.at < IDLE_SECONDS}

    async def keep(self, name: str, data: bytes) -> str:
        return self.downloads.add(name, data)

    async def kept(self, stored: str) -> bytes | None:
        return self.downloads.get(stored)

    async def revision(self) -> int:
        """The key list's revision: replicas alone have none to follow."""
        return 0

    async def revise(self) -> None:
        pass


class Shared:
    """What replicas share, in the Redis database of `url`: its client made in the server's
    event loop (`open`)."""

    def __init__(self, url: str, kept_bytes: int, kept_seconds: float) -> None:
        self.url, self.kept_bytes = url, kept_bytes
        self.bounds = (kept_bytes, int(kept_seconds * 1000))  # KEEP's bytes and milliseconds
        self.client: Any = None
        self.scripts: dict[str, Any] = {}
        self.down = False  # said in the log once, until Redis answers again

    async def open(self) -> None:
        import redis.asyncio

        self.client = redis.asyncio.Redis.from_url(
            self.url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS
        )
        self.scripts = {"take": self.client.register_script(TAKE)}
        self.scripts["keep"] = self.client.register_script(KEEP)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def _call(self, command: str, *args: Any) -> Any:
        """A Redis command or script (`command`: a script's name, else the client's method),
        Redis's errors turned into a 503."""
        import redis

        try:
            script = self.scripts.get(command)
            found = await (script(*args) if script else getattr(self.client, command)(*args))
        except redis.RedisError as e:
            if not self.down:
                log(f"shared storage {shown(self.url)}: {e}")
            self.down = True
            raise BadRequest(503, "shared storage unreachable: try again", 1) from None
        if self.down:
            log(f"shared storage {shown(self.url)}: answering again")
        self.down = False
        return found

    async def take(self, client: str, costs: list[tuple[str, int, int]]) -> tuple | None:
        """As Memory.take, the buckets in Redis."""
        name = hashlib.sha256(client.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        keys = [f"{PREFIX}bucket:{kind}:{name}" for kind, _, _ in costs]
        numbers = [n for _, size, cost in costs for n in (size, cost)]
        index, wait = await self._call("take", keys, [*numbers, IDLE_SECONDS])
        if not index:
            return None
        kind, size, _ = costs[int(index) - 1]
        return kind, size, float(wait)

    async def keep(self, name: str, data: bytes) -> str:
        """As Downloads.add, the file in Redis for every replica to serve."""
        stored = stored_name(name, data, self.kept_bytes)
        keys = [f"{PREFIX}files", f"{PREFIX}file-sizes", f"{PREFIX}file-bytes"]
        await self._call("keep", keys, [f"{PREFIX}file:", stored, data, *self.bounds])
        return stored

    async def kept(self, stored: str) -> bytes | None:
        return await self._call("get", f"{PREFIX}file:{stored}")

    async def revision(self) -> int:
        """The key list's revision: raised by a replica that reloaded its keys."""
        return int(await self._call("get", f"{PREFIX}keys-revision") or 0)

    async def revise(self) -> None:
        await self._call("incr", f"{PREFIX}keys-revision")


def store(url: str, kept_bytes: int, kept_seconds: float) -> Memory | Shared:
    """The store of a server: in Redis at `url`, or in its own memory ("")."""
    return Shared(url, kept_bytes, kept_seconds) if url else Memory(kept_bytes, kept_seconds)
