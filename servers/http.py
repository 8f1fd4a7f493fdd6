"""Streamable HTTP: the SDK's session manager in a Starlette app, served by uvicorn.

Defaults are the safe ones: bind ``127.0.0.1``; Host/Origin checked against
DNS rebinding (loopback names only, unless ``allowed_hosts`` widens it);
request bodies over ``max_body_bytes`` (4 MiB) refused with 413.

Optional bearer-token auth: every request must carry
``Authorization: Bearer <token>`` (compared in constant time), else 401 with
``WWW-Authenticate: Bearer``. The token is never logged. An authenticated
request's principal is the server's configured principal, or ``"bearer"``.

``stateless=True`` keeps no session between requests, so replicas behind a
load balancer can serve any request.

Shutdown (SIGTERM/SIGINT): stop admitting calls, let running calls finish
within the server's ``close_timeout``, then stop uvicorn (open SSE streams
get ``shutdown_grace`` seconds), then close the journal.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import signal
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import structlog
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from ._constants import PRINCIPAL_SCOPE_KEY
from .errors import AuthConfigError
from .server import OpenFunctionsServer

log = structlog.get_logger("openfunctions.servers.http")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def read_auth_token(*, env: str | None = None, file: str | Path | None = None) -> str | None:
    """The bearer token from an environment variable or a file (first line, stripped)."""
    if env and file:
        raise AuthConfigError("give the auth token through --auth-token-env or --auth-token-file, not both")
    if env:
        token = os.environ.get(env, "")
        if not token.strip():
            raise AuthConfigError(f"--auth-token-env {env}: the environment variable is unset or empty")
        return token.strip()
    if file:
        p = Path(file)
        try:
            mode = p.stat().st_mode
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise AuthConfigError(f"--auth-token-file {p}: cannot read it ({exc.strerror})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("auth_token_file_permissions", path=str(p), hint="chmod 600: other users can read the token")
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise AuthConfigError(f"--auth-token-file {p}: the file is empty")
        return token
    return None


class BearerAuth:
    """ASGI middleware: require ``Authorization: Bearer <token>`` on every HTTP request."""

    def __init__(self, app: Any, token: str, principal: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")
        self._principal = principal

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = b""
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                scheme, _, value = v.partition(b" ")
                if scheme.lower() == b"bearer":
                    supplied = value.strip()
                break
        # compare_digest over equal-length inputs is constant time; hash first
        # so the comparison does not leak the token's length either.
        ok = hmac.compare_digest(hashlib.sha256(supplied).digest(), hashlib.sha256(self._token).digest()) and bool(supplied)
        if not ok:
            body = b'{"error":"invalid_token","error_description":"missing or invalid bearer token"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer error="invalid_token"'),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[PRINCIPAL_SCOPE_KEY] = self._principal
        await self.app(scope, receive, send)


def _security(host: str, allowed_hosts: list[str] | None, allowed_origins: list[str] | None) -> TransportSecuritySettings | None:
    if allowed_hosts:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(allowed_hosts),
            allowed_origins=list(allowed_origins or []),
        )
    if host in LOOPBACK:
        return None  # the SDK's loopback defaults: 127.0.0.1:*, localhost:*, [::1]:*
    log.warning(
        "dns_rebinding_protection_off",
        host=host,
        hint="binding a non-loopback address without --allowed-host: Host/Origin headers are not checked",
    )
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def create_http_app(
    server: OpenFunctionsServer,
    *,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    stateless: bool = False,
    json_response: bool = False,
    auth_token: str | None = None,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Any:
    """The ASGI app serving ``server`` at ``path`` (its lifespan runs the session manager)."""
    app: Any = server.lowlevel.streamable_http_app(
        streamable_http_path=path,
        stateless_http=stateless,
        json_response=json_response,
        host=host,
        transport_security=_security(host, allowed_hosts, allowed_origins),
        max_request_body_size=max_body_bytes,
    )
    if auth_token:
        app = BearerAuth(app, auth_token, server.principal or "bearer")
    return app


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers: :func:`serve_http` drains first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(
    server: OpenFunctionsServer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    stateless: bool = False,
    json_response: bool = False,
    auth_token: str | None = None,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "warning",
    shutdown_grace: float = 2.0,
    handle_signals: bool = True,
) -> None:
    """Serve ``server`` over streamable HTTP until SIGTERM/SIGINT; then drain, stop, close."""
    app = create_http_app(
        server,
        path=path,
        host=host,
        stateless=stateless,
        json_response=json_response,
        auth_token=auth_token,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        max_body_bytes=max_body_bytes,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=shutdown_grace,
        log_config=None,
    )
    uv = _Uvicorn(config)

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("shutdown_signal", signal=signal.Signals(signum).name, in_flight=server.in_flight)
                if not await server.drain():
                    log.warning("shutdown_timeout", in_flight=server.in_flight)
                uv.should_exit = True
                return

    async with server:
        async with anyio.create_task_group() as tg:
            if handle_signals:
                tg.start_soon(on_signal)
            log.info("listening", url=f"http://{host}:{port}{path}", stateless=stateless, auth=bool(auth_token))
            await uv.serve()
            tg.cancel_scope.cancel()


__all__ = ["create_http_app", "serve_http", "read_auth_token", "BearerAuth", "DEFAULT_MAX_BODY_BYTES"]
