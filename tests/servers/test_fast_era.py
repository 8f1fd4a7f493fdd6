"""The direct ``tools/call`` path on handshake-era stdio connections answers exactly as the SDK path does.

Real ``serve`` subprocesses (stdio), one with the fast path and one with
``--no-fast-path``; a handshake-era session (``initialize`` at 2025-11-25 or
2025-06-18, where invalid arguments are a protocol error) gets the same lines
on both, and every line back (replies by id, notifications in order, the
receipt's per-call fields masked) must be equal. The server's ``fast_path``
log line at exit says how many calls the fast path answered, so the
comparison is not vacuous. Also: a sampling request a fast-path call sends
goes out on the session's back-channel and its answer comes back to the tool;
``notifications/cancelled`` cancels a fast-path call; and the result shaping
equals the SDK's sieve at every handshake version.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from openfunctions.core import ToolRegistry
from openfunctions.servers import RECEIPT_META_KEY, create_mcp_server
from openfunctions.servers._fast import FastCalls

from .conftest import journaled_receipts, serve_argv, server_env, wait_for_file
from .test_fast_http import META, _mask


def _init(version: str, capabilities: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": {"name": "x", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]


def _call(rid: Any, name: Any, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    params.update(extra)
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


# (line, taken by the fast path?)
LINES: list[tuple[Any, bool]] = [
    (_call(1, "add", {"a": 2, "b": 3}), True),
    (_call("s", "add", {"a": 1, "b": 1}), True),
    (_call(2, "add", {"a": "x"}), True),  # invalid arguments: a result at 2025-11-25, a -32602 error before it
    (_call(3, "fail", {}), True),
    (_call(4, "crash", {}), True),
    (_call(5, "add"), True),
    (_call(6, "tell", {"text": "hello"}), True),  # a log notification on the request, then the reply
    (_call(7, "nope", {}), False),
    (_call(8, "add", [1, 2]), False),
    (_call(9, "add", {"a": 1, "b": 2}, _meta={"progressToken": 9}), False),
    (_call(10, "add", {"a": 1, "b": 2}, _meta={}), False),
    (_call(11, "add", {"a": 1, "b": 2}, task={"ttl": 5}), False),
    (_call(12, "add", {"a": 1, "b": 2}, _meta=META), False),  # the 2026-07-28 envelope on a handshake session
    ({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "add", "arguments": None}}, False),
    ({"jsonrpc": "2.0", "id": 14, "method": "tools/list"}, False),
    (_call(15, "add", {"a": json.loads("[" * 250 + "]" * 250), "b": 1}), False),  # deeper than the SDK's parser takes
    ("{not json", False),
]


def _start(data_dir: Path, *extra: str) -> subprocess.Popen[str]:
    argv = serve_argv("--module", "fast_era_tools:registry", "--data-dir", str(data_dir), "--log-level", "info", *extra)
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())


def _send(proc: subprocess.Popen[str], *lines: Any) -> None:
    assert proc.stdin is not None
    proc.stdin.write("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    proc.stdin.flush()


def _read(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())


def _finish(proc: subprocess.Popen[str]) -> list[int]:
    """Close stdin, wait for exit; the fast path's count from its exit log line ([] when the path is off)."""
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out == "", err
    return [json.loads(line)["served"] for line in err.splitlines() if '"fast_path"' in line]


def _session(data_dir: Path, version: str, lines: list[Any], expected: int, *extra: str) -> tuple[dict[str, Any], list[Any], list[int]]:
    """Open a handshake session, send ``lines``, wait for ``expected`` replies; (replies by id, notifications, served)."""
    proc = _start(data_dir, *extra)
    try:
        _send(proc, *_init(version))
        init = _read(proc)
        assert init["result"]["protocolVersion"] == version
        _send(proc, *lines)
        replies: dict[str, Any] = {}
        notes: list[Any] = []
        while len(replies) < expected:
            msg = _read(proc)
            if "id" in msg:
                replies[json.dumps(msg["id"])] = _mask(msg)
            else:
                notes.append(_mask(msg))
    finally:
        served = _finish(proc)
    return replies, notes, served


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
def test_handshake_era_fast_and_sdk_paths_give_the_same_replies_over_stdio(tmp_path: Path, version: str) -> None:
    lines = [line for line, _ in LINES]
    fast, fast_notes, served = _session(tmp_path / "fast", version, lines, len(lines))
    sdk, sdk_notes, none = _session(tmp_path / "sdk", version, lines, len(lines), "--no-fast-path")
    assert fast == sdk and fast_notes == sdk_notes
    assert served == [sum(taken for _, taken in LINES)] and none == []  # --no-fast-path: the path is not wired at all
    assert fast["1"]["result"]["structuredContent"] == {"sum": 5} and "resultType" not in fast["1"]["result"]
    assert "io.modelcontextprotocol/serverInfo" not in fast["1"]["result"]["_meta"]  # no 2026 stamp on this era
    assert fast_notes == [{"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": {"said": "hello"}}}]
    if version == "2025-06-18":
        assert fast["2"]["error"]["code"] == -32602  # invalid arguments are a protocol error before 2025-11-25
    else:
        assert fast["2"]["result"]["isError"] is True
    assert fast["12"]["error"]["code"] == -32600  # an enveloped request on a handshake connection: the SDK refuses


def _sampling_session(data_dir: Path, *extra: str) -> tuple[Any, Any, list[int]]:
    proc = _start(data_dir, *extra)
    try:
        _send(proc, *_init("2025-11-25", {"sampling": {}}))
        _read(proc)
        _send(proc, _call(1, "ask", {"question": "2+2?"}))
        request = _read(proc)  # the tool's sampling request, sent while the call runs
        _send(proc, {"jsonrpc": "2.0", "id": request["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m", "stopReason": "endTurn"}})
        reply = _read(proc)
    finally:
        served = _finish(proc)
    return request, _mask(reply), served


@pytest.mark.slow
def test_a_fast_path_call_on_a_handshake_session_can_sample_the_client(tmp_path: Path) -> None:
    request, reply, served = _sampling_session(tmp_path / "fast")
    sdk_request, sdk_reply, none = _sampling_session(tmp_path / "sdk", "--no-fast-path")
    assert (request, reply) == (sdk_request, sdk_reply) and served == [1] and none == []
    assert request["method"] == "sampling/createMessage"
    assert reply["result"]["structuredContent"] == {"answer": "4"}


@pytest.mark.slow
def test_notifications_cancelled_reaches_a_handshake_era_fast_path_call(tmp_path: Path) -> None:
    markers = tmp_path / "m"
    proc = _start(tmp_path / "data")
    try:
        _send(proc, *_init("2025-11-25"))
        _read(proc)
        _send(proc, _call(1, "slow", {"dir": str(markers)}))
        wait_for_file(markers / "started")
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "test"}})
        wait_for_file(markers / "cancelled")
        time.sleep(0.2)
        _send(proc, _call(2, "add", {"a": 1, "b": 1}))
        reply = _read(proc)
        assert reply["id"] == 2 and reply["result"]["structuredContent"] == {"sum": 2}  # no reply for the cancelled 1
    finally:
        served = _finish(proc)
    assert served == [2]
    assert (markers / "started").read_text() in journaled_receipts(tmp_path / "data")  # settled, not lost


RESULTS: list[dict[str, Any]] = [
    {"content": [{"type": "text", "text": "ok"}], "_meta": {"r": {"a": 1, "n": None}}, "resultType": "complete"},
    {"content": [{"type": "text", "text": "é\u2028"}], "_meta": {"r": {}}, "resultType": "complete",
     "structuredContent": {"a": None, "b": [1]}, "isError": True},
    {"content": [], "resultType": "complete"},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {}, "resultType": "complete"},
]


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
@pytest.mark.parametrize("result", RESULTS)
def test_handshake_result_shaping_equals_the_sdk_sieve(version: str, result: dict[str, Any]) -> None:
    calls = FastCalls(create_mcp_server(ToolRegistry([]), name="t", version="0"))
    assert calls._serialize(version, dict(result)) == _methods.serialize_server_result("tools/call", version, dict(result))


# -- streamable HTTP sessions --------------------------------------------------------------------------------------

SESSION_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
IGNORED_HEADERS = {"date", "server", "content-length", "mcp-session-id"}


def _era_tools() -> list[Any]:
    import sys

    from .conftest import HERE

    sys.path.insert(0, str(HERE))
    try:
        import fast_era_tools
    finally:
        sys.path.pop(0)
    from .test_fast_http import _tools

    return [*_tools(), *(fast_era_tools.registry.get(name) for name in ("tell", "ask", "reconnect"))]


def _open_session(http: Any, url: str, version: str, capabilities: dict[str, Any] | None = None) -> dict[str, str]:
    """initialize + notifications/initialized; the headers every later request of the session carries."""
    init, initialized = _init(version, capabilities)
    resp = http.post(url, json=init, headers=SESSION_HEADERS)
    assert resp.status_code == 200, resp.text
    headers = {**SESSION_HEADERS, "Mcp-Session-Id": resp.headers["mcp-session-id"], "MCP-Protocol-Version": version}
    assert http.post(url, json=initialized, headers=headers).status_code == 202
    return headers


def _events(text: str) -> list[dict[str, Any]]:
    """An SSE body as its events: each field (``id`` masked: ids are per store), ``data`` parsed and masked."""
    events = []
    for block in text.split("\r\n\r\n"):
        if not block:
            continue
        event: dict[str, Any] = {}
        for line in block.split("\r\n"):
            field, _, value = line.partition(": ")
            if field == "":  # a comment (a keep-alive ping)
                continue
            event[field] = "*" if field == "id" else (_mask(json.loads(value)) if field == "data" and value else value)
        if event:
            events.append(event)
    return events


def _response(resp: Any) -> tuple[int, dict[str, str], Any]:
    headers = {k: v for k, v in resp.headers.items() if k not in IGNORED_HEADERS}
    headers["mcp-session-id"] = "*" if "mcp-session-id" in resp.headers else "absent"  # its value differs per server
    if headers.get("content-type", "").startswith("text/event-stream"):
        return resp.status_code, headers, _events(resp.text)
    try:
        return resp.status_code, headers, _mask(resp.json())
    except ValueError:
        return resp.status_code, headers, resp.text


# (body, headers over the session's, taken by the fast path? "json": only in JSON-response mode)
HTTP_LINES: list[tuple[Any, dict[str, str], bool | str]] = [
    (_call(1, "add", {"a": 2, "b": 3}), {}, True),
    (_call("s", "add", {"a": 1, "b": 1}), {}, True),
    (_call(2, "add", {"a": "x"}), {}, True),
    (_call(3, "fail", {}), {}, True),
    (_call(4, "crash", {}), {}, True),
    (_call(5, "add"), {}, True),
    (_call(6, "tell", {"text": "hello"}), {}, True),
    (_call(7, "notifies", {}), {}, True),
    (_call(8, "nope", {}), {}, False),
    (_call(9, "add", {"a": 1, "b": 2}, _meta={"progressToken": 9}), {}, False),
    (_call(10, "add", {"a": 1, "b": 2}, task={"ttl": 5}), {}, False),
    (_call(11, "add", {"a": 1, "b": 2}, _meta=META), {}, False),
    (_call(12, "add", [1, 2]), {}, False),
    ({"jsonrpc": "2.0", "id": 13, "method": "tools/list"}, {}, False),
    (_call(14, "add", {"a": 1, "b": 2}), {"Accept": "application/json"}, "json"),  # SSE mode: 406
    (_call(15, "add", {"a": 1, "b": 2}), {"Content-Type": "text/plain"}, False),
    (_call(16, "add", {"a": 1, "b": 2}), {"MCP-Protocol-Version": "2025-06-18"}, False),  # not the negotiated one
    (_call(17, "add", {"a": 1, "b": 2}), {"Mcp-Session-Id": "no-such-session"}, False),
    (_call(18, "add", {"a": json.loads("[" * 250 + "]" * 250), "b": 1}), {}, False),
]


@pytest.mark.anyio
@pytest.mark.parametrize("options", [{}, {"event_store": False}, {"json_response": True}],
                         ids=["sse+event-store", "sse", "json"])
async def test_handshake_era_http_sessions_get_the_sdk_paths_replies(tmp_path: Path, options: dict[str, Any]) -> None:
    import anyio
    import httpx

    from .test_fast_http import two_servers

    async with two_servers(tmp_path, tools=_era_tools, **options) as (fast_url, sdk_url, calls):

        def run() -> list[tuple[Any, Any, int]]:
            out = []
            with httpx.Client(timeout=30) as http:
                fast_headers = _open_session(http, fast_url, "2025-11-25")
                sdk_headers = _open_session(http, sdk_url, "2025-11-25")
                for body, extra, _taken in HTTP_LINES:
                    before = calls.served
                    a = _response(http.post(fast_url, content=json.dumps(body), headers={**fast_headers, **extra}))
                    b = _response(http.post(sdk_url, content=json.dumps(body), headers={**sdk_headers, **extra}))
                    out.append((a, b, calls.served - before))
            return out

        results = await anyio.to_thread.run_sync(run)
    for (fast, sdk, served), (body, extra, taken) in zip(results, HTTP_LINES, strict=True):
        assert fast == sdk, (body, extra)
        expected = bool(options.get("json_response")) if taken == "json" else taken
        assert served == (1 if expected else 0), (body, extra, served)
    status, headers, good = results[0][0]
    if options.get("json_response"):
        assert headers["content-type"] == "application/json" and good["result"]["structuredContent"] == {"sum": 5}
    else:
        assert headers["content-type"].startswith("text/event-stream")
        assert good[-1]["data"]["result"]["structuredContent"] == {"sum": 5}
        assert ("id" in good[-1]) == ("event_store" not in options)  # stored events carry their id
        told = results[6][0][2]
        assert [e["data"].get("method") for e in told if "data" in e and e["data"]] == ["notifications/message", None]


@pytest.mark.anyio
async def test_a_stored_fast_path_reply_is_replayed_on_resumption(tmp_path: Path) -> None:
    """A client that lost the stream after the priming event gets the call's events again (GET + Last-Event-ID)."""
    import anyio
    import httpx

    from .test_fast_http import two_servers

    async with two_servers(tmp_path, tools=_era_tools) as (fast_url, sdk_url, calls):

        def run(url: str) -> tuple[Any, Any]:
            with httpx.Client(timeout=30) as http:
                headers = _open_session(http, url, "2025-11-25")
                first = http.post(url, content=json.dumps(_call(1, "tell", {"text": "again"})), headers=headers)
                priming = next(line[4:] for line in first.text.split("\r\n") if line.startswith("id: "))
                replayed: list[Any] = []
                with http.stream("GET", url, headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": priming}) as resp:
                    text = ""
                    for chunk in resp.iter_text():  # the stream stays open: read up to the reply, then hang up
                        text += chunk
                        replayed = _events(text[: text.rfind("\r\n\r\n") + 4]) if "\r\n\r\n" in text else []
                        if any("result" in e.get("data", {}) for e in replayed if isinstance(e.get("data"), dict)):
                            break
                return _events(first.text), replayed

        fast = await anyio.to_thread.run_sync(run, fast_url)
        served = calls.served
        sdk = await anyio.to_thread.run_sync(run, sdk_url)
    assert fast == sdk and served == 1
    assert [e["data"]["method"] if "method" in e["data"] else "reply" for e in fast[1]] == ["notifications/message", "reply"]


@pytest.mark.anyio
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_a_fast_path_call_on_an_http_session_can_sample_or_says_why_not(tmp_path: Path, json_response: bool) -> None:
    """SSE mode: the tool's sampling request rides the call's stream and the client's answer (a POST) reaches it.
    JSON mode: no room for a server request in a JSON body, so the tool is told so — on both paths alike."""
    import anyio
    import httpx

    from .test_fast_http import two_servers

    async with two_servers(tmp_path, tools=_era_tools, json_response=json_response) as (fast_url, sdk_url, calls):

        def run(url: str) -> Any:
            with httpx.Client(timeout=30) as http:
                headers = _open_session(http, url, "2025-11-25", {"sampling": {}})
                body = json.dumps(_call(1, "ask", {"question": "2+2?"}))
                if json_response:
                    return _response(http.post(url, content=body, headers=headers))
                events = []
                with http.stream("POST", url, content=body, headers=headers) as resp:
                    buffer = ""
                    for chunk in resp.iter_text():
                        buffer += chunk
                        while "\r\n\r\n" in buffer:
                            block, buffer = buffer.split("\r\n\r\n", 1)
                            event = _events(block + "\r\n\r\n")
                            events += event
                            data = event[0].get("data") if event else None
                            if isinstance(data, dict) and data.get("method") == "sampling/createMessage":
                                answer = {"jsonrpc": "2.0", "id": data["id"], "result": {
                                    "role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m",
                                    "stopReason": "endTurn"}}
                                assert http.post(url, json=answer, headers=headers).status_code == 202
                return events

        fast = await anyio.to_thread.run_sync(run, fast_url)
        served = calls.served
        sdk = await anyio.to_thread.run_sync(run, sdk_url)
    assert fast == sdk and served == 1
    if json_response:
        assert fast[2]["result"]["isError"] is True  # the tool could not sample: said in its result
    else:
        assert fast[-1]["data"]["result"]["structuredContent"] == {"answer": "4"}


@pytest.mark.anyio
@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
async def test_notifications_cancelled_ends_a_fast_path_call_on_an_http_session(tmp_path: Path, json_response: bool) -> None:
    import anyio
    import httpx

    from .conftest import await_file
    from .test_fast_http import two_servers

    async with two_servers(tmp_path, tools=_era_tools, json_response=json_response) as (fast_url, sdk_url, calls):

        async def run(url: str, markers: Path) -> Any:
            async with httpx.AsyncClient(timeout=30) as http:
                headers = await anyio.to_thread.run_sync(lambda: _open_session(httpx.Client(timeout=30), url, "2025-11-25"))
                result: list[Any] = []

                async def call() -> None:
                    resp = await http.post(url, content=json.dumps(_call(1, "slow", {"dir": str(markers)})), headers=headers)
                    result.append(_response(resp))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await await_file(markers / "started")
                    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
                    assert (await http.post(url, json=cancel, headers=headers)).status_code == 202
                await await_file(markers / "cancelled")
                return result[0]

        fast = await run(fast_url, tmp_path / "fast-markers")
        served = calls.served
        sdk = await run(sdk_url, tmp_path / "sdk-markers")
    assert fast == sdk and served == 1
    error = fast[2]["error"] if json_response else fast[2][-1]["data"]["error"]
    assert error == {"code": -32800, "message": "Request cancelled"}


@pytest.mark.anyio
async def test_a_fast_path_call_that_closes_its_stream_is_resumed_with_last_event_id(tmp_path: Path) -> None:
    """The tool ends its SSE stream mid-call (``ctx.close_sse_stream``); the client resumes with ``GET`` +
    ``Last-Event-ID`` and gets the rest live: the later events reach the resumed stream as on the SDK path."""
    import anyio
    import httpx

    from .test_fast_http import two_servers

    async with two_servers(tmp_path, tools=_era_tools) as (fast_url, sdk_url, calls):

        def run(url: str, markers: Path) -> tuple[Any, Any]:
            markers.mkdir()
            with httpx.Client(timeout=30) as http:
                headers = _open_session(http, url, "2025-11-25")
                first = http.post(url, content=json.dumps(_call(1, "reconnect", {"dir": str(markers)})), headers=headers)
                last = [line[4:] for line in first.text.split("\r\n") if line.startswith("id: ")][-1]
                resumed: list[Any] = []
                with http.stream("GET", url, headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": last}) as resp:
                    (markers / "release").write_text("go")  # the resumed stream is open: let the tool go on
                    text = ""
                    for chunk in resp.iter_text():
                        text += chunk
                        resumed = _events(text[: text.rfind("\r\n\r\n") + 4]) if "\r\n\r\n" in text else []
                        if any(isinstance(e.get("data"), dict) and "result" in e["data"] for e in resumed):
                            break
                return _events(first.text), resumed

        fast = await anyio.to_thread.run_sync(run, fast_url, tmp_path / "fast-markers")
        served = calls.served
        sdk = await anyio.to_thread.run_sync(run, sdk_url, tmp_path / "sdk-markers")
    # What the client gets over both streams together. (Which stream carries "before" is a race on the SDK path:
    # its router may deliver it after the stream was closed, and the resumption replays it from the store.)
    def seen(streams: tuple[Any, Any]) -> list[Any]:
        events = [e for events in streams for e in events if e.get("data")]
        for e in events:  # the marker dirs (an argument) differ between the two runs
            e["data"].get("result", {}).get("_meta", {}).get(RECEIPT_META_KEY, {}).pop("params_sha256", None)
        return events

    assert seen(fast) == seen(sdk) and served == 1
    assert [e["data"].get("params", {}).get("data", "reply") for e in seen(fast)] == ["before", "after", "reply"]
    assert fast[0][0]["retry"] == sdk[0][0]["retry"]  # both streams open with the stored priming event


def test_a_forgotten_session_leaves_no_entry() -> None:
    """The session table holds connections weakly: many short sessions do not make it grow."""
    import gc

    from mcp.server.connection import Connection

    calls = FastCalls(create_mcp_server(ToolRegistry([]), name="t", version="0"))
    kept = Connection.for_loop(None, session_id="kept")  # type: ignore[arg-type]
    for sid in ("kept", *(f"gone-{i}" for i in range(50))):
        calls._sessions[sid] = kept if sid == "kept" else Connection.for_loop(None, session_id=sid)  # type: ignore[arg-type]
    gc.collect()
    assert calls.handshake_session("kept") is kept and list(calls._sessions) == ["kept"]


def test_a_sized_store_counts_the_given_length_and_replays_the_message() -> None:
    """The fast path stores its events with the JSON length it already has (no second encoding of the reply)."""
    import anyio
    import mcp_types as types

    from openfunctions.servers._event_store import MemoryEventStore

    store = MemoryEventStore()
    view = store.for_session("s")
    message = types.JSONRPCResponse.model_construct(jsonrpc="2.0", id=1, result={"content": []})
    first = view.store_sized("1", message, 1234)  # type: ignore[attr-defined]
    view.store_sized("1", message, 10)  # type: ignore[attr-defined]
    assert store.byte_count == 1244
    replayed: list[Any] = []

    async def collect(event: Any) -> None:
        replayed.append(event.message.model_dump_json(by_alias=True, exclude_unset=True))

    assert anyio.run(view.replay_events_after, first, collect) == "1"
    assert replayed == ['{"jsonrpc":"2.0","id":1,"result":{"content":[]}}']


def test_the_sdk_still_has_the_private_parts_the_handshake_era_path_uses() -> None:
    """servers/_sdk.py reaches these for handshake-era sessions; a release that moves one must fail here first."""
    import inspect

    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    from openfunctions.servers import _sdk

    transport = StreamableHTTPServerTransport(mcp_session_id="s", event_store=None)
    assert _sdk.session_transport_parts(transport)
    assert inspect.iscoroutinefunction(StreamableHTTPServerTransport._mint_priming_event)
    manager = StreamableHTTPSessionManager(app=create_mcp_server(ToolRegistry([]), name="t", version="0").lowlevel)
    assert isinstance(manager._server_instances, dict) and isinstance(manager._session_owners, dict)
    assert _sdk.session_transport(manager, "nope", None) is None
    assert "_related_request_id" in inspect.signature(JSONRPCDispatcher.send_raw_request).parameters
