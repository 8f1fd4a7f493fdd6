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

It also answers a plain ``tools/call`` POST on a handshake-era session
(protocol 2025-11-25 or older, opened with ``initialize``), admitted by the
handshake-era rules of :mod:`~openfunctions.servers._fast`, when its headers
are the session's plain ones: one ``Mcp-Session-Id`` naming a session of the
SDK's manager that the request's credential owns (not terminated, its idle
period not run out), one ``MCP-Protocol-Version`` equal to the negotiated
version, ``Content-Type: application/json``, the ``Accept`` the SDK requires
(JSON, and SSE too unless ``json_response``), the whole body in hand within
the size limit. Its reply is what the SDK's session transport sends: see
:meth:`FastToolCalls._serve_session`. A ``notifications/cancelled`` POST on a
session that names one of these calls cancels it and still goes to the SDK
(which answers 202).

Everything else — ``initialize``, other methods, notifications, batches,
malformed or mismatched anything — goes to the SDK's app with the body
replayed, unchanged: the SDK phrases every refusal, as before.

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
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.streamable_http import REQUEST_CANCELLED, REQUEST_STREAM_BUFFER_SIZE, EventMessage
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, decode_header_value
from mcp.shared.transport_context import TransportContext
from mcp_types import INTERNAL_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from sse_starlette import ServerSentEvent
from starlette.datastructures import Headers
from starlette.requests import Request

from ._event_store import SessionEvents
from ._fast import Admitted, Exchange, FastCalls, encode
from ._http_guard import CONNECTION_LOST_KEY, PARSED_BODY_KEY
from ._sdk import (
    manager_internals_present,
    manager_lifespan_state,
    manager_task_group,
    send_related_request,
    session_transport,
    session_transport_parts,
    transport_event_store,
    transport_priming_event,
    transport_request_finished,
    transport_request_started,
    transport_route,
    transport_send,
    transport_unroute,
)

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
_HANDSHAKE = frozenset(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)
#: A body with more brackets than this may nest deeper than the SDK's parser takes: the SDK path phrases that.
_MAX_NESTING = 200


def _parsed_body(scope: dict[str, Any], body: bytes) -> Any:
    """The request's JSON (as the HTTP guard parsed it, else parsed here); None when it is not JSON."""
    message = scope.get(PARSED_BODY_KEY)
    if message is None:
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            message = None
    return message


def _accepts(value: bytes) -> tuple[bool, bool]:
    """(JSON, SSE) acceptable per the ``Accept`` header, wildcards included (the SDK's rule)."""
    types = [part.split(b";")[0].strip().lower() for part in value.split(b",")]
    wildcard = b"*/*" in types
    return (wildcard or b"application/json" in types or b"application/*" in types,
            wildcard or b"text/event-stream" in types or b"text/*" in types)


def _sse_event(message: Mapping[str, Any], event_id: str | None = None, data: bytes | None = None) -> bytes:
    # sse-starlette's framing, as the SDK's responses have it: `id` (when stored), `event`, `data`.
    head = b"event: message\r\ndata: " if event_id is None else f"id: {event_id}\r\nevent: message\r\ndata: ".encode()
    return head + (encode(message) if data is None else data) + b"\r\n\r\n"


def _sse_ping() -> bytes:
    return ServerSentEvent(comment=f"ping - {datetime.now(UTC)}").encode()  # sse-starlette's keep-alive


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

    def __init__(self, scope: dict[str, Any], request_id: str | int, send: Callable[..., Any], sse: bool,
                 session: _Session | None = None) -> None:
        back_channel = session.dispatcher if session is not None and sse else None
        super().__init__(TransportContext(kind="streamable-http", can_send_request=back_channel is not None,
                                          headers=Headers(scope=scope)), request_id, back_channel)
        self._send = send
        self._sse = sse
        self.session = session  # a handshake-era session: events stored (with ids) in its event store
        self.committed = False
        self.finished = False
        self.cancel_scope: anyio.CancelScope | None = None  # SSE mode: cancelled when the client goes away
        self.peer_cancelled = False  # handshake era: notifications/cancelled named this call
        self._lock: asyncio.Lock | None = None
        self._pump: tuple[Any, asyncio.Task[None]] | None = None

    def lost(self) -> None:
        """The client went away: cancel the call, unless its reply is already being written."""
        if not self.finished and self.cancel_scope is not None:
            self.cancel_scope.cancel()

    async def deliver(self, message: dict[str, Any]) -> None:
        if not self._sse:
            return  # a JSON body carries only the reply (the SDK drops the rest too)
        if self.session is None:
            await self.emit(_sse_event(message))
            return
        await self.session_event(message)

    async def session_event(self, message: dict[str, Any], *, last: bool = False) -> None:
        """A handshake-era session's SSE event: stored and written on this stream, or, once the stream is gone
        (closed by the tool or by the client), handed to the SDK's router (stored, and sent on a resumed stream)."""
        assert self.session is not None
        if self.finished:
            await transport_send(self.session.transport, self.session.model(message), self.request_id)
            return
        data = encode(message)
        event_id = await self.session.store(self.request_id, message, len(data))
        await self.emit(_sse_event(message, event_id, data), last=last)

    async def close_stream(self) -> None:
        """``ctx.close_sse_stream``: end this call's SSE stream now; the client resumes it with ``Last-Event-ID``."""
        await self.emit(b"", last=True)

    def stream_lost(self) -> None:
        """The client went away: stop writing (the call goes on; its events go to the router from now on)."""
        self.finished = True

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> dict[str, Any]:
        """A server-to-client request (handshake-era SSE only): sent by the session's SDK dispatcher, which routes it
        (stored) onto this request's stream and correlates the client's answer, as for an SDK-path request."""
        if not self.can_send_request or self.session is None:
            raise NoBackChannelError(method)
        if self._pump is None:
            streams = anyio.create_memory_object_stream[EventMessage](REQUEST_STREAM_BUFFER_SIZE)
            transport_route(self.session.transport, str(self.request_id), streams)
            self._pump = (streams, asyncio.get_running_loop().create_task(self._forward(streams[1])))
        return await send_related_request(self._back_channel, method, params, opts, self.request_id)  # type: ignore[no-any-return]

    async def _forward(self, events: Any) -> None:
        async with events:
            async for event in events:
                data = event.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                head = b"event: message\r\ndata: " if event.event_id is None else f"id: {event.event_id}\r\nevent: message\r\ndata: ".encode()
                await self.emit(head + data + b"\r\n\r\n")

    async def unroute(self) -> None:
        """Stop taking the SDK's messages for this request; write what was already routed here."""
        if self._pump is not None and self.session is not None:
            streams, task = self._pump
            transport_unroute(self.session.transport, str(self.request_id), streams)
            streams[0].close()
            await task

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
                    headers = _SSE_HEADERS if self.session is None else self.session.sse_headers
                    await self._send({"type": "http.response.start", "status": 200, "headers": headers})
                if event is None:
                    event = b": ping\r\n\r\n" if self.session is None else _sse_ping()
                await self._send({"type": "http.response.body", "body": event, "more_body": not last})
            except OSError:  # the client went away; the disconnect watch cancels the call
                self.finished = True
            if last:
                self.finished = True


class _Session:
    """A handshake-era session as a fast-path call sees it: the SDK's transport and dispatcher, its event store."""

    __slots__ = ("id", "transport", "dispatcher", "events", "sse_headers", "json_headers")

    def __init__(self, session_id: str, transport: Any, dispatcher: Any) -> None:
        self.id = session_id
        self.transport = transport
        self.dispatcher = dispatcher
        self.events = transport_event_store(transport)
        sid = (b"mcp-session-id", session_id.encode("latin-1"))
        self.sse_headers = [*_SSE_HEADERS, sid]
        self.json_headers = [(b"content-type", b"application/json"), sid]

    async def store(self, request_id: Any, message: dict[str, Any], size: int | None = None) -> str | None:
        """Store ``message`` on the request's stream as the SDK's router does (the event id; ``None``: no store).

        ``size``: its encoded length, if known; our own store then counts that
        instead of encoding the message again (the SDK's interface has no room for it).
        """
        if self.events is None:
            return None
        if size is not None and isinstance(self.events, SessionEvents):
            return self.events.store_sized(str(request_id), self.model(message), size)
        return await self.events.store_event(str(request_id), self.model(message))  # type: ignore[no-any-return]

    @staticmethod
    def model(message: dict[str, Any]) -> Any:
        """The SDK's message model for ``message`` (what its event store and router take)."""
        if "result" in message:  # the reply: built, not validated (the handler's result is already the wire form)
            return types.JSONRPCResponse.model_construct(jsonrpc="2.0", id=message["id"], result=message["result"])
        return types.jsonrpc_message_adapter.validate_python(message, by_name=False)


def _standalone_closer(transport: Any) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        transport.close_standalone_sse_stream()  # public: the session's GET stream, not this call's

    return close


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
        self._running: dict[str, dict[Any, _Exchange]] = {}  # handshake-era calls running, per session id
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
            session = self._session_headers(scope)
            if session is None:
                await self.app(scope, receive, send)
            else:
                await self._session_call(scope, receive, send, *session)
            return
        first = await receive()
        if first["type"] != "http.request" or first.get("more_body", False):
            await self.app(scope, replay_body(first, receive), send)
            return
        body: bytes = first.get("body", b"")
        if len(body) > self.max_body_bytes:
            await self.app(scope, replay_body(first, receive), send)
            return
        message = _parsed_body(scope, body)
        call = self.calls.admit(message, version) if message is not None else None
        if call is None or not self._name_matches(scope, call.name):
            await self.app(scope, replay_body(first, receive), send)
            return
        await self._serve(call, first, scope, receive, send)

    def _plain_headers(self, scope: dict[str, Any]) -> str | None:
        """The protocol version if the headers are the plain valid ones for a fast-path call, else ``None``."""
        version: bytes | None = None
        method: bytes | None = None
        content_type: bytes | None = None
        accept: bytes | None = None
        length: bytes | None = None
        names = 0
        headers: list[tuple[bytes, bytes]] = scope["headers"]  # ASGI: (name, value) byte pairs
        for key, value in headers:
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

    def _session_headers(self, scope: dict[str, Any]) -> tuple[str, str, bool] | None:
        """(session id, version, plain?) for a POST on a handshake-era session; plain: the headers a fast-path call
        needs (the SDK accepts more; those requests go to it). ``None``: no session id or no handshake version."""
        session = version = content_type = accept = length = None
        plain = True
        for key, value in scope["headers"]:
            if key == b"mcp-session-id":
                plain = plain and session is None
                session = value
            elif key == b"mcp-protocol-version":
                plain = plain and version is None
                version = value
            elif key == b"content-type":
                content_type = content_type if content_type is not None else value
            elif key == b"accept":
                accept = accept if accept is not None else value
            elif key == b"content-length":
                length = length if length is not None else value
        if session is None or version not in _HANDSHAKE:
            return None
        if content_type is None or content_type.split(b";")[0].strip() != b"application/json":
            plain = False  # what both the SDK's checks accept (its transport's is case-sensitive)
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            plain = False
        has_json, has_sse = _accepts(accept or b"")
        if not has_json or not (self.json_response or has_sse):
            plain = False
        assert version is not None
        return session.decode("latin-1"), version.decode("latin-1"), plain

    async def _session_call(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any],
                            session_id: str, version: str, plain: bool) -> None:
        """A POST on a handshake-era session: a call the fast path admits is answered here; a
        ``notifications/cancelled`` naming one of its calls cancels that call (and goes on to the SDK)."""
        running = self._running.get(session_id)
        if not plain and not running:
            await self.app(scope, receive, send)
            return
        first = await receive()
        body: bytes = first.get("body", b"")
        if (first["type"] != "http.request" or first.get("more_body", False) or len(body) > self.max_body_bytes
                or body.count(b"[") + body.count(b"{") > _MAX_NESTING):
            await self.app(scope, replay_body(first, receive), send)
            return
        message = _parsed_body(scope, body)
        if running and type(message) is dict and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            rid = params.get("requestId") if type(params) is dict else None
            exchange = running.get(rid) if isinstance(rid, (str, int)) and type(rid) is not bool else None
            if exchange is not None and exchange.cancel_scope is not None:
                exchange.peer_cancelled = True  # as the SDK's dispatcher: interrupt the handler, answer "cancelled"
                exchange.cancel_scope.cancel()
        call = session = None
        if plain and message is not None:
            user = scope.get("user")
            requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
            transport = session_transport(self.manager, session_id, requestor)
            connection = self.calls.handshake_session(session_id)
            if (transport is not None and connection is not None and not transport.is_terminated
                    and session_transport_parts(transport)):
                call = self.calls.admit(message, version, session=connection)
                if call is not None:
                    session = _Session(session_id, transport, connection.outbound)
        if call is None or session is None:
            await self.app(scope, replay_body(first, receive), send)
            return
        if not transport_request_started(session.transport):
            await self.app(scope, replay_body(first, receive), send)  # its idle period ran out: the SDK answers
            return
        try:
            await self._serve_session(call, session, version, first, scope, receive, send)
        finally:
            transport_request_finished(session.transport, anyio.current_time())

    async def _serve_session(self, call: Admitted, session: _Session, version: str, first: dict[str, Any],
                             scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        """The SDK transport's reply for a handshake-era request: one JSON body (status 200, errors too), or an SSE
        stream opened at once (its priming event first where events are stored), the call's events, the reply last.
        A client that goes away does not cancel the call (its events are still stored for a resumption)."""
        sse = not self.json_response
        exchange = _Exchange(scope, call.request_id, send, sse, session)
        request = Request(scope, replay_body(first, receive))
        state = manager_lifespan_state(self.manager)
        stream_id = str(call.request_id)
        if sse:
            priming = await transport_priming_event(session.transport, stream_id, version)
            await exchange.emit(ServerSentEvent(**priming).encode() if priming is not None else b"")
        running = self._running.setdefault(session.id, {})
        running[call.request_id] = exchange
        exchange.cancel_scope = cancel = anyio.CancelScope()
        loop = asyncio.get_running_loop()
        pinger: list[asyncio.Task[None]] = []
        timer = loop.call_later(SSE_PING_INTERVAL, lambda: pinger.append(loop.create_task(self._ping(exchange)))) if sse else None
        watch = scope.get(CONNECTION_LOST_KEY) if sse else None
        if watch is not None:
            watch(exchange.stream_lost)
        # The SDK offers a tool these where events are stored and the client can resume (2025-11-25 and later).
        closers: dict[str, Any] = {}
        if sse and session.events is not None and version >= "2025-11-25":
            closers = {"close_sse_stream": exchange.close_stream,
                       "close_standalone_sse_stream": _standalone_closer(session.transport)}
        reply: dict[str, Any] | None = None
        try:
            with cancel:
                reply = await self.calls.run(call, exchange, lifespan_state=state, request=request, **closers)
        finally:
            if watch is not None:
                watch(None)
            if running.get(call.request_id) is exchange:
                del running[call.request_id]
                if not running:
                    self._running.pop(session.id, None)
            if timer is not None:
                timer.cancel()
            for task in pinger:
                task.cancel()
            await exchange.unroute()
        if reply is None:
            if not exchange.peer_cancelled:
                return
            reply = {"jsonrpc": "2.0", "id": call.request_id, "error": {"code": REQUEST_CANCELLED, "message": "Request cancelled"}}
        if session.transport.is_terminated:  # the session ended meanwhile: the SDK's answer for that
            if sse:
                await exchange.emit(b"", last=True)
            else:
                body = encode({"jsonrpc": "2.0", "id": None, "error": {
                    "code": INTERNAL_ERROR, "message": "Session terminated before the request completed"}})
                await self._write_body(500, session.json_headers, body, send)
            return
        if sse:
            await exchange.session_event(reply, last=True)
        else:
            body = encode(reply)
            await session.store(call.request_id, reply, len(body))
            await self._write_body(200, session.json_headers, body, send)

    @staticmethod
    async def _write_body(status: int, headers: list[tuple[bytes, bytes]], body: bytes, send: Callable[..., Any]) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})

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
            await self._write_json(await self.calls.run(call, exchange, lifespan_state=state, request=request), send)
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
            if watch is not None:  # exactly when there is no watcher
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
        code = error.get("code") if isinstance(error, dict) else None
        status = ERROR_CODE_HTTP_STATUS.get(code, 200) if isinstance(code, int) else 200
        body = encode(reply)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


__all__ = ["FastToolCalls", "SSE_PING_INTERVAL"]
