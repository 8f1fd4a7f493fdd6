"""The direct ``tools/call`` path: one JSON-RPC request answered without the SDK's transport machinery.

The SDK serves a ``tools/call`` through several layers that each re-read the
request: the transport (streams, tasks), the runner (``_meta`` lifted with
pydantic, the params validated twice, the result validated and re-dumped),
the JSON-RPC envelope models. Under load these layers cost more CPU than the
call itself. :class:`FastCalls` admits a request only when it is plainly a
well-formed ``tools/call`` that it can answer exactly as the SDK would (a
2026-07-28 one, or one on a handshake-era session: one path, the era a
parameter), and then runs the SAME chain the SDK runs: the server's middleware
(OpenTelemetry span, the 2025-11-25 tasks shim) around
:meth:`OpenFunctionsServer._call_tool` (the thin MCP layer -> executor, as the SDK's handler;
receipt in ``_meta``, principal scope, shutdown handling), with a real
``ServerSession``/``ServerRequestContext``; then it shapes the result the way
the SDK's runner does (the ``serverInfo`` stamp; the per-version result sieve
unless the result is in the plain shape the sieve leaves unchanged, checked by
tests/servers/test_fast_path.py).

A request is admitted only if all of these hold (anything else returns
``None`` and the caller hands the request, unchanged, to the SDK path, which
answers it, errors included):

- the envelope: an object with only ``jsonrpc`` ("2.0"), ``id`` (a string or
  an integer), ``method`` ("tools/call") and ``params``;
- ``params`` has only ``name`` (a string), ``arguments`` (an object, or
  absent) and ``_meta``; no ``task`` (task augmentation), nothing else;
- ``_meta`` carries only the 2026-07-28 envelope keys (protocol version,
  client capabilities, optional client info): no ``progressToken``, no log
  level, no trace context; its protocol version is a modern one and equals
  the transport's (the HTTP header); the envelope passes the SDK's own
  validation (checked once per distinct envelope and cached);
- the tool exists, declares no task support (``forbidden``) and its input
  schema has no ``x-mcp-header`` annotations (no ``Mcp-Param-*`` checks to
  make); no cache hint is configured for ``tools/call``.

On a handshake-era session (protocol 2025-11-25 or older, opened with
``initialize``) the envelope rules are replaced by these:

- ``params`` has only ``name`` and ``arguments``: no ``_meta`` at all (so no
  ``progressToken``), no ``task``;
- the session's ``initialize`` was accepted (else the SDK's init gate
  answers) and the transport's version header, where there is one, equals
  the negotiated version; the SDK's surface validation at that version
  accepts such params (checked once per version);
- the call then runs on the session's own SDK ``Connection`` (client info,
  negotiated version, the back-channel a tool's sampling or elicitation
  request goes out on), noted when the session's ``initialize`` ran
  through the server (:class:`_SessionCapture`); errors are mapped as the
  SDK's loop dispatcher maps them (``MCPError``, ``ValidationError``, else
  code 0 with the exception's text); the result is sieved for that version
  and carries no ``resultType`` or ``serverInfo`` stamp.

Private SDK API used, all through :mod:`openfunctions.servers._sdk` (a
missing piece turns the fast path off or makes it do the SDK's full work,
never breaks a call): a request session's ``_connection`` (the handshake-era
session's ``Connection``; without it such calls take the SDK path); the session manager's ``_lifespan_state`` and
``_task_group`` (HTTP, read by :mod:`openfunctions.servers._fast_http`); the
type of the SDK's OpenTelemetry middleware, left out of the chain while
tracing is off (see :meth:`FastCalls._chain`); whether a connection's exit
stack holds anything. tests/servers/test_sdk_contract.py checks each is still there.
"""

from __future__ import annotations

import json
import secrets
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp_types as types
import structlog
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.runner import aclose_shielded, modern_error_data
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    ErrorData,
)
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace
from pydantic import ValidationError

from openfunctions.core import ToolNotFound

from ._constants import RECEIPT_META_KEY, env_switch, valid_jsonrpc_id
from ._sdk import OTEL_MIDDLEWARE, connection_of, exit_stack_in_use

if TYPE_CHECKING:
    from ._server import OpenFunctionsServer

log = structlog.get_logger("openfunctions.servers.fast")

FAST_PATH_ENV = "OPENFUNCTIONS_FAST_PATH"
"""Set to ``0`` (or ``off``/``false``/``no``) to turn the direct ``tools/call`` path off (``--no-fast-path``)."""

_ENVELOPE_KEYS = frozenset({PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY})
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_HANDSHAKE_PARAM_KEYS = frozenset({"name", "arguments"})
_PLAIN_RESULT_KEYS = frozenset({"content", "_meta", "resultType", "structuredContent", "isError"})
_ENVELOPE_CACHE_MAX = 1024


def fast_path_enabled(default: bool = True) -> bool:
    """The ``OPENFUNCTIONS_FAST_PATH`` switch (``0``/``off``/``false``/``no`` turn it off)."""
    return env_switch(FAST_PATH_ENV, default)


@dataclass(frozen=True)
class Admitted:
    """A ``tools/call`` the fast path answers: what :meth:`FastCalls.run` needs."""

    request_id: str | int
    name: str
    arguments: dict[str, Any] | None
    params: dict[str, Any]
    meta: dict[str, Any] | None  # the validated envelope (a fresh copy per request); None: handshake era
    protocol_version: str
    envelope: _Envelope | None  # None: handshake era
    session: Connection | None = None  # handshake era: the session's connection (the SDK's, shared by its requests)


@dataclass(frozen=True)
class _Envelope:
    """A validated envelope and the client identity the SDK derives from it (built once, like a session's)."""

    meta: dict[str, Any]
    client_params: Any  # InitializeRequestParams | None
    client_capabilities: Any  # ClientCapabilities | None
    no_channel: Any  # the SDK's default connection outbound (none)

    def connection(self, version: str, outbound: Any = None) -> Connection:
        """What ``Connection.from_envelope`` builds, without validating the same envelope again.

        The validated identity objects are shared by the requests carrying this
        envelope, as a handshake-era session's are shared by its requests.
        tests/servers/test_fast_http.py checks it matches ``from_envelope``.
        """
        connection = Connection(self.no_channel if outbound is None else outbound, protocol_version=version,
                                client_params=self.client_params)
        connection.client_capabilities = self.client_capabilities
        connection.initialized.set()
        return connection


def _plain_result(result: Mapping[str, Any]) -> bool:
    """Whether ``result`` is in the shape the SDK's result sieve returns unchanged (text blocks only)."""
    if not _PLAIN_RESULT_KEYS.issuperset(result) or result.get("resultType") != "complete":
        return False
    content = result.get("content")
    if not isinstance(content, list):
        return False
    for block in content:
        if type(block) is not dict or len(block) != 2 or block.get("type") != "text" or type(block.get("text")) is not str:
            return False
    if "structuredContent" in result and type(result["structuredContent"]) is not dict:
        return False
    if "isError" in result and result["isError"] is not True:
        return False
    meta = result.get("_meta", {})
    # The sieve drops None values directly under `_meta` (not deeper): such a result is not plain.
    return type(meta) is dict and None not in meta.values()


class FastCalls:
    """Admission and execution of direct ``tools/call`` requests for one server (HTTP and stdio share it)."""

    def __init__(self, server: OpenFunctionsServer) -> None:
        self.server = server
        self.served = 0  # calls answered by this path (tests and the bench check it is taken)
        self._envelopes: dict[str, _Envelope | None] = {}
        self._tools: dict[str, tuple[Any, bool]] = {}
        self._stamp: dict[str, Any] | None = None
        self._composed: tuple[tuple[Any, ...], Callable[[Any], Awaitable[Any]]] | None = None
        self._versions: dict[str, bool] = {}
        self._chain_key: tuple[tuple[Any, ...], bool] | None = None
        # Weak values: a session the SDK forgot leaves no entry behind (however many sessions come and go).
        self._sessions: weakref.WeakValueDictionary[str | None, Connection] = weakref.WeakValueDictionary()
        # The handshake-era session state (client info, negotiated version, log level, back-channel) lives in the
        # SDK's Connection, built privately per session: a transparent middleware notes it at `initialize`.
        server.lowlevel.middleware.insert(0, _SessionCapture(self))

    @classmethod
    def of(cls, server: OpenFunctionsServer) -> FastCalls:
        """The server's one instance (its caches and counter are shared by every transport serving it)."""
        calls = server._fast_calls
        if not isinstance(calls, cls):
            calls = server._fast_calls = cls(server)
        return calls

    # -- admission ---------------------------------------------------------------

    def admit(self, message: Any, protocol_version: str | None, *, session: Connection | None = None) -> Admitted | None:
        """The request, if the fast path can answer it exactly as the SDK would; else ``None`` (use the SDK path).

        ``protocol_version``: what the transport says (the HTTP
        ``MCP-Protocol-Version`` header); ``None`` where the transport has no
        such header (stdio: the envelope alone decides). ``session``: on a
        handshake-era connection, its SDK ``Connection`` (see
        :meth:`handshake_session`); the request is then judged by the
        handshake-era rules (module docstring).
        """
        if type(message) is not dict or not _REQUEST_KEYS.issuperset(message) or len(message) != 4:
            return None
        if message["jsonrpc"] != "2.0" or message["method"] != "tools/call" or not valid_jsonrpc_id(message["id"]):
            return None
        params = message["params"]
        if session is not None:
            return self._admit_handshake(message["id"], params, session, protocol_version)
        if type(params) is not dict or not _PARAM_KEYS.issuperset(params):
            return None
        name, meta = params.get("name"), params.get("_meta")
        arguments = params.get("arguments")
        if type(name) is not str or type(meta) is not dict or (arguments is not None and type(arguments) is not dict):
            return None
        if "arguments" in params and arguments is None:
            return None  # explicit null: let the SDK judge it
        version = meta.get(PROTOCOL_VERSION_META_KEY)
        if version not in MODERN_PROTOCOL_VERSIONS or (protocol_version is not None and version != protocol_version):
            return None
        if not _ENVELOPE_KEYS.issuperset(meta) or CLIENT_CAPABILITIES_META_KEY not in meta:
            return None
        envelope = self._envelope(meta, version)
        if envelope is None or not self._tool_ok(name) or self.server.lowlevel.cache_hints.get("tools/call") is not None:
            return None
        return Admitted(message["id"], name, arguments, params, dict(envelope.meta), version, envelope)

    def _admit_handshake(self, request_id: str | int, params: Any, session: Connection,
                         header_version: str | None) -> Admitted | None:
        """A handshake-era ``tools/call``: ``name`` and ``arguments`` only (no ``_meta`` at all), on a session whose
        ``initialize`` was accepted, at the version it negotiated (and the HTTP header's, where there is one)."""
        if type(params) is not dict or not _HANDSHAKE_PARAM_KEYS.issuperset(params):
            return None
        name, arguments = params.get("name"), params.get("arguments")
        if type(name) is not str or (arguments is not None and type(arguments) is not dict):
            return None
        if "arguments" in params and arguments is None:
            return None
        version = session.protocol_version
        if (version in MODERN_PROTOCOL_VERSIONS or not session.initialize_accepted
                or (header_version is not None and header_version != version)):
            return None
        if not self._handshake_version_ok(version) or not self._tool_ok(name):
            return None
        if self.server.lowlevel.cache_hints.get("tools/call") is not None:
            return None
        return Admitted(request_id, name, arguments, params, None, version, None, session)

    def _handshake_version_ok(self, version: str) -> bool:
        """Whether the SDK's surface validation at ``version`` accepts every request admission lets through
        (a string name, an object of arguments or none): checked once per version."""
        ok = self._versions.get(version)
        if ok is None:
            try:
                _methods.validate_client_request("tools/call", version, {"name": "x", "arguments": {"a": [1, None]}})
                _methods.validate_client_request("tools/call", version, {"name": "x"})
                ok = True
            except Exception:  # an unknown version, or a surface that wants more: the SDK path's to answer
                ok = False
            self._versions[version] = ok
        return ok

    # -- handshake-era sessions ---------------------------------------------------

    def handshake_session(self, session_id: str | None) -> Connection | None:
        """The SDK ``Connection`` of the handshake-era session ``session_id`` (``None``: the stdio connection),
        once its ``initialize`` went through the server (see :class:`_SessionCapture`); else ``None``."""
        return self._sessions.get(session_id)

    def forget_session(self, session_id: str | None) -> None:
        self._sessions.pop(session_id, None)

    def _envelope(self, meta: dict[str, Any], version: str) -> _Envelope | None:
        try:
            key = repr(meta)  # JSON values: distinct values, distinct reprs (a reordered copy is just another entry)
        except RecursionError:
            return None
        if key in self._envelopes:
            return self._envelopes[key]
        envelope: _Envelope | None
        try:
            # What the SDK checks on its path: the whole request's params at this
            # version (arguments: any object), the lifted `_meta`, the connection.
            _methods.validate_client_request("tools/call", version, {"name": "x", "arguments": {}, "_meta": meta})
            lifted = types.RequestParams.model_validate({"_meta": meta}, by_name=False).meta
            made = Connection.from_envelope(version, meta.get(CLIENT_INFO_META_KEY), meta[CLIENT_CAPABILITIES_META_KEY])
            envelope = (_Envelope(dict(lifted), made.client_params, made.client_capabilities, made.outbound)
                        if isinstance(lifted, Mapping) else None)
        except Exception:  # any refusal is the SDK path's to phrase
            envelope = None
        if len(self._envelopes) >= _ENVELOPE_CACHE_MAX:
            self._envelopes.clear()
        self._envelopes[key] = envelope
        return envelope

    def _tool_ok(self, name: str) -> bool:
        try:
            tool = self.server.registry.get(name)
        except ToolNotFound:
            return False  # the SDK path phrases the unknown tool
        cached = self._tools.get(name)
        if cached is not None and cached[0] is tool:
            return cached[1]
        support = tool.capability.task_support if tool.capability is not None else "forbidden"
        ok = support == "forbidden" and "x-mcp-header" not in json.dumps(tool.input_schema)
        self._tools[name] = (tool, ok)
        return ok

    # -- execution ---------------------------------------------------------------

    async def run(self, call: Admitted, dctx: Any, *, lifespan_state: Any, request: Any = None,
                  outbound: Any = None, close_sse_stream: Any = None,
                  close_standalone_sse_stream: Any = None) -> dict[str, Any]:
        """The JSON-RPC reply (a dict) for ``call``: the server's middleware around ``_call_tool``, shaped as the SDK's runner does.

        ``dctx``: the request's channel (the SDK's ``DispatchContext`` shape);
        ``outbound``: the connection-scoped channel (``None``: none, as on HTTP).
        """
        self.served += 1
        version = call.protocol_version
        handshake = call.session is not None
        if call.session is not None:
            connection = call.session  # the session's own: it outlives this request (the SDK unwinds it at the end)
        else:
            assert call.envelope is not None
            connection = call.envelope.connection(version, outbound)
        session = ServerSession(dctx, connection, request_meta=call.meta)  # type: ignore[arg-type]
        ctx: ServerRequestContext[Any, Any] = ServerRequestContext(
            session=session, lifespan_context=lifespan_state, protocol_version=version, method="tools/call",
            params=call.params, request_id=call.request_id, meta=call.meta,  # type: ignore[arg-type]
            request=request, close_sse_stream=close_sse_stream, close_standalone_sse_stream=close_standalone_sse_stream,
        )
        try:
            result = await self._chain()(ctx)
            if not isinstance(result, dict):
                raise TypeError(f"handler returned {type(result).__name__}; expected dict")
            return {"jsonrpc": "2.0", "id": call.request_id, "result": dict(result)}
        except Exception as exc:
            data = _handshake_error_data(exc) if handshake else modern_error_data(exc)
            return {"jsonrpc": "2.0", "id": call.request_id, "error": data.model_dump(mode="json", by_alias=True, exclude_none=True)}
        finally:
            if isinstance(dctx, Exchange):
                dctx.closed = True  # as the SDK closes a request's channel when its handler returns
            if not handshake and exit_stack_in_use(connection.exit_stack):  # nothing registered: nothing to unwind
                await aclose_shielded(connection)

    def _chain(self) -> Callable[[Any], Awaitable[Any]]:
        """The server's middleware, outermost first, around :meth:`_inner` (as the SDK's runner composes it).

        The SDK's OpenTelemetry middleware is left out while no tracer provider
        is installed: its span is then a non-recording one that changes nothing
        (admission refuses trace context in ``_meta``); once a provider is set,
        every call gets its span as on the SDK path.
        """
        # Recomposed only when the server's list or the tracing state changed (checked per call: both can).
        key = (tuple(self.server.lowlevel.middleware), OTEL_MIDDLEWARE is not None and _tracing_off())
        if self._chain_key != key or self._composed is None:
            middleware = self._server_middleware()
            if key[1]:
                middleware = tuple(mw for mw in middleware if not isinstance(mw, OTEL_MIDDLEWARE))  # type: ignore[arg-type]
            call: Callable[[Any], Awaitable[Any]] = self._inner
            for mw in reversed(middleware):
                call = partial(_apply, mw, call)
            self._composed = (middleware, call)
            self._chain_key = key
        return self._composed[1]

    def _server_middleware(self) -> tuple[Any, ...]:
        """The server's middleware as the SDK path runs it, less :class:`_SessionCapture` (a no-op for tools/call)."""
        return tuple(mw for mw in self.server.lowlevel.middleware if not isinstance(mw, _SessionCapture))

    async def _inner(self, ctx: Any) -> dict[str, Any]:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        # Admission saw a string name; middleware that replaced it gets the registry's unknown-tool error
        # (Registry.get answers any non-string that way), as on the SDK path.
        name = cast(str, params.get("name"))
        result = await self.server._call_tool(ctx, name, params.get("arguments"))
        return self._serialize(ctx.protocol_version, result)

    def _serialize(self, version: str, result: Any) -> dict[str, Any]:
        """The runner's ``_serialize`` for a ``tools/call`` result (no cache hint: admission checked).

        At a handshake version the sieve keeps a plain result's values and drops
        ``resultType``, and nothing is stamped (tests/servers/test_fast_path.py
        checks the shortcut against the sieve at every handshake version).
        """
        dumped = dict(result)
        if version not in MODERN_PROTOCOL_VERSIONS:
            if _plain_result(dumped):
                del dumped["resultType"]
                return dumped
            try:
                return _methods.serialize_server_result("tools/call", version, dumped)
            except ValidationError:
                log.exception("tools/call handler returned an invalid result")
                raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None
        if not _plain_result(dumped):
            try:
                dumped = _methods.serialize_server_result("tools/call", version, dumped)
            except ValidationError:
                log.exception("tools/call handler returned an invalid result")
                raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")
        if meta is None:
            dumped["_meta"] = {SERVER_INFO_META_KEY: self._server_info()}
        elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
            dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self._server_info()}
        return dumped

    def _server_info(self) -> dict[str, Any]:
        # The SDK hands out a deep copy per response; ours is serialized at once and never mutated.
        if self._stamp is None:
            self._stamp = self.server.lowlevel.server_info_stamp
        return self._stamp


class Exchange:
    """One fast-path request's channel to its client (the SDK's ``DispatchContext`` shape), per transport.

    A back-channel only on a handshake-era session (``back_channel``: its
    SDK dispatcher, which correlates the client's answers; a 2026-07-28
    server sends the client no requests), and only while the handler runs;
    no progress (admission refuses a ``progressToken``, and the SDK drops
    progress without one); a request-scoped notification goes to
    :meth:`deliver`, which each transport implements.
    """

    progress_token = None
    message_metadata = None

    def __init__(self, transport: Any, request_id: Any, back_channel: Any = None) -> None:
        self.transport = transport
        self.request_id = request_id
        self.closed = False
        self._back_channel = back_channel  # handshake era: the session's outbound (the SDK's dispatcher)
        self._cancel_requested: anyio.Event | None = None

    @property
    def can_send_request(self) -> bool:
        return self._back_channel is not None and not self.closed

    @property
    def cancel_requested(self) -> anyio.Event:
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> dict[str, Any]:
        if not self.can_send_request:
            raise NoBackChannelError(method)
        return await self._back_channel.send_raw_request(method, params, opts)  # type: ignore[no-any-return]

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.deliver(message)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return

    async def deliver(self, message: dict[str, Any]) -> None:
        raise NotImplementedError


class _SessionCapture:
    """Server middleware that notes each handshake-era session's SDK ``Connection`` when its ``initialize`` runs.

    Transparent (it only calls on); left out of the fast path's own chain.
    Held weakly: a session the SDK forgot is forgotten here too.
    """

    def __init__(self, calls: FastCalls) -> None:
        self._calls = weakref.ref(calls)

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method == "initialize":
            calls = self._calls()
            connection = connection_of(ctx.session, Connection) if calls is not None else None
            if calls is not None and connection is not None:
                calls._sessions[connection.session_id] = connection
        return await call_next(ctx)


def _handshake_error_data(exc: Exception) -> ErrorData:
    """The SDK's loop dispatcher's mapping of a handler exception (``MCPError``/``ValidationError``, else code 0)."""
    error = handler_exception_to_error_data(exc)
    if error is not None:
        return error
    log.error("tools/call handler raised", exc_info=exc)
    return ErrorData(code=0, message=str(exc))


def _tracing_off() -> bool:
    provider = trace.get_tracer_provider()
    return isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _apply(middleware: Any, call_next: Callable[[Any], Awaitable[Any]], ctx: Any) -> Awaitable[Any]:
    return middleware(ctx, call_next)  # type: ignore[no-any-return]


class EncodedReceipt(dict[str, Any]):
    """A receipt's dict (``Receipt.to_dict()``) carrying its canonical JSON text too (``Receipt.canonical_json()``).

    The execution journal computes that text for the receipt's record and the
    receipt keeps it, so :func:`encode` splices it into the reply instead of
    encoding the dict a second time. Everything else sees a plain dict (the
    SDK path validates and re-dumps it as any other).
    """

    __slots__ = ("text",)

    def __init__(self, data: Mapping[str, Any], text: str) -> None:
        super().__init__(data)
        self.text: str | None = text

    # Middleware may edit the receipt in place (the SDK path would send the edit): then the text no
    # longer says what the dict says, so any in-place change forgets it and :func:`encode` encodes the dict.
    # (Nested ``error``/``policy`` dicts are the receipt's own: replace them, do not mutate them.)
    def _forget(self) -> None:
        self.text = None

    def __setitem__(self, key: str, value: Any) -> None:
        self._forget()
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._forget()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> EncodedReceipt:  # type: ignore[override,misc]
        self._forget()
        return super().__ior__(other)

    def pop(self, *args: Any) -> Any:
        self._forget()
        return super().pop(*args)

    def popitem(self) -> tuple[str, Any]:
        self._forget()
        return super().popitem()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._forget()
        super().update(*args, **kwargs)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._forget()
        return super().setdefault(key, default)

    def clear(self) -> None:
        self._forget()
        super().clear()


_ASCII = json.JSONEncoder(separators=(",", ":"))
_UTF8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: Stands for the receipt while the rest of the reply is encoded (its JSON text is then replaced by the receipt's).
_STAND_IN = "openfunctions-receipt-" + secrets.token_hex(16)
_STAND_IN_JSON = json.dumps(_STAND_IN)


def encode(message: Mapping[str, Any], *, ensure_ascii: bool = True) -> bytes:
    """The reply's bytes, as the SDK writes them (compact JSON; ASCII escapes unless ``ensure_ascii=False``).

    A result whose ``_meta`` receipt is an :class:`EncodedReceipt` gets that
    receipt's text spliced in as is (canonical JSON: sorted keys, non-ASCII
    characters as UTF-8, so ``json.loads`` gives the same value): the reply is
    encoded with a stand-in string there, ordered so that the stand-in is the
    last string of the text (``result`` last in the message, ``_meta`` last in
    the result, the receipt last in ``_meta``), and its last occurrence is
    replaced: whatever a tool returned cannot be taken for it. The bytes decode
    to the same message.
    """
    encoder = _ASCII if ensure_ascii else _UTF8
    result = message.get("result")
    meta = result.get("_meta") if type(result) is dict else None
    receipt = meta.get(RECEIPT_META_KEY) if type(meta) is dict else None
    # The text keeps non-ASCII characters raw (canonical JSON); where the reply must be ASCII (HTTP: a raw
    # U+2028 inside an SSE ``data:`` line splits it for line readers that follow str.splitlines), only an
    # ASCII text is spliced.
    if type(receipt) is EncodedReceipt and receipt.text is not None and (not ensure_ascii or receipt.text.isascii()):
        assert isinstance(result, dict) and isinstance(meta, dict)
        meta = dict(meta)
        del meta[RECEIPT_META_KEY]
        meta[RECEIPT_META_KEY] = _STAND_IN
        result = dict(result)
        del result["_meta"]
        result["_meta"] = meta
        outer = dict(message)
        del outer["result"]
        outer["result"] = result
        text = encoder.encode(outer)
        at = text.rfind(_STAND_IN_JSON)
        try:
            return (text[:at] + receipt.text + text[at + len(_STAND_IN_JSON):]).encode()
        except UnicodeEncodeError:  # a lone surrogate in the receipt (the journal refused it too): the plain
            pass  # encoding below, which escapes it with ensure_ascii and raises as before without (stdio)
    return encoder.encode(message).encode()


__all__ = ["FastCalls", "Admitted", "Exchange", "EncodedReceipt", "FAST_PATH_ENV", "fast_path_enabled", "encode"]
