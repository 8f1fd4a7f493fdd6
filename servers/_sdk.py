"""Every private part of the MCP SDK (``mcp``) the servers rely on, in one module.

The SDK has no public hook for a few things a production server needs (a
per-session event store, a per-principal session cap, the session manager's
lifespan state for the direct ``tools/call`` path, ...). Each access to an
underscore name of the SDK lives here, in a function whose docstring names
the SDK attribute and why we need it, so an SDK release that moves one breaks
one place, and tests/servers/test_sdk_contract.py names it first: it checks
each attribute and function below still exists with the shape we use.
pyproject.toml pins ``mcp`` to the minor range this was checked with
(:data:`SDK_TESTED`).

What happens when a part is missing, per part (nothing here raises an
``ImportError`` or ``AttributeError`` at startup):

- session admission (``wrap_session_admission``): :class:`SdkContractError`
  (``sdk_contract_broken``) naming the attribute, when the HTTP server is
  built: a session cap we cannot enforce must not be silently dropped;
- per-session event store: the same, for ``--resumable``;
- the manager's lifespan state / task group: the direct ``tools/call`` path
  turns itself off (one error log) and calls take the SDK's path;
- ``ServerSession._connection``: one error log; handshake-era clients get no
  ``list_changed`` notifications, and their ``tools/call`` takes the SDK path;
- the manager's session table (``_server_instances``, ``_session_owners``) or
  a session transport's internals (event store, priming event, request
  streams, idle timer, write stream): handshake-era HTTP calls take the SDK path;
- the connection's exit stack: every fast-path call unwinds it (correct, a
  little slower);
- the OpenTelemetry middleware type: the fast path keeps that middleware in
  its chain (correct, a little slower);
- ``create_initialization_options``: a public method, patched per server
  instance; if its signature changes, :class:`SdkContractError` at startup.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import structlog

from .errors import ServerError

log = structlog.get_logger("openfunctions.servers.sdk")

#: The ``mcp`` minor release these accesses were checked against (pyproject pins ``mcp>=2.3,<2.4``).
SDK_TESTED = "2.3"


class SdkContractError(ServerError):
    """The installed MCP SDK lacks a private part the server relies on (see ``servers/_sdk.py``)."""

    code = "sdk_contract_broken"


def _broken(what: str, consequence: str) -> SdkContractError:
    return SdkContractError(
        f"the installed mcp SDK has no {what}, which this server needs ({consequence}); "
        f"openfunctions-mcp was tested with mcp {SDK_TESTED}.x: install that, or update servers/_sdk.py",
        details={"sdk_attribute": what, "sdk_tested": SDK_TESTED},
    )


# -- streamable HTTP: the session manager ---------------------------------------------------------------------


def wrap_session_admission(
    manager: Any,
    admit: Callable[[Callable[..., Any]], Callable[..., Any]],
    discard: Callable[[Callable[..., Awaitable[None]]], Callable[..., Awaitable[None]]],
) -> None:
    """Wrap ``StreamableHTTPSessionManager._admit_session`` and ``._discard_session`` on ``manager``.

    ``admit(original)`` and ``discard(original)`` return the replacements.
    Why: the SDK admits a new session (``_admit_session(requestor)``: the
    transport, or ``None`` for its 503) and forgets one
    (``async _discard_session(session_id, transport)``) under its own lock and
    offers no hook; the per-principal session cap and the per-session event
    store must act at exactly those two points, or concurrent ``initialize``
    requests could overshoot the cap. Raises :class:`SdkContractError` if
    either is missing.
    """
    original_admit = getattr(manager, "_admit_session", None)
    original_discard = getattr(manager, "_discard_session", None)
    if not callable(original_admit):
        raise _broken("StreamableHTTPSessionManager._admit_session", "per-principal session limits, per-session event stores")
    if not callable(original_discard):
        raise _broken("StreamableHTTPSessionManager._discard_session", "per-principal session limits")
    manager._admit_session = admit(original_admit)
    manager._discard_session = discard(original_discard)


def manager_internals_present(manager: Any) -> bool:
    """Whether ``manager`` has ``_lifespan_state`` and ``_task_group`` (see :func:`manager_task_group`)."""
    return hasattr(manager, "_lifespan_state") and hasattr(manager, "_task_group")


def manager_task_group(manager: Any) -> Any:
    """``StreamableHTTPSessionManager._task_group``: ``None`` until ``run()`` entered (and after it left).

    Why: the direct ``tools/call`` path answers a request without the SDK's
    app, but only while the manager runs (the SDK answers "not running"
    otherwise); the task group is the only sign of that. ``None`` when absent.
    """
    return getattr(manager, "_task_group", None)


def manager_lifespan_state(manager: Any) -> Any:
    """``StreamableHTTPSessionManager._lifespan_state``: what the server's lifespan yielded.

    Why: the SDK hands it to every request's handler context; the direct
    ``tools/call`` path must hand the same object. ``None`` when absent.
    """
    return getattr(manager, "_lifespan_state", None)


def set_session_event_store(transport: Any, store: Any) -> None:
    """Replace ``StreamableHTTPServerTransport._event_store`` on one session's transport.

    Why: the SDK hands one event store to every session but names its streams
    after JSON-RPC request ids, which every session reuses, so a shared store
    would replay one session's messages to another; each session gets its own
    view, set right after admission (before the transport handles a message).
    Raises :class:`SdkContractError` if the transport has no such attribute
    (setting it would change nothing).
    """
    if not hasattr(transport, "_event_store"):
        raise _broken("StreamableHTTPServerTransport._event_store", "resumable sessions (--resumable)")
    transport._event_store = store


# -- streamable HTTP: a handshake-era session's transport (the direct tools/call path) -----------------------


def session_transport(manager: Any, session_id: str, requestor: Any) -> Any:
    """``manager._server_instances[session_id]``, if ``requestor`` owns it (``manager._session_owners``); else ``None``.

    Why: the direct ``tools/call`` path answers a handshake-era session's call
    itself and needs that session's transport (its event store, idle timer,
    request streams); the SDK keeps the session table privately and answers a
    request from another credential as if the session did not exist, which the
    fast path leaves to it. ``None`` when absent (the SDK path then answers).
    """
    instances = getattr(manager, "_server_instances", None)
    owners = getattr(manager, "_session_owners", None)
    if not isinstance(instances, dict) or not isinstance(owners, dict):
        return None
    transport = instances.get(session_id)
    if transport is None or owners.get(session_id) != requestor:
        return None
    return transport


def session_transport_parts(transport: Any) -> bool:
    """Whether ``transport`` has every private part the fast path uses on it (see the functions below)."""
    return all(hasattr(transport, name) for name in (
        "_event_store", "_mint_priming_event", "_request_streams", "_idle_timeout", "_requests_in_flight", "idle_scope",
        "_write_stream"))


def transport_event_store(transport: Any) -> Any:
    """``StreamableHTTPServerTransport._event_store``: where the SDK stores each SSE event of the session (or ``None``)."""
    return transport._event_store


async def transport_priming_event(transport: Any, stream_id: str, protocol_version: str) -> dict[str, Any] | None:
    """``StreamableHTTPServerTransport._mint_priming_event``: the stored priming event a POST's SSE stream opens with."""
    return await transport._mint_priming_event(stream_id, protocol_version)  # type: ignore[no-any-return]


def transport_request_started(transport: Any) -> bool:
    """What ``StreamableHTTPServerTransport.handle_request`` does before serving a request: hold the idle timer.

    ``False`` when the idle period already ran out (the SDK then answers the
    request as for a terminated session: the fast path leaves it to it).
    """
    if transport.idle_scope is None or transport._idle_timeout is None:
        return True
    if transport.idle_scope.cancel_called:
        return False
    transport._requests_in_flight += 1
    transport.idle_scope.deadline = float("inf")
    return True


def transport_request_finished(transport: Any, now: float) -> None:
    """...and after it: the idle countdown restarts when the last request in flight is done."""
    if transport.idle_scope is None or transport._idle_timeout is None:
        return
    transport._requests_in_flight -= 1
    if not transport._requests_in_flight:
        transport.idle_scope.deadline = now + transport._idle_timeout


def transport_route(transport: Any, request_id: str, streams: Any) -> None:
    """Register ``streams`` as ``StreamableHTTPServerTransport._request_streams[request_id]``.

    Why: the session's messages that the SDK's dispatcher sends for a request
    (a tool's sampling or elicitation request) reach that request's SSE
    stream through this table; a fast-path call registers its own stream
    there while such a request is out.
    """
    transport._request_streams[request_id] = streams


def transport_unroute(transport: Any, request_id: str, streams: Any) -> None:
    if transport._request_streams.get(request_id) is streams:
        del transport._request_streams[request_id]


async def transport_send(transport: Any, message: Any, related_request_id: Any) -> None:
    """Hand ``message`` to the session transport's router (``StreamableHTTPServerTransport._write_stream``).

    Why: once a fast-path call's own SSE stream is gone (closed by the tool,
    or the client went away), its later messages must reach the session as
    the SDK path's would: stored, and delivered to a stream the client
    resumed with ``Last-Event-ID``; the router does exactly that.
    """
    from mcp.shared.message import ServerMessageMetadata, SessionMessage

    metadata = ServerMessageMetadata(related_request_id=related_request_id)
    await transport._write_stream.send(SessionMessage(message, metadata=metadata))


async def send_related_request(dispatcher: Any, method: str, params: Any, opts: Any, related_request_id: Any) -> Any:
    """``JSONRPCDispatcher.send_raw_request(..., _related_request_id=...)``: a server-to-client request on a request's stream.

    Why: on streamable HTTP the SDK routes a request-scoped server request onto
    the originating POST's SSE stream by this keyword, which only its own
    per-request context passes.
    """
    return await dispatcher.send_raw_request(method, params, opts, _related_request_id=related_request_id)


# -- the low-level server and its sessions --------------------------------------------------------------------


def announce_list_changes(lowlevel: Any, default: Any) -> None:
    """Make ``lowlevel.create_initialization_options()`` default to ``default`` notification options.

    ``create_initialization_options`` is public, but the SDK's runner calls it
    with no arguments for every handshake, so the only way to advertise
    ``tools``/``prompts`` ``listChanged`` (the server's tools and prompts can
    change while it serves) is to wrap it on this server instance. Its first
    parameter must be ``notification_options``; :class:`SdkContractError` if not.
    """
    original = lowlevel.create_initialization_options
    params = list(inspect.signature(original).parameters)
    if not params or params[0] != "notification_options":
        raise _broken("Server.create_initialization_options(notification_options, ...)", "tools/prompts list_changed")

    def initialization_options(notification_options: Any = None, *a: Any, **kw: Any) -> Any:
        return original(notification_options or default, *a, **kw)

    lowlevel.create_initialization_options = initialization_options


_CONNECTION_WARNED: list[bool] = []


def connection_of(session: Any, connection_type: type) -> Any:
    """``ServerSession._connection``: the per-client ``Connection`` a request's session wraps.

    Why: the SDK builds a session per request and has no public accessor for
    its connection on the low-level API (``Context.connection`` exists only on
    ``MCPServer``'s context); the server remembers handshake-era connections
    to send them ``list_changed`` notifications. If it is missing (or not a
    ``connection_type``), one error log and ``None``.
    """
    connection = getattr(session, "_connection", None)
    if isinstance(connection, connection_type):
        return connection
    if not _CONNECTION_WARNED:
        _CONNECTION_WARNED.append(True)
        log.error("sdk_connection_unavailable", session_type=type(session).__name__,
                  consequence="handshake-era clients get no tools/prompts list_changed notifications",
                  hint="mcp.server.session.ServerSession no longer has _connection; update servers/_sdk.py")
    return None


def exit_stack_in_use(stack: AsyncExitStack) -> bool:
    """Whether anything was pushed onto ``stack`` (``AsyncExitStack._exit_callbacks``, CPython-private).

    Why: the fast path builds an SDK ``Connection`` per call; unwinding its
    empty ``exit_stack`` (shielded, as the SDK does) costs a cancel scope per
    call for nothing. When the attribute is missing this answers ``True``
    (always unwind: correct, a little slower).
    """
    return bool(getattr(stack, "_exit_callbacks", True))


# -- OpenTelemetry ----------------------------------------------------------------------------------------------


def _load_otel_middleware() -> type | None:
    try:
        module = importlib.import_module("mcp.server._otel")
        found = module.OpenTelemetryMiddleware
    except (ImportError, AttributeError) as exc:
        log.warning("sdk_otel_middleware_unavailable", error=str(exc),
                    consequence="the direct tools/call path keeps the SDK's tracing middleware in every call's chain",
                    hint="mcp.server._otel.OpenTelemetryMiddleware moved; update servers/_sdk.py")
        return None
    return found if isinstance(found, type) else None


#: ``mcp.server._otel.OpenTelemetryMiddleware`` (``None`` if the SDK moved it). Why: while no tracer provider
#: is installed the fast path leaves that middleware out of its chain (its span would record nothing).
OTEL_MIDDLEWARE: type | None = _load_otel_middleware()


__all__ = [
    "SDK_TESTED", "SdkContractError", "wrap_session_admission", "manager_internals_present", "manager_task_group",
    "manager_lifespan_state", "set_session_event_store", "announce_list_changes", "connection_of",
    "exit_stack_in_use", "OTEL_MIDDLEWARE",
]
