"""Bearer-token check for any ASGI app this project serves (the MCP HTTP server, the chat server).

It lives in core, not in servers, so that a layer below servers (chat) can guard its own HTTP app
with the same check without importing upward (DESIGN.md, dependency direction). Plain ASGI: no
framework import.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Any

#: ASGI scope key under which an authenticated request carries its principal.
PRINCIPAL_SCOPE_KEY = "openfunctions.principal"

_UNAUTHORIZED = b'{"error":"invalid_token","error_description":"missing or invalid bearer token"}'


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


__all__ = ["PRINCIPAL_SCOPE_KEY", "BearerAuth"]
