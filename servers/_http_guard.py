"""What stands between the network and the SDK's streamable-HTTP app: limits and request hygiene.

Two layers, because some attacks end before there is a request to look at:

- :class:`ConnectionGuard` (the connection, below ASGI), mixed into uvicorn's
  h11 protocol here (:class:`GuardedH11Protocol`) and its httptools one in
  ``_http_guard_httptools`` (``--http``; :func:`guarded_protocol` picks): a connection cap
  (a connection past it gets ``503`` and is closed at once, so half-open
  sockets never pile up into "Too many open files"), and a header timeout: a
  connection must deliver a complete request head within ``header_timeout``
  seconds of connecting or of its previous response, however slowly it drips
  bytes (uvicorn's keep-alive timer is reset by every byte and is not armed
  at all before the first request; a slowloris client held its socket forever).
- :class:`RequestGuard` (ASGI, outermost): refuses a request that carries both
  ``Content-Length`` and ``Transfer-Encoding`` (400, connection closed: a proxy
  that honours the other framing would see a different request, RFC 9112
  6.3); checks ``Host`` and ``Origin`` exactly (see :class:`HostRules`);
  answers ``GET /healthz``; reads a POST body within ``body_timeout`` and
  at most ``max_body_bytes``; refuses a body nested deeper than
  ``max_json_depth`` before anything parses it (400); a client that goes away
  mid-body ends the request quietly. For MCP it answers a request whose
  ``id`` is not a string or an integer with ``-32600`` instead of letting the
  SDK take it for a notification (202); for the chat server
  (``error_body`` given) it also refuses a POST that is not
  ``application/json`` (415: a browser sends ``text/plain``, a form or no
  type at all cross-site without a CORS preflight) and answers every refusal
  itself in the chat's error shape.
- :class:`SessionLimits`: the SDK's session cap and idle timeout, plus a cap
  per principal (the authenticated principal, else the client address), so
  one caller cannot take every session.

The MCP server and the chat server both run behind the first two (``chat/_http.py``).
Every refusal is logged through :data:`refusals`: one line per kind per
:data:`REFUSAL_LOG_INTERVAL` seconds, with how many were refused meanwhile,
so a flood of bad requests is not a flood of log lines. So are asyncio's
``accept()`` failures when file descriptors run out (:func:`quiet_accept_errors`).
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import h11
import structlog
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from uvicorn.protocols.http.h11_impl import H11Protocol

from openfunctions.core import PRINCIPAL_SCOPE_KEY

log = structlog.get_logger("openfunctions.servers.http")

from ._constants import valid_jsonrpc_id as _valid_id  # noqa: E402
from ._http_limits import (  # noqa: E402  (light module: the CLI reads the defaults without uvicorn)
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEAD_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    REFUSAL_LOG_INTERVAL,
)
from ._sdk import wrap_session_admission  # noqa: E402


class RefusalLog:
    """One warning line per refusal ``kind`` per ``interval`` seconds; the refusals in between are counted.

    The next line of a kind says how many of it went unlogged since the last
    (``unlogged``), so a client that sends a thousand bad requests a second
    costs a line every few seconds, not a thousand.
    """

    def __init__(self, interval: float = REFUSAL_LOG_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.clock = interval, clock
        self._last: dict[str, tuple[float, int]] = {}

    def __call__(self, kind: str, event: str = "request_refused", **fields: Any) -> bool:
        """Log ``event`` for ``kind`` unless one was logged within the interval; True if this one was."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last[0] < self.interval:
            self._last[kind] = (last[0], last[1] + 1)
            return False
        self._last[kind] = (now, 0)
        log.warning(event, reason=kind, unlogged=last[1] if last else 0, **fields)
        return True


#: The process's refusal log, shared by every guard (an attack on two servers in one process is still few lines).
refusals = RefusalLog()


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Route asyncio's "socket.accept() out of system resource" reports through :data:`refusals`.

    When the process runs out of file descriptors, asyncio's selector loop
    (CPython 3.11-3.13) reports it with a traceback once per pending connection
    in the backlog on every retry: thousands of lines a second. The loop itself
    stops accepting for a second and retries, which is right; only the report
    changes: one line per :data:`REFUSAL_LOG_INTERVAL` naming the limit to raise.
    Every other report goes to the handler that was there before.
    """
    previous = loop.get_exception_handler()
    if getattr(previous, "_quiets_accept_errors", False):
        return

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" in str(context.get("message", "")):
            exc = context.get("exception")
            refusals("accept_failed", event="connection_refused", error=str(exc) if exc else None,
                     hint="out of file descriptors: raise `ulimit -n`, or lower the connection cap")
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler._quiets_accept_errors = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


#: File descriptors kept free under the connection cap (journal, logs, listening socket, child processes).
FD_HEADROOM = 64

HEALTH_PATH = "/healthz"

#: ASGI scope key: the POST body as :class:`RequestGuard` parsed it (a dict), so the fast path need not parse it again.
PARSED_BODY_KEY = "openfunctions.parsed_body"

#: ASGI scope key, set by our HTTP protocols (:class:`ConnectionGuard`): ``watch(callback)`` has ``callback()`` called
#: once when the request's connection is lost (at once if it already is), ``watch(None)`` forgets it. The fast path
#: cancels a call whose client went away through it instead of a task per call awaiting ``receive()``; under another
#: ASGI server the key is absent and that task is the fallback.
CONNECTION_LOST_KEY = "openfunctions.on_connection_lost"


def clamp_connections(requested: int) -> int:
    """``requested`` connections, lowered below this process's open-file limit (with a warning) if needed."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or requested + FD_HEADROOM <= soft:
        return requested
    allowed = max(1, soft - FD_HEADROOM)
    log.warning("max_connections_lowered", requested=requested, allowed=allowed, open_file_limit=soft,
                hint="raise `ulimit -n` to allow more connections")
    return allowed


_CLOSE_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 42\r\n\r\ntoo many open connections; try again later"
)


class _CountedWarnings:
    """uvicorn's protocol logger with its warnings (one per malformed request: "Invalid HTTP request received.")
    sent through :data:`refusals`; errors (an app that raised) and everything else go to uvicorn's logger as they are."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        text = str(msg)
        kind = "invalid_http_request" if text.startswith("Invalid HTTP request") else "http_protocol_warning"
        refusals(kind, detail=text[:120])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


_COUNTED_WARNINGS = _CountedWarnings(logging.getLogger("uvicorn.error"))


class ConnectionGuard:
    """The connection cap and the request-head timer, shared by both HTTP protocols (h11 and httptools).

    Mixed in before uvicorn's protocol class; a subclass says whether the
    connection is waiting for a request head (:meth:`_awaiting_head`) and calls
    :meth:`_admit` after uvicorn's ``connection_made``, :meth:`_arm_head_timer`
    when a head is due (connect, end of a response) and
    :meth:`_disarm_head_timer` when one is complete.

    It also tells the app when the connection is lost (:data:`CONNECTION_LOST_KEY`):
    a subclass puts :meth:`_watch_lost` in each request's scope and calls
    :meth:`_connection_gone` from ``connection_lost``. One callback per
    connection: a connection runs one request at a time (uvicorn queues
    pipelined ones until the response before them is complete).
    """

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    # uvicorn's protocol classes provide these
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    logger: logging.Logger
    _head_timer: asyncio.TimerHandle | None = None
    _lost_callback: Callable[[], object] | None = None
    _gone = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a parse error per request is a refusal, counted like the others; the wrapper answers the rest of a
        # Logger's interface from uvicorn's logger (__getattr__), which is how uvicorn's protocols use it
        self.logger = cast(logging.Logger, _COUNTED_WARNINGS)

    @classmethod
    def configured(cls, *, max_connections: int, header_timeout: float) -> type[Any]:
        """A subclass bound to these limits (uvicorn instantiates the class per connection)."""
        return type(cls.__name__, (cls,), {"max_connections": max_connections, "header_timeout": header_timeout})

    def _admit(self, transport: asyncio.Transport) -> bool:
        """Past the cap: answer 503, close, and return False."""
        if len(self.connections) <= self.max_connections:
            return True
        self.connections.discard(self)
        refusals("max_connections", event="connection_refused", limit=self.max_connections)
        transport.write(_CLOSE_503)
        transport.close()
        return False

    def _awaiting_head(self) -> bool:
        raise NotImplementedError

    def _watch_lost(self, callback: Callable[[], object] | None) -> None:
        """The :data:`CONNECTION_LOST_KEY` callable: register ``callback`` (``None``: unregister)."""
        if callback is not None and self._gone:
            callback()
            return
        self._lost_callback = callback

    def _connection_gone(self) -> None:
        self._gone = True
        callback, self._lost_callback = self._lost_callback, None
        if callback is not None:
            callback()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport is not None and not self.transport.is_closing() and self._awaiting_head():
            # No request in progress: nothing to answer, just free the socket.
            refusals("header_timeout", event="connection_closed", timeout_s=self.header_timeout)
            self.transport.close()


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a request-head timeout (class attributes set per server).

    h11 itself bounds a request head (16 KiB; past it uvicorn answers 400 and closes).
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_timer = None
        super().connection_made(transport)
        if self._admit(transport):
            self._arm_head_timer()

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def handle_events(self) -> None:
        super().handle_events()
        # uvicorn builds each request's scope and schedules its app task in here; the task has not run yet.
        if self.cycle is not None:
            self.cycle.scope.setdefault(CONNECTION_LOST_KEY, self._watch_lost)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()  # the head is complete (or the peer broke the protocol)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)
        self._connection_gone()


def guarded_protocol(parser: str, *, max_connections: int, header_timeout: float) -> type[Any]:
    """uvicorn's HTTP protocol class for ``parser`` (``h11`` or ``httptools``) with the connection guards."""
    if parser == "httptools":
        from ._http_guard_httptools import GuardedHttpToolsProtocol

        return GuardedHttpToolsProtocol.configured(max_connections=max_connections, header_timeout=header_timeout)
    if parser == "h11":
        return GuardedH11Protocol.configured(max_connections=max_connections, header_timeout=header_timeout)
    raise ValueError(f"HTTP parser must be 'h11' or 'httptools', got {parser!r}")


# -- Host / Origin --------------------------------------------------------------

_HOST_RE = re.compile(r"^(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)(?::(?P<port>[0-9]{1,5}|\*))?$")
_ORIGIN_RE = re.compile(r"^(?P<scheme>https?)://(?P<rest>[^/?#@\s]+)$")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: An origin rule's port meaning "the port the request's Host header names" (the page's own origin).
SAME_PORT = "="


def _split_host(text: str, *, allow_star: bool) -> tuple[str, str | None] | None:
    m = _HOST_RE.match(text)
    if m is None:
        return None
    port = m.group("port")
    if port == "*" and not allow_star:
        return None
    return m.group("name").lower(), port


def is_loopback_host(host: str) -> bool:
    """Whether a bind address is loopback: ``localhost``, 127.0.0.0/8 or ``::1`` (bracketed or not).
    Every HTTP surface we serve (MCP, chat, the viewer) decides its default Host rules and whether it needs
    a token by this one answer."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostRules:
    """Exact ``Host``/``Origin`` matching (DNS-rebinding and cross-site protection).

    A rule is ``name``, ``name:port`` or ``name:*`` (``*``: any port or
    none); an origin rule is ``scheme://name[:port|:*]``. A header matches
    only if it parses as exactly that shape: ``127.0.0.1:8000@evil.example``
    is not a host, so it never matches ``127.0.0.1:*`` (the SDK's check was a
    prefix match). An absent Origin header (not a browser) is accepted;
    ``Origin: null`` (a sandboxed frame, a ``data:`` or ``file:`` page) never is.

    :meth:`loopback` (a loopback bind without ``--allowed-host``): a loopback
    name on any port, because an SSH tunnel, ``docker -p Q:P`` or
    ``kubectl port-forward`` hands the server ``Host: localhost:Q`` (DNS
    rebinding needs a foreign *name*, not a foreign port); an Origin must be a
    loopback origin on the port that Host names: the page the server itself
    served, however it was reached, and not another local web app's page.
    """

    hosts: tuple[tuple[str, str | None], ...]
    origins: tuple[tuple[str, str, str | None], ...]

    @classmethod
    def build(cls, hosts: list[str], origins: list[str]) -> HostRules:
        parsed_hosts = []
        for h in hosts:
            p = _split_host(h, allow_star=True)
            if p is None:
                raise ValueError(f"allowed host {h!r} is not NAME, NAME:PORT or NAME:*")
            parsed_hosts.append(p)
        parsed_origins = []
        for o in origins:
            m = _ORIGIN_RE.match(o)
            p = _split_host(m.group("rest"), allow_star=True) if m else None
            if m is None or p is None:
                raise ValueError(f"allowed origin {o!r} is not SCHEME://NAME[:PORT|:*]")
            parsed_origins.append((m.group("scheme"), *p))
        return cls(tuple(parsed_hosts), tuple(parsed_origins))

    @classmethod
    def loopback(cls) -> HostRules:
        return cls(
            tuple((n, "*") for n in LOOPBACK_NAMES),
            tuple((s, n, SAME_PORT) for s in ("http", "https") for n in LOOPBACK_NAMES),
        )

    @staticmethod
    def _port_ok(rule: str | None, port: str | None, host_port: str | None = None) -> bool:
        return rule == "*" or rule == port or (rule == SAME_PORT and port == host_port)

    def host_ok(self, header: str | None) -> bool:
        p = _split_host(header or "", allow_star=False)
        if p is None:
            return False
        name, port = p
        return any(name == n and self._port_ok(rp, port) for n, rp in self.hosts)

    def origin_ok(self, header: str | None, host: str | None = None) -> bool:
        """Whether ``header`` (an Origin) is allowed on a request whose (accepted) Host header is ``host``."""
        if header is None:
            return True
        m = _ORIGIN_RE.match(header)
        p = _split_host(m.group("rest"), allow_star=False) if m else None
        if m is None or p is None:
            return False
        host_parts = _split_host(host or "", allow_star=False)
        host_port = host_parts[1] if host_parts else None
        scheme, (name, port) = m.group("scheme"), p
        return any(scheme == s and name == n and self._port_ok(rp, port, host_port) for s, n, rp in self.origins)


# -- JSON nesting -----------------------------------------------------------------

# A JSON string (skipped whole: brackets inside it do not nest) or one bracket.
_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)


def json_too_deep(body: bytes, limit: int) -> bool:
    """Whether ``body`` nests arrays/objects deeper than ``limit``, judged without parsing it.

    Python's parser recurses once per level (30,000 levels: ``RecursionError``,
    and what handles the value next may recurse too), so the depth is counted
    first. Fewer opening brackets than ``limit`` in all is the common case and
    costs two ``bytes.count`` calls.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(body):
        token = m.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


# -- the ASGI guard -------------------------------------------------------------


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())  # ASGI: (name, value) byte pairs
    for k, v in headers:
        if k == name:
            return v
    return None


_HANDSHAKE_VERSIONS = frozenset(v.encode("latin-1") for v in HANDSHAKE_PROTOCOL_VERSIONS)


def _opens_session(scope: dict[str, Any]) -> bool:
    """Whether the SDK's session manager would try to open a session for this request.

    Only a POST without ``Mcp-Session-Id`` whose ``MCP-Protocol-Version`` is
    absent or a handshake-era version: the manager routes any other version
    (2026-07-28 and later, or an unknown one) to its sessionless single-exchange
    handler, which opens nothing (same first-header rule as the manager).
    """
    if scope["method"] != "POST" or _header(scope, b"mcp-session-id") is not None:
        return False
    version = _header(scope, b"mcp-protocol-version")
    return version is None or version in _HANDSHAKE_VERSIONS


async def _respond(send: Callable[..., Any], status: int, body: bytes, *, content_type: bytes = b"application/json",
                   close: bool = False, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    headers += extra or []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _rpc_error(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()


def _shown(value: bytes | None, limit: int = 80) -> str:
    """A header value for a log line: decoded, quoted, cut short (a client's bytes are data, not log lines)."""
    text = repr(value.decode("latin-1")) if value is not None else "(none)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: ``error_body(code, message)`` -> (response body, content type): how a server's refusals look.
ErrorBody = Callable[[str, str], tuple[bytes, bytes]]

#: Media types a state-changing request may carry when ``error_body`` is given (``application/json`` and ``+json``).
_JSON_TYPE = re.compile(r"^application/(?:[a-z0-9.+-]+\+)?json$")

#: Methods that change state: only these need a JSON body type (a cross-site page can send GET/HEAD but cannot read).
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: Accepted (Host, Origin) pairs a RequestGuard remembers; past it they are all forgotten (no per-request bookkeeping,
#: and a client can only churn pairs the rules allow anyway).
_ACCEPTED_PAIRS_MAX = 256


class RequestGuard:
    """ASGI middleware, outermost: framing, Host/Origin, health, the POST body deadline, size and depth, invalid ids.

    ``error_body=None`` (the MCP server): a refusal before JSON-RPC (framing,
    Host, Origin, body timeout) is plain text, one of a JSON-RPC body is a
    JSON-RPC error; a body over ``max_body_bytes`` and a wrong content type
    are left to the SDK (it answers 413 and 415 in JSON-RPC). Given (the chat
    server): every refusal is ``error_body(code, message)``, a body over the
    limit gets 413 here, and a state-changing request must be
    ``application/json`` (415). ``health=None``: no health route here.
    ``host_hint``: what a Host refusal's log line tells the operator to do.
    """

    def __init__(
        self,
        app: Any,
        *,
        rules: HostRules | None,
        health: Callable[[], Awaitable[dict[str, Any]]] | None,
        max_body_bytes: int,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        error_body: ErrorBody | None = None,
        host_hint: str = "to accept another name, start the server with --allowed-host NAME[:PORT]",
    ) -> None:
        self.app = app
        self.rules = rules
        self.health = health
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.max_json_depth = max_json_depth
        self.error_body = error_body
        self.host_hint = host_hint
        self._accepted_pairs: set[tuple[bytes | None, bytes | None]] = set()

    async def _refuse(self, send: Callable[..., Any], status: int, code: str, message: str, *,
                      close: bool = False) -> None:
        """Answer a refusal: the server's error shape, else plain text (the MCP server's refusals before JSON-RPC)."""
        if self.error_body is not None:
            body, ctype = self.error_body(code, message)
        else:
            body, ctype = message.encode(), b"text/plain; charset=utf-8"
        await _respond(send, status, body, content_type=ctype, close=close)

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _header(scope, b"transfer-encoding") is not None and _header(scope, b"content-length") is not None:
            refusals("ambiguous_framing", detail="both Content-Length and Transfer-Encoding")
            await self._refuse(send, 400, "ambiguous_framing",
                               "a request must not carry both Content-Length and Transfer-Encoding", close=True)
            return
        if self.rules is not None:
            verdict = self._host_origin_ok(_header(scope, b"host"), _header(scope, b"origin"))
            if verdict is not None:
                await self._refuse(send, *verdict)
                return
        method = scope["method"]
        if self.health is not None and scope["path"] == HEALTH_PATH and method in ("GET", "HEAD"):
            report = await self.health()
            await _respond(send, 200 if report.get("status") == "ok" else 503, json.dumps(report).encode())
            return
        if self.error_body is not None and method in _STATE_CHANGING:
            ctype = (_header(scope, b"content-type") or b"").decode("latin-1").split(";")[0].strip().lower()
            if not _JSON_TYPE.match(ctype):
                refusals("unsupported_media_type", content_type=_shown(ctype.encode("latin-1")))
                await self._refuse(send, 415, "unsupported_media_type",
                                   f"send the body as application/json (Content-Type), not {ctype or 'no type'}")
                return
        if method != "POST":
            await self.app(scope, receive, send)
            return
        if self.error_body is not None:
            declared = _header(scope, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                refusals("body_too_large", limit=self.max_body_bytes)
                await self._refuse(send, 413, "body_too_large",
                                   f"the body is {int(declared)} bytes; the limit is {self.max_body_bytes}", close=True)
                return
        try:
            # asyncio's own timeout: a third of anyio.fail_after's CPU per request (the ASGI app runs on asyncio).
            async with asyncio.timeout(self.body_timeout):
                body, complete = await self._read_body(receive)
        except TimeoutError:
            refusals("body_timeout", timeout_s=self.body_timeout)
            await self._refuse(send, 408, "body_timeout",
                               f"the request body did not arrive within {self.body_timeout:g} s", close=True)
            return
        if body is None:  # the client went away mid-body: nobody to answer, nothing to log but a count
            refusals("client_disconnected", event="request_abandoned")
            return
        if not complete and self.error_body is not None:
            refusals("body_too_large", limit=self.max_body_bytes)
            await self._refuse(send, 413, "body_too_large", f"the body is over the {self.max_body_bytes}-byte limit",
                               close=True)
            return
        if complete and json_too_deep(body, self.max_json_depth):
            refusals("json_too_deep", limit=self.max_json_depth)
            if self.error_body is None:  # the stdio transport's answer to the same message
                await _respond(send, 400, _rpc_error(INVALID_REQUEST, "Invalid Request: the message is nested too deeply "
                                                     f"(more than {self.max_json_depth} levels of arrays/objects)"))
            else:
                await self._refuse(send, 400, "invalid_json",
                                   f"the body is not acceptable JSON: it nests deeper than {self.max_json_depth} levels")
            return
        if complete and self.error_body is None:
            refusal = _invalid_id_refusal(body, scope)
            if refusal is not None:
                await _respond(send, 400, refusal)
                return
        await self.app(scope, _replay(body, complete, receive), send)

    def _host_origin_ok(self, host: bytes | None, origin: bytes | None) -> tuple[int, str, str] | None:
        """``None`` if ``Host`` and ``Origin`` pass :attr:`rules`, else the refusal's status, code and text.

        Accepted (Host, Origin) pairs are remembered (a client sends the same
        pair on every request; checking it is a regex match or two), at most
        :data:`_ACCEPTED_PAIRS_MAX`, forgotten all at once past that; a refused pair is
        checked again every time.
        """
        key = (host, origin)
        if key in self._accepted_pairs:
            return None
        assert self.rules is not None
        host_text = host.decode("latin-1") if host is not None else None
        if not self.rules.host_ok(host_text):
            refusals("invalid_host", host=_shown(host), hint=self.host_hint)
            return 421, "invalid_host", f"Invalid Host header {_shown(host, 60)}: not a name this server answers to"
        if not self.rules.origin_ok(origin.decode("latin-1") if origin is not None else None, host_text):
            refusals("invalid_origin", origin=_shown(origin), host=_shown(host),
                     hint="an Origin must be the origin of the page this server served (a loopback page on the "
                          "port the Host header names), or one named by --allowed-origin")
            return 403, "invalid_origin", (f"Invalid Origin header {_shown(origin, 60)}: only this server's own "
                                           "page may send requests here")
        if len(self._accepted_pairs) >= _ACCEPTED_PAIRS_MAX:
            self._accepted_pairs.clear()
        self._accepted_pairs.add(key)
        return None

    async def _read_body(self, receive: Callable[..., Any]) -> tuple[bytes | None, bool]:
        """The whole body, or its first ``max_body_bytes + 1`` bytes (``complete=False``), or ``None`` if the client left."""
        chunks = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, False
            chunks += message.get("body", b"")
            if not message.get("more_body", False):
                return bytes(chunks), True
            if len(chunks) > self.max_body_bytes:
                return bytes(chunks), False


def _replay(body: bytes, complete: bool, receive: Callable[..., Any]) -> Callable[..., Any]:
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        message: dict[str, Any] = await receive()
        return message

    return replayed


def _invalid_id_refusal(body: bytes, scope: dict[str, Any] | None = None) -> bytes | None:
    """A -32600 body for a request (it has a ``method``) whose ``id`` is present but not a string/integer."""
    if b"id" not in body:  # cheap pre-check; a JSON key "id" always contains these bytes unless escaped
        return None
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None  # not ours to judge: the SDK answers malformed bodies
    if isinstance(value, dict) and "method" in value and "id" in value and not _valid_id(value["id"]):
        shown = json.dumps(value["id"])
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return _rpc_error(INVALID_REQUEST, f'Invalid Request: the "id" member must be a string or an integer, got {shown}')
    if scope is not None and isinstance(value, dict):
        scope[PARSED_BODY_KEY] = value
    return None


# -- sessions -------------------------------------------------------------------

_session_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("openfunctions_session_key", default=None)


class SessionLimits:
    """Counts open sessions per principal and refuses one past ``per_principal`` (``None``: no cap).

    Wired into the SDK's session manager by :meth:`install` (its private
    ``_admit_session``/``_discard_session``, through ``_sdk.wrap_session_admission``): admission is
    decided under the manager's lock, so concurrent ``initialize`` requests
    cannot overshoot the cap.
    """

    def __init__(self, per_principal: int | None) -> None:
        if per_principal is not None and per_principal <= 0:
            raise ValueError("per_principal must be a positive number of sessions or None")
        self.per_principal = per_principal
        self._owner: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def open_for(self, key: str) -> int:
        return self._count.get(key, 0)

    def full(self, key: str) -> bool:
        return self.per_principal is not None and self.open_for(key) >= self.per_principal

    def install(self, manager: Any, on_admit: Callable[[Any], None] | None = None) -> None:
        wrap_session_admission(manager, partial(self._admit, on_admit=on_admit), self._discard)

    def _admit(self, admit: Callable[..., Any], *, on_admit: Callable[[Any], None] | None) -> Callable[..., Any]:
        def admit_limited(*args: Any, **kwargs: Any) -> Any:
            key = _session_key.get()
            if key is not None and self.full(key):
                return None  # the SDK answers 503 "Too many open sessions"
            transport = admit(*args, **kwargs)
            if transport is not None:
                if key is not None:
                    self._owner[transport.mcp_session_id] = key
                    self._count[key] = self._count.get(key, 0) + 1
                if on_admit is not None:
                    on_admit(transport)
            return transport

        return admit_limited

    def _discard(self, discard: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        async def discard_counted(session_id: str, transport: Any) -> None:
            key = self._owner.pop(session_id, None)
            if key is not None:
                left = self._count.get(key, 1) - 1
                if left > 0:
                    self._count[key] = left
                else:
                    self._count.pop(key, None)
            await discard(session_id, transport)

        return discard_counted

    def middleware(self, app: Any) -> Callable[..., Any]:
        """ASGI middleware (inside authentication): names the caller for admission, refuses a request that would open a session early when its cap is reached (a 2026-07-28 request opens none and passes)."""

        async def limited(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            key = scope.get(PRINCIPAL_SCOPE_KEY)
            if key is None:
                client = scope.get("client")
                key = f"addr:{client[0]}" if client else "addr:?"
            else:
                key = f"principal:{key}"
            if self.full(key) and _opens_session(scope):
                log.warning("session_refused", reason="max_sessions_per_principal", limit=self.per_principal)
                await _respond(send, 503, _rpc_error(
                    INTERNAL_ERROR,
                    f"too many open sessions for this client ({self.per_principal}, --max-sessions-per-principal): "
                    "end one (HTTP DELETE) or wait for idle ones to expire",
                ), extra=[(b"retry-after", b"5")])
                return
            token = _session_key.set(key)
            try:
                await app(scope, receive, send)
            finally:
                _session_key.reset(token)

        return limited


__all__ = [
    "ConnectionGuard",
    "GuardedH11Protocol",
    "guarded_protocol",
    "HostRules",
    "is_loopback_host",
    "RequestGuard",
    "SessionLimits",
    "clamp_connections",
    "json_too_deep",
    "quiet_accept_errors",
    "refusals",
    "RefusalLog",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEAD_BYTES",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSIONS_PER_PRINCIPAL",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "HEALTH_PATH",
    "PARSED_BODY_KEY",
    "CONNECTION_LOST_KEY",
]
