"""The direct ``tools/call`` path over HTTP answers exactly as the SDK path does (servers/_fast_http.py).

Two servers over the same tools, in process behind real uvicorn on 127.0.0.1:
one with the fast path, one without (``fast_path=False``: every request takes
the SDK's streamable-HTTP machinery). The same requests — good ones and bad
ones — go to both; the replies (status, content type, JSON body, with the
receipt's per-call fields masked) must be equal, and the fast server's
counter shows which requests it answered itself (so the comparison is not
vacuous).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import methods as _methods

from openfunctions.core import ToolRegistry, canonical_json, define_tool
from openfunctions.servers import RECEIPT_META_KEY, create_http_app, create_mcp_server
from openfunctions.servers._fast import FastCalls, _plain_result
from openfunctions.servers._fast_http import FastToolCalls
from openfunctions.servers._http_guard import guarded_protocol

from .._net import free_port

HERE = Path(__file__).resolve().parent
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
VOLATILE = ("receipt_id", "started_at", "finished_at", "duration_ms")


async def _notify_then_answer(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    import mcp_types as types

    request = ctx.request
    # A request-scoped notification: on the 2026-07-28 wire it travels on this request's response stream.
    await request.session.send_notification(types.ToolListChangedNotification(), related_request_id=request.request_id)
    return {"notified": True}


def _tools() -> list[Any]:
    sys.path.insert(0, str(HERE))
    try:
        from fixture_tools import factory
    finally:
        sys.path.pop(0)
    return [*factory(), define_tool(name="notifies", description="Sends a notification, then answers.",
                                    handler=_notify_then_answer)]


@asynccontextmanager
async def two_servers(tmp_path: Path, *, http: Any = "auto", tools: Any = None,
                      **app_options: Any) -> AsyncIterator[tuple[str, str, FastCalls]]:
    """(fast url, SDK-path url, the fast server's FastCalls), each server journaled in its own dir.

    ``http``: uvicorn's protocol (default: uvicorn's own ``auto``, as when the app is mounted under another server;
    ``serve`` runs it on :func:`~openfunctions.servers._http_guard.guarded_protocol`'s).
    """
    import uvicorn

    make = tools or _tools
    fast = create_mcp_server(ToolRegistry(make()), name="t", version="0", journal_dir=tmp_path / "fast")
    slow = create_mcp_server(ToolRegistry(make()), name="t", version="0", journal_dir=tmp_path / "sdk")
    servers, urls = [], []
    async with fast, slow, anyio.create_task_group() as tg:
        for server, on in ((fast, True), (slow, False)):
            port = free_port()
            app = create_http_app(server, port=port, fast_path=on, **app_options)
            uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", http=http))
            tg.start_soon(uv.serve)
            servers.append(uv)
            urls.append(f"http://127.0.0.1:{port}/mcp")
        with anyio.fail_after(30):
            while not all(uv.started for uv in servers):
                await anyio.sleep(0.01)
        try:
            yield urls[0], urls[1], FastCalls.of(fast)
        finally:
            for uv in servers:
                uv.should_exit = True


def _headers(name: str | None = "add", **extra: str) -> dict[str, str]:
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
         "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
    if name is not None:
        h["Mcp-Name"] = name
    h.update(extra)
    return {k: v for k, v in h.items() if v != ""}


def _call(name: str, arguments: Any = None, *, meta: dict[str, Any] | None = None, rid: Any = 7, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": META if meta is None else meta}
    if arguments is not None:
        params["arguments"] = arguments
    params.update(extra)
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("*" if k in VOLATILE else _mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


def _reply(resp: httpx.Response) -> tuple[int, str, Any]:
    ctype = resp.headers.get("content-type", "")
    if ctype.startswith("text/event-stream"):
        events = [json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return resp.status_code, "sse", _mask(events)
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text
    return resp.status_code, ctype.split(";")[0], _mask(body)


# (label, body, headers, taken by the fast path?)
CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    ("a good call", _call("add", {"a": 2, "b": 3}), _headers(), True),
    ("a string id", _call("add", {"a": 1, "b": 1}, rid="abc"), _headers(), True),
    ("arguments failing the schema (isError at 2026-07-28)", _call("add", {"a": "x"}), _headers(), True),
    ("arguments absent", _call("add"), _headers(), True),
    ("a tool that fails", _call("fail", {}), _headers("fail"), True),
    ("a tool that crashes", _call("crash", {}), _headers("crash"), True),
    ("a tool that notifies (the reply commits to SSE)", _call("notifies", {}), _headers("notifies"), True),
    ("an unknown tool", _call("nope", {}), _headers("nope"), False),
    ("Mcp-Name disagreeing with the body", _call("add", {"a": 1, "b": 2}), _headers("fail"), False),
    ("no Mcp-Name", _call("add", {"a": 1, "b": 2}), _headers(None), False),
    ("Mcp-Method disagreeing", _call("add", {"a": 1, "b": 2}), _headers(**{"Mcp-Method": "tools/list"}), False),
    ("header version differs from the envelope", _call("add", {"a": 1, "b": 2}),
     _headers(**{"MCP-Protocol-Version": "2025-11-25"}), False),
    ("envelope without capabilities", _call("add", {"a": 1, "b": 2}, meta={
        "io.modelcontextprotocol/protocolVersion": "2026-07-28"}), _headers(), False),
    ("malformed clientInfo", _call("add", {"a": 1, "b": 2}, meta={**META, "io.modelcontextprotocol/clientInfo": 5}),
     _headers(), False),
    ("an unsupported envelope version", _call("add", {"a": 1, "b": 2}, meta={
        **META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}), _headers(**{"MCP-Protocol-Version": "2099-01-01"}), False),
    ("arguments not an object", _call("add", [1, 2]), _headers(), False),
    ("arguments null", {**_call("add"), "params": {"name": "add", "arguments": None, "_meta": META}}, _headers(), False),
    ("name not a string", _call(5, {}), _headers("5"), False),  # type: ignore[arg-type]
    ("a progress token", _call("add", {"a": 1, "b": 2}, meta={**META, "progressToken": "p1"}), _headers(), False),
    ("a task request", _call("add", {"a": 1, "b": 2}, task={"ttl": 1000}), _headers(), False),
    ("an extra params key", _call("add", {"a": 1, "b": 2}, cursor="x"), _headers(), False),
    ("an extra envelope key", {**_call("add", {"a": 1, "b": 2}), "extra": 1}, _headers(), False),
    ("jsonrpc 1.0", {**_call("add", {"a": 1, "b": 2}), "jsonrpc": "1.0"}, _headers(), False),
    ("a null id", _call("add", {"a": 1, "b": 2}, rid=None), _headers(), False),
    ("a notification", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
     _headers(None, **{"Mcp-Method": "notifications/cancelled"}), False),
    ("a batch", [_call("add", {"a": 1, "b": 2})], _headers(), False),
    ("not JSON", "{not json", _headers(), False),
    ("Accept without SSE", _call("add", {"a": 1, "b": 2}), _headers(Accept="application/json"), False),
    ("Accept without JSON", _call("add", {"a": 1, "b": 2}), _headers(Accept="text/event-stream"), False),
    ("Content-Type text/plain", _call("add", {"a": 1, "b": 2}), _headers(**{"Content-Type": "text/plain"}), False),
    ("an Mcp-Param header", _call("add", {"a": 1, "b": 2}), _headers(**{"Mcp-Param-A": "1"}), False),
    ("a body over the size limit (413)", _call("add", {"a": "x" * 5000, "b": 1}), _headers(), False),
    ("tools/list", {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}},
     _headers(None, **{"Mcp-Method": "tools/list"}), False),
]


@pytest.mark.anyio
async def test_fast_and_sdk_paths_give_the_same_replies(tmp_path: Path) -> None:
    async with two_servers(tmp_path, max_body_bytes=4096) as (fast_url, sdk_url, calls):

        def run() -> list[tuple[str, Any, Any, int]]:
            out = []
            with httpx.Client(timeout=30) as http:
                for label, body, headers, _taken in CASES:
                    content = body if isinstance(body, str) else json.dumps(body)
                    before = calls.served
                    a = _reply(http.post(fast_url, content=content, headers=headers))
                    b = _reply(http.post(sdk_url, content=content, headers=headers))
                    out.append((label, a, b, calls.served - before))
            return out

        results = await anyio.to_thread.run_sync(run)
    for (label, fast, sdk, served), (_, _, _, taken) in zip(results, CASES, strict=True):
        assert fast == sdk, label
        assert served == (1 if taken else 0), f"{label}: fast path taken {served} times, expected {int(taken)}"
    good = results[0][1]
    assert good[0] == 200 and good[1] == "application/json"
    assert good[2]["result"]["structuredContent"] == {"sum": 5}
    assert good[2]["result"]["_meta"][RECEIPT_META_KEY]["outcome"] == "succeeded"
    notified = dict((r[0], r[1]) for r in results)["a tool that notifies (the reply commits to SSE)"]
    assert notified[1] == "sse" and notified[2][0]["method"] == "notifications/tools/list_changed"


@pytest.mark.anyio
async def test_json_response_mode_gives_the_same_replies(tmp_path: Path) -> None:
    async with two_servers(tmp_path, json_response=True, stateless=True) as (fast_url, sdk_url, calls):

        def run() -> list[tuple[Any, Any]]:
            with httpx.Client(timeout=30) as http:
                return [(_reply(http.post(fast_url, json=body, headers=headers)),
                         _reply(http.post(sdk_url, json=body, headers=headers)))
                        for _label, body, headers, _t in CASES[:8] if not isinstance(body, str)]

        pairs = await anyio.to_thread.run_sync(run)
        assert calls.served == 7
    for fast, sdk in pairs:
        assert fast == sdk


@pytest.mark.anyio
@pytest.mark.parametrize("parser", ["httptools", "h11", "another ASGI server"])
async def test_a_disconnect_cancels_a_fast_path_call(tmp_path: Path, parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Our protocols report the lost connection through the scope (no task per call); under another ASGI server
    # (uvicorn's own protocols here) a task awaiting receive() watches for the disconnect. Both cancel the call.
    watchers: list[object] = []
    original = FastToolCalls._watch_disconnect

    async def counted(receive: Any, exchange: Any) -> None:
        watchers.append(exchange)
        await original(receive, exchange)

    monkeypatch.setattr(FastToolCalls, "_watch_disconnect", staticmethod(counted))
    http = "auto" if parser == "another ASGI server" else guarded_protocol(parser, max_connections=100, header_timeout=30)
    markers = tmp_path / "m"
    async with two_servers(tmp_path, http=http) as (fast_url, _sdk_url, calls):
        async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tg:
            tg.start_soon(lambda: client.post(fast_url, json=_call("slow", {"dir": str(markers)}), headers=_headers("slow")))
            with anyio.fail_after(30):
                while not (markers / "started").exists():
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()  # closes the connection
        with anyio.fail_after(30):
            while not (markers / "cancelled").exists():
                await anyio.sleep(0.01)
        assert calls.served == 1
        with anyio.fail_after(30):
            while not (outcomes := _receipt_outcomes(tmp_path / "fast")):
                await anyio.sleep(0.01)
        assert outcomes == ["cancelled"]
        # The server keeps serving on new connections.
        async with httpx.AsyncClient(timeout=30) as client:
            ok = await client.post(fast_url, json=_call("add", {"a": 1, "b": 2}), headers=_headers("add"))
        assert ok.json()["result"]["structuredContent"] == {"sum": 3} and calls.served == 2
    assert len(watchers) == (2 if parser == "another ASGI server" else 0)


def _receipt_outcomes(journal_dir: Path) -> list[str]:
    from openfunctions.core.journal import read_records

    return [r.data["outcome"] for f in sorted(journal_dir.rglob("*.journal")) for r in read_records(f)
            if r.type == "receipt" and r.data]


def test_a_connection_lost_before_the_watch_is_registered_calls_back_at_once() -> None:
    from openfunctions.servers._http_guard import ConnectionGuard

    guard = ConnectionGuard()
    seen: list[str] = []
    guard._watch_lost(lambda: seen.append("first"))
    guard._watch_lost(None)  # the call ended: forgotten
    guard._connection_gone()
    assert seen == []
    guard._watch_lost(lambda: seen.append("late"))  # registered after the loss
    assert seen == ["late"]


def test_the_sdk_session_manager_still_has_what_the_fast_path_reads(tmp_path: Path) -> None:
    # Private API (servers/_fast_http.py): an SDK release that drops it turns the fast path off; this fails first.
    server = create_mcp_server(ToolRegistry(_tools()), name="t", version="0")
    app = create_http_app(server, stateless=True, fast_path=True)
    layer = app.app
    assert isinstance(layer, FastToolCalls) and not layer._broken


@pytest.mark.parametrize("result", [
    {"content": [{"type": "text", "text": "x"}], "_meta": {RECEIPT_META_KEY: {"v": 1, "error": None}},
     "resultType": "complete"},
    {"content": [{"type": "text", "text": "{\n  \"a\": 1\n}"}], "structuredContent": {"a": 1, "b": [None, {}]},
     "_meta": {}, "resultType": "complete"},
    {"content": [{"type": "text", "text": "boom"}], "isError": True, "_meta": {"k": {"z": None}}, "resultType": "complete"},
    {"content": [], "resultType": "complete"},
])
def test_the_sdk_result_sieve_leaves_plain_results_unchanged(result: dict[str, Any]) -> None:
    # The fast path skips the sieve only for this shape; the SDK's own sieve must agree that it is a no-op.
    assert _plain_result(result)
    assert _methods.serialize_server_result("tools/call", "2026-07-28", dict(result)) == result


@pytest.mark.parametrize("result", [
    {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}], "resultType": "complete"},
    {"content": [{"type": "text", "text": "x", "annotations": {"priority": 1}}], "resultType": "complete"},
    {"content": [{"type": "text", "text": "x"}], "isError": False, "resultType": "complete"},
    {"content": [{"type": "text", "text": "x"}], "resultType": "complete", "extra": 1},
    {"content": [{"type": "text", "text": "boom"}], "_meta": {"k": None}, "resultType": "complete"},  # the sieve drops k
])
def test_other_results_go_through_the_sdk_sieve(result: dict[str, Any]) -> None:
    assert not _plain_result(result)


def test_the_otel_middleware_is_kept_once_tracing_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp.server._otel import OpenTelemetryMiddleware

    import openfunctions.servers._fast as fast_module

    server = create_mcp_server(ToolRegistry(_tools()), name="t", version="0")
    assert any(isinstance(mw, OpenTelemetryMiddleware) for mw in server.lowlevel.middleware)  # what the SDK path runs
    calls = FastCalls.of(server)
    off = calls._chain()
    assert calls._composed is not None and not any(isinstance(mw, OpenTelemetryMiddleware) for mw in calls._composed[0])

    class Provider:  # any installed provider other than the API's no-op/proxy ones
        pass

    monkeypatch.setattr(fast_module.trace, "get_tracer_provider", lambda: Provider())
    on = calls._chain()
    assert on is not off and calls._composed[0] == calls._server_middleware()
    assert len(calls._server_middleware()) == len(server.lowlevel.middleware) - 1  # all but the session capture


def test_the_cached_envelope_builds_what_from_envelope_builds() -> None:
    from mcp.server.connection import Connection

    server = create_mcp_server(ToolRegistry(_tools()), name="t", version="0")
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "extensions": {"x": {}}}}
    call = FastCalls.of(server).admit(_call("add", {"a": 1, "b": 2}, meta=meta), "2026-07-28")
    assert call is not None
    ours = call.envelope.connection("2026-07-28")
    sdk = Connection.from_envelope("2026-07-28", meta["io.modelcontextprotocol/clientInfo"],
                                   meta["io.modelcontextprotocol/clientCapabilities"])
    for attr in ("protocol_version", "session_id", "client_params", "client_capabilities", "state"):
        assert getattr(ours, attr) == getattr(sdk, attr), attr
    assert ours.initialized.is_set() and sdk.initialized.is_set()
    assert type(ours.outbound) is type(sdk.outbound)


async def _real_receipt(text: str) -> Any:
    from openfunctions.servers._example_tools import example_tools

    return (await ToolRegistry(example_tools()).execute_detailed("of_hash_text", {"text": text})).receipt


@pytest.mark.anyio
@pytest.mark.parametrize("ensure_ascii", [True, False])
async def test_a_spliced_receipt_encodes_the_same_message(ensure_ascii: bool) -> None:
    from openfunctions.servers._fast import EncodedReceipt, encode

    receipt = await _real_receipt("é \u2028 \"quoted\" \\ 😀")
    spliced = EncodedReceipt(receipt.to_dict(), receipt.canonical_json())
    for result in [
        {"content": [{"type": "text", "text": "ü"}], "_meta": {RECEIPT_META_KEY: spliced, "io.x/serverInfo": {"n": 1}},
         "resultType": "complete", "structuredContent": {"a": [1, 2.5, None]}},
        {"_meta": {RECEIPT_META_KEY: spliced}},
        {"isError": True, "_meta": {RECEIPT_META_KEY: spliced, "z": None}, "content": []},
    ]:
        message = {"jsonrpc": "2.0", "id": "r-1", "result": result}
        raw = encode(message, ensure_ascii=ensure_ascii)
        plain = json.dumps(message, separators=(",", ":"), ensure_ascii=ensure_ascii).encode()
        assert json.loads(raw) == json.loads(plain) == message
        assert receipt.canonical_json().encode() in raw  # the receipt's text is the journal's, not encoded again
    # No EncodedReceipt: exactly the SDK's bytes.
    message = {"jsonrpc": "2.0", "id": 1, "result": {"_meta": {RECEIPT_META_KEY: receipt.to_dict()}}}
    assert encode(message) == json.dumps(message, separators=(",", ":")).encode()


@pytest.mark.anyio
async def test_the_reply_s_receipt_is_the_journal_s_record(tmp_path: Path) -> None:
    from openfunctions.core.journal import read_records

    async with two_servers(tmp_path, json_response=True) as (fast_url, _sdk_url, calls):
        async with httpx.AsyncClient(timeout=30) as http:
            replies = [await http.post(fast_url, json=_call("add", {"a": i, "b": 1}), headers=_headers("add"))
                       for i in range(3)]
        assert calls.served == 3
    records = {r.data["receipt_id"]: r.data for f in sorted((tmp_path / "fast").rglob("*.journal"))
               for r in read_records(f) if r.type == "receipt"}
    for reply in replies:
        receipt = reply.json()["result"]["_meta"][RECEIPT_META_KEY]
        assert records[receipt["receipt_id"]] == receipt
        assert canonical_json(receipt).encode() in reply.content  # spliced: the journal's text (sorted keys), not re-encoded


@pytest.mark.anyio
async def test_an_http_reply_stays_ascii_when_the_receipt_text_is_not() -> None:
    # Canonical JSON keeps U+2028 raw; spliced into an SSE `data:` line it would split the event for a
    # reader that follows str.splitlines (httpx's aiter_lines). HTTP replies stay ASCII-escaped.
    from openfunctions.servers._fast import EncodedReceipt, encode

    receipt = (await _real_receipt("x")).model_copy(update={"principal": "al\u2028ice é"})
    spliced = EncodedReceipt(receipt.to_dict(), receipt.canonical_json())
    assert not spliced.text.isascii()
    message = {"jsonrpc": "2.0", "id": 7, "result": {"_meta": {RECEIPT_META_KEY: spliced}}}
    raw = encode(message)
    assert raw.isascii() and b"\\u2028" in raw
    assert json.loads(raw) == message
    assert len(raw.decode().splitlines()) == 1
    # stdio (ensure_ascii=False) still splices the journal's text as is
    assert receipt.canonical_json().encode() in encode(message, ensure_ascii=False)


@pytest.mark.anyio
@pytest.mark.parametrize("edit", ["pop", "del", "set", "update", "setdefault", "ior", "popitem", "clear"])
async def test_a_receipt_edited_in_place_is_encoded_as_edited(edit: str) -> None:
    # Middleware may edit the reply's receipt in place; the SDK path would send the edit, so must the fast path.
    from openfunctions.servers._fast import EncodedReceipt, encode

    receipt = (await _real_receipt("x")).model_copy(update={"principal": "alice"})
    spliced = EncodedReceipt(receipt.to_dict(), receipt.canonical_json())
    if edit == "pop":
        spliced.pop("principal")
    elif edit == "del":
        del spliced["principal"]
    elif edit == "set":
        spliced["principal"] = "bob"
    elif edit == "update":
        spliced.update(principal="bob")
    elif edit == "setdefault":
        spliced.setdefault("extra", 1)
    elif edit == "ior":
        spliced |= {"principal": "bob"}
    elif edit == "popitem":
        spliced.popitem()
    else:
        spliced.clear()
    assert spliced.text is None
    message = {"jsonrpc": "2.0", "id": 7, "result": {"_meta": {RECEIPT_META_KEY: spliced}}}
    for ensure_ascii in (True, False):
        raw = encode(message, ensure_ascii=ensure_ascii)
        assert raw == json.dumps(message, separators=(",", ":"), ensure_ascii=ensure_ascii).encode()
        if edit in ("pop", "del", "set", "update", "ior", "clear"):
            assert b"alice" not in raw
