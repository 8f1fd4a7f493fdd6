"""servers/_http_guard.py's RequestGuard in process: the Host/Origin verdict, first time and remembered."""

from __future__ import annotations

from typing import Any

import pytest

from openfunctions.servers._http_guard import HostRules, RequestGuard


async def _health() -> dict[str, Any]:
    return {"status": "ok"}


async def _status(guard: RequestGuard, host: bytes, origin: bytes | None = None) -> int:
    headers = [(b"host", host)] + ([(b"origin", origin)] if origin is not None else [])
    scope = {"type": "http", "method": "GET", "path": "/healthz", "headers": headers}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await guard(scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.anyio
async def test_host_and_origin_verdicts_stay_the_same_when_remembered() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("only /healthz is requested")

    guard = RequestGuard(app, rules=HostRules.loopback(), health=_health, max_body_bytes=1000)
    cases = [(b"127.0.0.1:8000", None, 200), (b"127.0.0.1:8000@evil.example", None, 421), (b"evil.example:8000", None, 421),
             (b"localhost:8000", b"http://localhost:8000", 200), (b"localhost:8000", b"http://localhost:9999", 403),
             (b"127.0.0.1:8000", b"https://evil.example", 403), (b"127.0.0.1:8000", b"null", 403),
             # a port forward (ssh -L 9999:..., docker -p 9999:8000): the name is loopback, the port is the client's
             (b"localhost:9999", b"http://localhost:9999", 200), (b"127.0.0.1:9999", b"http://127.0.0.1:8000", 403)]
    for _ in range(3):  # the first pass checks, the later ones may answer from memory: the same answers
        assert [await _status(guard, h, o) for h, o, _ in cases] == [want for _, _, want in cases]
    assert guard._accepted_pairs == {(b"127.0.0.1:8000", None), (b"localhost:8000", b"http://localhost:8000"),
                                     (b"localhost:9999", b"http://localhost:9999")}
    any_port = RequestGuard(app, rules=HostRules.loopback(), health=_health, max_body_bytes=1000)
    for port in range(300):  # bounded: past the cap it starts over
        assert await _status(any_port, f"127.0.0.1:{port}".encode()) == 200
        assert len(any_port._accepted_pairs) <= 256
    assert len(any_port._accepted_pairs) == 300 - 256
