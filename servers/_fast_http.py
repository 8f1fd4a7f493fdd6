"""The direct ``tools/call`` path over streamable HTTP (an ASGI layer in front of the SDK's app).

Sits inside :class:`~openfunctions.servers._http_guard.RequestGuard` (framing,
Host/Origin, body deadline, invalid ids), the bearer authentication and the
per-principal session limit, so every request it sees already passed exactly
the checks the SDK path's requests pass. It answers a POST to the MCP path
itself when the request is a 2026-07-28 ``tools/call`` that
:class:`~openfunctions.servers._fast.FastCalls` admits and its headers are the
plain valid ones:

- ``MCP-Protocol-Version``: a 2026-07-28-era version, equal to the envelope's;
  ``Mcp-Method: tools/call``; ``Mcp-Name`` equal to the tool name (each routing
  header once); no ``Mcp-Param-*`` header;
- ``Content-Type: application/json``; ``Accept`` naming JSON, and SSE too
  unless the server answers JSON only (``json_response``);
- the whole body in hand, within the size limit (the SDK answers 413 past it).

Everything else — handshake-era requests (``initialize``, ``Mcp-Session-Id``
sessions), other methods, notifications, batches, malformed or mismatched
anything — goes to the SDK's app with the body replayed, unchanged: the SDK
phrases every refusal, as before.

The reply is what the SDK's 2026-07-28 handler sends: in JSON-response mode
one ``application/json`` body; in SSE mode (the default) also
``application/json`` when the call ends without emitting a notification
within 15 s, else the response commits to ``text/event-stream`` (the handler's
notifications as events, a ``: ping`` comment every 15 s, the reply last); a
client that disconnects cancels the call (SSE mode; the executor then settles
a ``cancelled`` receipt). Error replies carry the status the SDK maps their
code to (``-32602`` -> 400, ...).

Off with ``--no-fast-path`` or ``OPENFUNCTIONS_FAST_PATH=0``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import structlog
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, decode_header_value
from mcp.shared.transport_context import TransportContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request

from ._fast import Admitted, Exchange, FastCalls, encode
from ._http_guard import CONNECTION_LOST_KEY, PARSED_BODY_KEY
from ._sdk import manager_internals_present, manager_lifespan_state, manager_task_group

log = structlog.get_logger("openfunctions.servers.fast")

#: Seconds a call may run silent before the reply commits to SSE (the SDK's deferral window and ping interval).
SSE_PING_INTERVAL = 15.0

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_MODERN = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)


def _accepts(value: bytes) -> tuple[bool, bool]:
    """(JSON, SSE) acceptable per the ``Accept`` header, wildcards included (the SDK's rule)."""
    types = [part.split(b";")[0].strip().lower() for part in value.split(b",")]
    wildcard = b"*/*" in types
    return (wildcard or b"application/json" in types or b"application/*" in types,
            wildcard or b"text/event-stream" in types or b"text/*" in types)


def _sse_event(message: Mapping[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + encode(message) + b"\r\n\r\n"


def replay_body(first: dict[str, Any], receive: Callable[..., Any]) -> Callable[..., Any]:
    """``receive`` with ``first`` (already taken from it) handed out again first."""
    pending = [first]

    async def replayed() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return await receive()  # type: ignore[no-any-return]

    return replayed


class _Exchange(Exchange):
    """A fast-path HTTP request's channel: a notification commits the response to SSE and goes out as an event,
    or is dropped in JSON-response mode, as on the SDK's path."""

    def __init__(self, scope: dict[str, Any], request_id: str | int, send: Callable[..., Any], sse: bool) -> None:
        super().__init__(TransportContext(kind="streamable-http", can_send_request=False, headers=Headers(scope=scope)),
                         request_id)
        self._send = send
        self._sse = sse
        self.committed = False
        self.finished = False
        self.cancel_scope: anyio.CancelScope | None = None  # SSE mode: cancelled when the client goes away
        self._lock: asyncio.Lock | None = None

    def lost(self) -> None:
        """The client went away: cancel the call, unless its reply is already being written."""
        if not self.finished and self.cancel_scope is not None:
            self.cancel_scope.cancel()

    async def deliver(self, message: dict[str, Any]) -> None:
        if self._sse:
            await self.emit(_sse_event(message))

    async def emit(self, event: bytes | None, *, last: bool = False) -> None:
        """Write one SSE chunk (``None``: a ping), committing the response to SSE first if needed."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.finished:
                return
            try:
                if not self.committed:
                    self.committed = True
                    await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                await self._send({"type": "http.response.body", "body": event or b": ping\r\n\r\n", "more_body": not last})
            except OSError:  # the client went away; the disconnect watch cancels the call
                self.finished = True
            if last:
                self.finished = True


class FastToolCalls:
    """ASGI middleware: answers admitted ``tools/call`` POSTs directly, passes everything else to ``app``."""

    def __init__(self, app: Any, calls: FastCalls, *, path: str, json_response: bool, manager: Any) -> None:
        self.app = app
        self.calls = calls
        self.path = path
        self.json_response = json_response
        self.manager = manager
        self.max_body_bytes: int = getattr(manager, "max_request_body_size", 0)
        self._broken = not manager_internals_present(manager)
        if self._broken:
            log.error("fast_path_off", reason="this mcp SDK's session manager has no _lifespan_state/_task_group",
                      hint="update servers/_sdk.py; calls take the SDK path meanwhile")

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path or self._broken
                or manager_task_group(self.manager) is None):
            await self.app(scope, receive, send)
            return
        version = self._plain_headers(scope)
        if version is None:
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first["type"] != "http.request" or first.get("more_body", False):
            await self.app(scope, replay_body(first, receive), send)
            return
        body: bytes = first.get("body", b"")
        if len(body) > self.max_body_bytes:
            await self.app(scope, replay_body(first, receive), send)
            return
        message = scope.get(PARSED_BODY_KEY)
        if message is None:
            try:
                message = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError):
                message = None
        call = self.calls.admit(message, version) if message is not None else None
        if call is None or not self._name_matches(scope, call.name):
            await self.app(scope, replay_body(first, receive), send)
            return
        await self._serve(call, first, scope, receive, send)

    def _plain_headers(self, scope: dict[str, Any]) -> str | None:
        """The protocol version if the headers are the plain valid ones for a fast-path call, else ``None``."""
        version = method = content_type = accept = length = None
        names = 0
        for key, value in scope["headers"]:
            if key == b"mcp-protocol-version":
                if version is not None:
                    return None
                version = value
            elif key == b"mcp-method":
                if method is not None:
                    return None
                method = value
            elif key == b"mcp-name":
                names += 1
            elif key == b"content-type":
                content_type = content_type if content_type is not None else value
            elif key == b"accept":
                accept = accept if accept is not None else value
            elif key == b"content-length":
                length = length if length is not None else value
            elif key.startswith(b"mcp-param-"):
                return None
        if version not in _MODERN or method != b"tools/call" or names != 1:
            return None
        if content_type is None or not content_type.lower().startswith(b"application/json"):
            return None
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return None  # the SDK answers 413
        has_json, has_sse = _accepts(accept or b"")
        if not has_json or not (self.json_response or has_sse):
            return None
        assert version is not None
        return version.decode("latin-1")

    @staticmethod
    def _name_matches(scope: dict[str, Any], name: str) -> bool:
        for key, value in scope["headers"]:
            if key == b"mcp-name":
                return decode_header_value(value.decode("latin-1")) == name
        return False

    async def _serve(self, call: Admitted, first: dict[str, Any], scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        sse = not self.json_response
        exchange = _Exchange(scope, call.request_id, send, sse)
        request = Request(scope, replay_body(first, receive))
        state = manager_lifespan_state(self.manager)
        if not sse:
            reply = await self.calls.run(call, exchange, lifespan_state=state, request=request)
            await self._write_json(reply, send)
            return
        # SSE mode: a disconnect cancels the call; a call silent for the deferral window commits to SSE and pings.
        # Our HTTP protocols report the connection's loss through the scope (CONNECTION_LOST_KEY); under another
        # ASGI server a task per call awaits `receive()` for the disconnect instead.
        cancel = exchange.cancel_scope = anyio.CancelScope()
        loop = asyncio.get_running_loop()
        watch = scope.get(CONNECTION_LOST_KEY)
        watcher = None
        if watch is not None:
            watch(exchange.lost)
        else:
            watcher = loop.create_task(self._watch_disconnect(receive, exchange))
        pinger: list[asyncio.Task[None]] = []
        timer = loop.call_later(SSE_PING_INTERVAL, lambda: pinger.append(loop.create_task(self._ping(exchange))))
        reply: dict[str, Any] | None = None
        try:
            with cancel:
                reply = await self.calls.run(call, exchange, lifespan_state=state, request=request)
        finally:
            timer.cancel()
            for task in pinger:
                task.cancel()
            if watcher is not None:
                watcher.cancel()
            else:
                watch(None)
        if reply is None:  # the client went away: nobody to answer
            return
        if exchange.committed:
            await exchange.emit(_sse_event(reply), last=True)
        else:
            exchange.finished = True
            await self._write_json(reply, send)

    @staticmethod
    async def _watch_disconnect(receive: Callable[..., Any], exchange: _Exchange) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        exchange.lost()

    @staticmethod
    async def _ping(exchange: _Exchange) -> None:
        while not exchange.finished:
            await exchange.emit(None)
            await asyncio.sleep(SSE_PING_INTERVAL)

    @staticmethod
    async def _write_json(reply: dict[str, Any], send: Callable[..., Any]) -> None:
        error = reply.get("error")
        status = ERROR_CODE_HTTP_STATUS.get(error.get("code"), 200) if isinstance(error, dict) else 200
        body = encode(reply)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


__all__ = ["FastToolCalls", "SSE_PING_INTERVAL"]
