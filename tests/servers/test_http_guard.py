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


def test_json_depth_is_counted_outside_strings_and_bounded() -> None:
    from openfunctions.servers._http_guard import json_too_deep

    assert not json_too_deep(b"[" * 200 + b"]" * 200, 200)
    assert json_too_deep(b"[" * 201 + b"]" * 201, 200)
    assert json_too_deep(b'{"a":' * 201 + b"1" + b"}" * 201, 200)
    # brackets inside strings (escaped quotes included) do not nest
    assert not json_too_deep(b'["' + b"[" * 5000 + b'"]', 200)
    assert not json_too_deep(b'["\\"' + b"{" * 5000 + b'"]', 200)
    # many brackets side by side are not depth
    assert not json_too_deep(b"[" + b"[]," * 5000 + b"[]]", 200)
    # an unterminated string does not hide the nesting after it
    assert json_too_deep(b'"' + b"[" * 300, 200)


def test_refusal_log_writes_one_line_per_kind_per_interval_with_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from openfunctions.servers import _http_guard

    lines: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def warning(self, event: str, **fields: Any) -> None:
            lines.append((event, fields))

    monkeypatch.setattr(_http_guard, "log", Recorder())
    now = [100.0]
    refused = _http_guard.RefusalLog(interval=5.0, clock=lambda: now[0])
    logged = [refused("invalid_host", host="'evil'") for _ in range(50)]
    assert logged == [True] + [False] * 49
    assert refused("body_timeout")  # another kind has its own interval
    now[0] += 5.0
    assert refused("invalid_host")
    assert [(e, f["reason"], f["unlogged"]) for e, f in lines] == [
        ("request_refused", "invalid_host", 0), ("request_refused", "body_timeout", 0), ("request_refused", "invalid_host", 49)]


@pytest.mark.anyio
async def test_the_mcp_guard_answers_a_body_nested_too_deep_as_stdio_does() -> None:
    reached: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = RequestGuard(app, rules=HostRules.loopback(), health=_health, max_body_bytes=1 << 20)

    async def post(body: bytes) -> tuple[int, bytes]:
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [(b"host", b"127.0.0.1:1")]}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await guard(scope, receive, send)
        return int(sent[0]["status"]), sent[1].get("body", b"")

    status, body = await post(b"[" * 30_000 + b"]" * 30_000)
    assert status == 400 and reached == []
    err = __import__("json").loads(body)["error"]
    assert err["code"] == -32600 and "nested too deeply (more than 200 levels" in err["message"]
    assert (await post(b"[" * 200 + b"]" * 200))[0] == 200 and len(reached) == 1  # at the bound: the app decides


def test_one_loopback_answer_for_every_http_surface():
    # MCP, chat and the viewer pick their default Host rules (and whether a token is needed) by this answer.
    from openfunctions.servers._http_guard import is_loopback_host

    for host in ("localhost", "127.0.0.1", "127.0.0.2", "::1", "[::1]"):
        assert is_loopback_host(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com", "localhost.example.com", ""):
        assert not is_loopback_host(host), host
