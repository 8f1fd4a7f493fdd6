"""uvicorn's httptools protocol (llhttp, C) with the same connection guards as the h11 one.

Imported only when ``--http`` resolves to ``httptools`` (the package may be
missing). What each guard becomes here:

- connection cap and request-head timer: :class:`ConnectionGuard`, as for h11;
  a head is awaited from connecting and from the end of each request's body
  until llhttp reports the head complete;
- head size: h11 refuses a head over 16 KiB; llhttp has no such bound, so the
  bytes of a head are counted as they arrive (up to the blank line that ends
  it), before llhttp parses them, and a head past ``max_head_bytes`` gets
  ``431`` and the connection is closed (a head that begins in the same chunk
  as the previous body ends is counted from its next chunk: at most one read
  more);
- both ``Content-Length`` and ``Transfer-Encoding``: llhttp refuses the
  request itself (uvicorn answers ``400`` and closes, nothing after it is
  parsed); :class:`RequestGuard` keeps its own check for h11.

Not a guard, a parsing difference made equal: llhttp drops the whitespace
before a field value but keeps the whitespace after it, where RFC 9110 §5.5
says a field value excludes both (h11 strips both). So ``Mcp-Name:
of_hash_text  `` would not equal the body's tool name (SEP-2243, -32020; the
conformance suite's ``http-header-validation`` checks it): :meth:`on_header`
strips the trailing SP/HTAB, so every header reads the same on both parsers.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ._http_guard import CONNECTION_LOST_KEY, ConnectionGuard, log

_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap, a request-head timeout and a head-size bound."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = None
        self._in_head = True  # bytes arriving now belong to a request head
        self._head_bytes = 0  # of the head being received
        self._head_tail = b""  # the last bytes of it seen (a blank line may be split across chunks)
        super().connection_made(transport)
        if self._admit(transport):
            self._arm_head_timer()

    def _awaiting_head(self) -> bool:
        # A head is due and no request is in progress (a pipelined one may be, after the previous response).
        return self._in_head and (self.cycle is None or self.cycle.response_complete)

    def data_received(self, data: bytes) -> None:
        if self._in_head and self._head_too_large(data):
            log.warning("request_refused", reason="request head too large", limit=self.max_head_bytes)
            text = f"the request head is larger than {self.max_head_bytes} bytes".encode()
            self.transport.write(_HEAD_TOO_LARGE % (len(text), text))
            self.transport.close()
            return
        super().data_received(data)

    def _head_too_large(self, data: bytes) -> bool:
        """Count the head's bytes in ``data`` (up to the blank line that ends it) before llhttp sees them."""
        window = self._head_tail + data
        ends = [i for i in (window.find(b"\r\n\r\n"), window.find(b"\n\n")) if i >= 0]
        self._head_bytes += len(data) if not ends else max(0, min(ends) + 2 - len(self._head_tail))
        self._head_tail = window[-3:]
        return self._head_bytes > self.max_head_bytes

    def on_message_begin(self) -> None:
        super().on_message_begin()  # builds the request's scope
        self.scope[CONNECTION_LOST_KEY] = self._watch_lost  # type: ignore[literal-required]

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value.rstrip(b" \t"))  # RFC 9110 §5.5: OWS is not part of the value (see the module doc)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # what follows is the next request's head
        self._head_bytes, self._head_tail = 0, b""

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self._awaiting_head():
            self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)
        self._connection_gone()


__all__ = ["GuardedHttpToolsProtocol"]
