"""Streamable HTTP: the SDK's session manager in a Starlette app, served by uvicorn.

Defaults are the safe ones: bind ``127.0.0.1``; Host/Origin checked against
DNS rebinding, by exact ``host[:port]`` matching (on a loopback bind:
loopback names on any port, since a tunnel or port forward changes the port,
not the name, and an ``Origin`` only on the port that ``Host`` names;
``allowed_hosts`` replaces that); request bodies over
``max_body_bytes`` (4 MiB) refused with 413; a request carrying both
``Content-Length`` and ``Transfer-Encoding`` refused with 400 and its
connection closed; a request whose ``id`` is not a string or an integer
answered ``-32600``. Operating limits, each with a safe default (see
``_http_guard`` and docs/SERVERS.md "Operating limits"): sessions in all and
per principal, session idle timeout, connections, request-head, body and
keep-alive timeouts. ``GET /healthz`` answers 200, or 503 while the
execution journal is failed.

Optional bearer-token auth: every request must carry
``Authorization: Bearer <token>`` (compared in constant time), else 401 with
``WWW-Authenticate: Bearer``. The token is never logged. An authenticated
request's principal is the server's configured principal, or ``"bearer"``.

``stateless=True`` keeps no session between requests, so replicas behind a
load balancer can serve any request.

Stateful HTTP makes SSE streams resumable (SEP-1699): every event gets an id
and is kept in a bounded in-memory :class:`MemoryEventStore`, each stream
starts with a priming event carrying ``retry`` (``retry_interval`` ms), and a
client whose connection dropped reconnects with ``GET`` + ``Last-Event-ID``
to receive what it missed. Memory only: a stream survives a dropped
connection, not a server restart. ``event_store=False`` turns it off.

Shutdown (SIGTERM/SIGINT): stop admitting calls, let running calls finish
within the server's ``close_timeout``, cancel those still running (each is
answered, ``isError`` with its ``cancelled`` receipt in ``_meta``, as
journaled), then stop uvicorn (open SSE streams
get ``shutdown_grace`` seconds), then close the journal. A second signal
during that forces it: running calls are cancelled, uvicorn stops without
waiting, the journal is closed, and :func:`serve_http` raises
:class:`~openfunctions.servers.errors.ShutdownForced`.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import anyio
import structlog
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from openfunctions.core import BearerAuth, ConfigurationError, read_auth_token

from ._constants import JOURNAL_SYNC_MODES
from ._event_loop import resolve_http_parser
from ._event_store import MemoryEventStore
from ._fast import FastCalls, fast_path_enabled
from ._fast_http import FastToolCalls
from ._http_guard import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    HEALTH_PATH,
    HostRules,
    RequestGuard,
    SessionLimits,
    clamp_connections,
    guarded_protocol,
    is_loopback_host,
    quiet_accept_errors,
)
from ._journaling import ServedJournal
from ._sdk import set_session_event_store
from ._server import OpenFunctionsServer
from ._signals import ShutdownWatch

log = structlog.get_logger("openfunctions.servers.http")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_SSE_RETRY_MS = 1000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PATH = "/mcp"


def _host_rules(host: str, port: int | None, allowed_hosts: list[str] | None, allowed_origins: list[str] | None) -> HostRules | None:
    if allowed_hosts:
        return HostRules.build(list(allowed_hosts), list(allowed_origins or []))
    if is_loopback_host(host):
        return HostRules.loopback()
    log.warning(
        "dns_rebinding_protection_off",
        host=host,
        hint="binding a non-loopback address without --allowed-host: Host/Origin headers are not checked",
    )
    return None


async def _health(server: OpenFunctionsServer) -> dict[str, Any]:
    """``GET /healthz``: 200 ``{"status": "ok"}``, or 503 naming what is failing (a failed journal)."""
    journal = server.journal
    check = getattr(journal, "health", None)
    if check is None:
        return {"status": "ok"}
    report = await check()
    return {"status": "ok" if report.get("status") == "ok" else "failing", "journal": report}


def create_http_app(
    server: OpenFunctionsServer,
    *,
    path: str = DEFAULT_PATH,
    host: str = DEFAULT_HOST,
    stateless: bool = False,
    json_response: bool = False,
    auth_token: str | None = None,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    event_store: MemoryEventStore | bool = True,
    retry_interval: int | None = DEFAULT_SSE_RETRY_MS,
    port: int | None = None,
    max_sessions: int | None = DEFAULT_MAX_SESSIONS,
    max_sessions_per_principal: int | None = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    fast_path: bool | None = None,
) -> Any:
    """The ASGI app serving ``server`` at ``path`` (its lifespan runs the session manager).

    ``event_store``: ``True`` (default) makes stateful SSE streams resumable
    with a fresh :class:`MemoryEventStore`; pass your own to change its
    bounds, or ``False`` for none. Ignored with ``stateless=True`` (no session
    to resume). ``retry_interval``: the reconnection delay in milliseconds
    sent in each stream's priming event (``None``: leave it to the client).

    ``port``: unused by the Host/Origin check (a loopback bind accepts
    loopback names on any port: port forwarding changes the port); kept for
    callers that pass it.
    ``max_sessions`` (all callers), ``max_sessions_per_principal`` (one
    authenticated principal, or one client address without auth) and
    ``session_idle_timeout`` (seconds without a request in flight) bound the
    stateful sessions; ``None`` lifts a bound. ``body_timeout``: seconds a
    POST body may take to arrive; ``max_json_depth``: the deepest nesting a
    body may have (deeper: 400, -32700, before anything parses it). ``GET /healthz`` answers 200, or 503 while
    the execution journal is failed.

    ``fast_path``: answer plain 2026-07-28 ``tools/call`` requests directly,
    bypassing the SDK's transport layers (``_fast_http``; same chain, same
    replies); ``None`` reads ``OPENFUNCTIONS_FAST_PATH`` (default on).
    """
    if retry_interval is not None and retry_interval < 0:
        raise ValueError(f"retry_interval must be >= 0 milliseconds, got {retry_interval}")
    store = None if stateless or event_store is False else (MemoryEventStore() if event_store is True else event_store)
    app: Any = server.lowlevel.streamable_http_app(
        streamable_http_path=path,
        stateless_http=stateless,
        json_response=json_response,
        host=host,
        # Host/Origin are checked by RequestGuard (exact matching); the SDK
        # still checks POST Content-Type with protection off.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=max_body_bytes,
        max_sessions=max_sessions,
        session_idle_timeout=session_idle_timeout,
        # The SDK wants a store to switch resumability on; each session then
        # gets its own view of it (see _scope_event_store_per_session).
        event_store=store.for_session("") if store is not None else None,
        retry_interval=retry_interval if store is not None else None,
    )
    if fast_path_enabled() if fast_path is None else fast_path:
        app = FastToolCalls(app, FastCalls.of(server), path=path, json_response=json_response,
                            manager=server.lowlevel.session_manager)
    limits = SessionLimits(max_sessions_per_principal)
    if not stateless:
        on_admit = _event_store_scoper(store) if store is not None else None
        limits.install(server.lowlevel.session_manager, on_admit)
        app = limits.middleware(app)
    if auth_token:
        app = BearerAuth(app, auth_token, server.principal or "bearer")
    return RequestGuard(
        app,
        rules=_host_rules(host, port, allowed_hosts, allowed_origins),
        health=partial(_health, server),
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        max_json_depth=max_json_depth,
    )


def _event_store_scoper(store: MemoryEventStore) -> Callable[[Any], None]:
    """Give each new session's transport its own view of ``store``; drop its events when it goes.

    The SDK hands one store to every session, but names streams after
    JSON-RPC request ids that every session reuses; a flat store would replay
    one session's messages to another. The SDK has no per-session hook, so
    this runs on its session admission (private API, wrapped by
    :class:`SessionLimits` through ``_sdk``; tests/servers/test_http_resume.py and test_sdk_contract.py).
    """

    def scope(transport: Any) -> None:
        session_id = transport.mcp_session_id
        set_session_event_store(transport, store.for_session(session_id))
        weakref.finalize(transport, store.drop_session, session_id)

    return scope


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: :func:`serve_http` drains first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(
    server: OpenFunctionsServer,
    *,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    log_level: str = "warning",
    shutdown_grace: float = 2.0,
    handle_signals: bool = True,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive_timeout: int = DEFAULT_KEEP_ALIVE_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    http_parser: str = "auto",
    journal_sync: str = "loop",
    **app_options: Any,
) -> None:
    """Serve ``server`` over streamable HTTP until SIGTERM/SIGINT; then drain, stop, close.

    A second SIGTERM/SIGINT while draining cancels the running calls, stops at
    once and raises :class:`~openfunctions.servers.errors.ShutdownForced`.

    ``app_options`` are :func:`create_http_app`'s keyword arguments (``path``,
    ``stateless``, ``auth_token``, ``event_store``, ...), passed on as given:
    that function alone names and checks them. ``host`` is both the bind
    address and what the app's Host-header check is based on.

    Connection limits (below the app): ``header_timeout`` seconds for a
    connection to deliver a complete request head (from connecting or from
    its previous response); ``keep_alive_timeout`` seconds an idle
    keep-alive connection stays open; ``max_connections`` open connections
    at most (a connection past it gets 503 and is closed; lowered to fit the
    open-file limit).

    ``http_parser``: ``httptools`` (llhttp, C), ``h11`` (pure Python) or
    ``auto`` (httptools when installed); both carry the same guards.

    ``journal_sync``: how a file execution journal makes records durable.
    ``loop`` (default): the event loop writes and syncs, once per loop
    iteration, everything that iteration appended (no writer thread; the loop
    waits for each fsync). ``thread``: the journal's writer thread does, and
    the loop goes on meanwhile; better where an fsync is slow (a network file
    system). Measured in docs/PERFORMANCE.md ("HTTP load").
    """
    if journal_sync not in JOURNAL_SYNC_MODES:
        raise ConfigurationError(f"journal_sync must be one of {', '.join(JOURNAL_SYNC_MODES)}, not {journal_sync!r}")
    parser = resolve_http_parser(http_parser)
    app = create_http_app(server, host=host, port=port, **app_options)
    protocol = guarded_protocol(parser, max_connections=clamp_connections(max_connections), header_timeout=header_timeout)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        timeout_keep_alive=keep_alive_timeout,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # uvicorn annotates int but hands it to asyncio.timeout(), which takes any float of seconds
        timeout_graceful_shutdown=shutdown_grace,  # type: ignore[arg-type]
        log_config=None,
    )
    uv = _Uvicorn(config)

    watch = ShutdownWatch(server)

    quiet_accept_errors(asyncio.get_running_loop())
    async with server:
        if isinstance(server.journal, ServedJournal):
            server.journal.sync_on_loop(journal_sync == "loop")
        async with anyio.create_task_group() as tg:

            async def drain_then_stop() -> None:
                if not await server.drain():
                    log.warning("shutdown_timeout", in_flight=server.in_flight)
                    # Cancel them while uvicorn still serves: each gets its cancelled
                    # reply (receipt in _meta, as journaled) before the connections close.
                    await server.cancel_in_flight()
                uv.should_exit = True

            def force() -> None:
                # uvicorn's force_exit skips waiting for open connections and tasks.
                server.cancel_running()
                uv.should_exit = uv.force_exit = True

            if handle_signals:
                tg.start_soon(partial(watch.run, graceful=partial(tg.start_soon, drain_then_stop), force=force))
            log.info(
                "listening",
                url=f"http://{host}:{port}{app_options.get('path', DEFAULT_PATH)}",
                stateless=app_options.get("stateless", False),
                http_parser=parser,
                auth=bool(app_options.get("auth_token")),
            )
            await uv.serve()
            tg.cancel_scope.cancel()
    watch.raise_if_forced()


__all__ = [
    "create_http_app",
    "serve_http",
    "read_auth_token",
    "BearerAuth",
    "MemoryEventStore",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_SSE_RETRY_MS",
    "HEALTH_PATH",
]
