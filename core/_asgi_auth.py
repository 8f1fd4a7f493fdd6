"""Bearer tokens for any ASGI app this project serves (the MCP HTTP server, the chat server):
reading the token (``read_auth_token``) and checking it on every request (``BearerAuth``).

It lives in core, not in servers, so that a layer below servers (chat) can guard its own HTTP app
with the same check without importing upward (DESIGN.md, dependency direction). Plain ASGI: no
framework import.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from .errors import ConfigurationError

log = structlog.get_logger("openfunctions.auth")

#: ASGI scope key under which an authenticated request carries its principal.
PRINCIPAL_SCOPE_KEY = "openfunctions.principal"

_UNAUTHORIZED = b'{"error":"invalid_token","error_description":"missing or invalid bearer token"}'


class AuthConfigError(ConfigurationError):
    """The HTTP bearer token could not be read (missing env var, unreadable/empty file)."""

    code = "auth_config_invalid"


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
            await send({
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer error="invalid_token"'),
                    (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                ],
            })
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
            return
        scope[PRINCIPAL_SCOPE_KEY] = self._principal
        await self.app(scope, receive, send)


__all__ = ["PRINCIPAL_SCOPE_KEY", "AuthConfigError", "BearerAuth", "read_auth_token"]
