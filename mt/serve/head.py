"""A request's head (its line and headers) bounded while it arrives: at most `MAX_HEAD_BYTES`
(431 beyond) and all in within `HEAD_SECONDS` of its first byte, or of the connection (408).

`HeadGuard` is the protocol uvicorn runs each connection with (`uvicorn.Config(http=...)`
takes a protocol class): it holds uvicorn's own httptools protocol and passes it every byte,
through asyncio's public protocol interface only, after reading them itself with an httptools
parser of its own that keeps nothing (no callback for the URL or the headers, so nothing is
buffered): that parser says where each head starts and ends, so that the head is counted
as its bytes come, and refused as soon as it is too long, whatever follows. A head is fed to
it in pieces that reach exactly to its limit, anything else `MAX_HEAD_BYTES` at a time: a head
that starts in the middle of a piece (a request sent right behind another's body) is counted
from the next piece, so it is refused by 2 × MAX_HEAD_BYTES.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

MAX_HEAD_BYTES = 16 << 10  # a request's line and headers (uvicorn's h11 default)
HEAD_SECONDS = 8  # from a request's first byte (or the connection) to the end of its headers


def guarded_protocol(refused: Callable[[str], None] = lambda limit: None) -> type[asyncio.Protocol]:
    """The protocol class for `uvicorn.Config(http=...)`: `HeadGuard` around uvicorn's
    httptools protocol (found by its public name, "httptools"); `refused` is told of each
    head it refuses, by the limit's name (head_bytes, head_seconds: the metrics count them)."""
    import httptools
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    inner = import_from_string(HTTP_PROTOCOLS["httptools"])

    class HeadGuard(asyncio.Protocol):
        """One connection: uvicorn's protocol, fed only while the head is within bounds."""

        def __init__(self, **kwargs: Any) -> None:  # what uvicorn gives a protocol
            self.inner: asyncio.Protocol = inner(**kwargs)
            self.parser: Any = httptools.HttpRequestParser(self)
            self.in_head, self.head_bytes, self.refused = True, 0, False
            self.transport: Any = None
            self.timer: asyncio.TimerHandle | None = None

        # asyncio's protocol interface, passed on

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.inner.connection_made(transport)
            self.start_timer()  # a connection that sends nothing is closed too

        def data_received(self, data: bytes) -> None:
            if self.parser is not None:
                self.track(memoryview(data))
            if not self.refused:
                self.inner.data_received(data)

        def eof_received(self) -> bool | None:
            return self.inner.eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            self.stop_timer()
            self.inner.connection_lost(exc)

        def pause_writing(self) -> None:
            self.inner.pause_writing()

        def resume_writing(self) -> None:
            self.inner.resume_writing()

        # the parser's callbacks

        def on_message_begin(self) -> None:
            self.start_timer()

        def on_headers_complete(self) -> None:
            self.in_head = False
            self.stop_timer()

        def on_message_complete(self) -> None:
            self.in_head, self.head_bytes = True, 0

        # the bounds

        def track(self, data: memoryview) -> None:
            """Feed `data` to the parser a piece at a time, counting the head's bytes: 431
            once MAX_HEAD_BYTES of a head have come and it has not ended (a piece of a head
            reaches exactly that far). A request the parser cannot read, or an upgrade to
            another protocol, ends the tracking: uvicorn's protocol answers it."""
            import httptools

            at = 0
            while at < len(data):
                counted = self.in_head
                size = MAX_HEAD_BYTES - self.head_bytes if counted else MAX_HEAD_BYTES
                piece = data[at : at + size]
                at += len(piece)
                try:
                    self.parser.feed_data(piece)
                except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                    self.parser = None
                    self.stop_timer()
                    return
                if counted and self.in_head:
                    self.head_bytes += len(piece)
                    if self.head_bytes >= MAX_HEAD_BYTES:
                        return self.refuse(431, "Request Header Fields Too Large")

        def start_timer(self) -> None:
            self.stop_timer()
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(HEAD_SECONDS, self.refuse, 408, "Request Timeout")

        def stop_timer(self) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

        def refuse(self, status: int, reason: str) -> None:
            """Answer `status` and close the connection; nothing more reaches uvicorn."""
            self.stop_timer()
            self.parser = None
            if self.refused or self.transport.is_closing():
                return
            self.refused = True
            refused("head_bytes" if status == 431 else "head_seconds")
            body = f'{{"error": "{reason}"}}'.encode()
            head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            self.transport.write(head.encode() + body)
            self.transport.close()

    return HeadGuard
