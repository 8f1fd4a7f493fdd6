"""The server over streamable HTTP on a real 127.0.0.1 port, as a subprocess.

Tests that only talk to the server share one per set of flags (``shared_http_server``); those that
stop it, or read its journal or its output, start their own (``http_server``).
"""

from __future__ import annotations

import json
import signal

import httpx
import pytest
from mcp import Client

from openfunctions.servers import RECEIPT_META_KEY

from .conftest import cancel_slow_call, journaled_receipts, wait_for_file

pytestmark = pytest.mark.slow

MODES = ["auto", "legacy"]
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def rpc(method: str, params: dict | None = None, rid: int = 1) -> dict:
    params = dict(params or {})
    params["_meta"] = {**MODERN_META, **params.get("_meta", {})}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    h = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def parse_body(resp: httpx.Response) -> dict:
    """A JSON body, or the last JSON-RPC response in an SSE stream."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        out = None
        for line in resp.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if "result" in msg or "error" in msg:
                    out = msg
        assert out is not None, resp.text
        return out
    return resp.json()


def post(url: str, body, *, method: str = "tools/call", name: str | None = None, **kw) -> httpx.Response:
    headers = {**modern_headers(method, name), **kw.pop("headers", {})}
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url, content=content, headers=headers, timeout=30, **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_http(shared_http_server, mode, stateless):
    url, _ = shared_http_server(*(["--stateless"] if stateless else []))
    seen = []

    async def on_progress(p, total, message):
        seen.append(p)

    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        added = await client.call_tool("add", {"a": 1, "b": 2})
        failed = await client.call_tool("fail", {})
        progressed = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert tools["add"].output_schema["required"] == ["sum"]
    assert added.structured_content == {"sum": 3}
    assert added.meta[RECEIPT_META_KEY]["outcome"] == "succeeded"
    assert RECEIPT_META_KEY not in added.structured_content
    assert failed.is_error and failed.meta[RECEIPT_META_KEY]["outcome"] == "failed"
    assert not progressed.is_error
    assert seen == [1, 2, 3]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_over_http_reaches_the_handler(shared_http_server, tmp_path, mode):
    url, _ = shared_http_server()
    markers = tmp_path / "m"
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        await cancel_slow_call(client, markers)
        after = await client.call_tool("add", {"a": 2, "b": 2})
    assert after.structured_content == {"sum": 4}


def test_bad_input_over_http_gets_clear_errors(http_server):
    url, _ = http_server("--stateless", "--max-message-bytes", "4096")
    malformed = post(url, b"{not json")
    assert malformed.status_code == 400
    assert parse_body(malformed)["error"]["code"] == -32700

    unknown_method = post(url, rpc("tools/frobnicate", {}), method="tools/frobnicate")
    assert parse_body(unknown_method)["error"]["code"] == -32601

    oversized = post(url, rpc("tools/call", {"name": "add", "arguments": {"a": "x" * 10000}}), name="add")
    assert oversized.status_code == 413 and "too large" in oversized.text.lower()

    wrong_types = parse_body(post(url, rpc("tools/call", {"name": "add", "arguments": {"a": "1", "b": 2}}), name="add"))
    assert wrong_types["result"]["isError"] is True and "$.a" in wrong_types["result"]["content"][0]["text"]
    assert wrong_types["result"]["_meta"][RECEIPT_META_KEY]["outcome"] == "rejected"

    unknown_tool = parse_body(post(url, rpc("tools/call", {"name": "nope", "arguments": {}}), name="nope"))
    assert unknown_tool["error"]["code"] == -32602 and "'nope'" in unknown_tool["error"]["message"]

    ok = parse_body(post(url, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}), name="add"))
    assert ok["result"]["structuredContent"] == {"sum": 3}


def test_host_header_rebinding_is_refused(shared_http_server):
    url, _ = shared_http_server("--stateless")
    evil = post(url, rpc("tools/list"), method="tools/list", headers={"Host": "evil.example:80"})
    assert evil.status_code in (403, 421)
    cross_origin = post(url, rpc("tools/list"), method="tools/list", headers={"Origin": "http://evil.example"})
    assert cross_origin.status_code == 403
    fine = post(url, rpc("tools/list"), method="tools/list")
    assert fine.status_code == 200 and parse_body(fine)["result"]["tools"]


def test_bearer_auth(http_server, tmp_path):
    token = "s3cret-token-value"
    url, proc = http_server(
        "--stateless", "--auth-token-env", "OF_TEST_TOKEN", "--log-level", "debug", "--principal", "ops",
        env={"OF_TEST_TOKEN": token},
    )
    missing = post(url, rpc("tools/list"), method="tools/list")
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    wrong = post(url, rpc("tools/list"), method="tools/list", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    good = post(url, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}), name="add",
                headers={"Authorization": f"Bearer {token}"})
    assert good.status_code == 200
    assert parse_body(good)["result"]["_meta"][RECEIPT_META_KEY]["principal"] == "ops"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert token not in err


def test_bearer_auth_from_file(http_server, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("file-token\n")
    tok.chmod(0o600)
    url, _ = http_server("--stateless", "--auth-token-file", str(tok))
    assert post(url, rpc("tools/list"), method="tools/list").status_code == 401
    ok = post(url, rpc("tools/list"), method="tools/list", headers={"Authorization": "Bearer file-token"})
    assert ok.status_code == 200


def test_client_disconnecting_mid_call_cancels_it_and_the_server_keeps_serving(shared_http_server, tmp_path):
    url, _ = shared_http_server("--stateless")
    markers = tmp_path / "m"
    # With a progress token the tool's first progress notification opens the SSE stream at once.
    body = rpc("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}, "_meta": {"progressToken": "p1"}})
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", url, content=json.dumps(body), headers=modern_headers("tools/call", "slow")) as resp:
            assert resp.status_code == 200
            wait_for_file(markers / "started")
        # leaving the block closes the response stream: the spec's cancellation
    wait_for_file(markers / "cancelled")
    ok = parse_body(post(url, rpc("tools/call", {"name": "add", "arguments": {"a": 3, "b": 4}}), name="add"))
    assert ok["result"]["structuredContent"] == {"sum": 7}


def test_sigterm_drains_in_flight_calls(http_server, tmp_path):
    url, proc = http_server("--stateless", "--shutdown-timeout", "60")
    markers = tmp_path / "m"
    out = {}

    def call():
        out["resp"] = post(url, rpc("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}}), name="slow")

    import threading

    t = threading.Thread(target=call)
    t.start()
    wait_for_file(markers / "started")
    proc.send_signal(signal.SIGTERM)
    (markers / "release").write_text("go")
    t.join(timeout=30)
    assert proc.wait(timeout=30) == 0
    reply = parse_body(out["resp"])["result"]
    assert reply["structuredContent"] == {"finished": True}
    assert not (markers / "cancelled").exists()
    assert reply["_meta"][RECEIPT_META_KEY]["receipt_id"] in journaled_receipts(tmp_path / "data")


def test_allowed_host_widens_the_rebinding_check_to_named_hosts_only(http_server):
    url, _ = http_server("--stateless", "--allowed-host", "mcp.example.test:*", "--allowed-origin", "https://app.example.test")
    port = url.split(":")[2].split("/")[0]
    named = post(url, rpc("tools/list"), method="tools/list",
                 headers={"Host": f"mcp.example.test:{port}", "Origin": "https://app.example.test"})
    assert named.status_code == 200
    other = post(url, rpc("tools/list"), method="tools/list", headers={"Host": f"other.example.test:{port}"})
    assert other.status_code in (403, 421)


def test_a_body_that_is_json_but_not_jsonrpc_is_rejected_clearly(shared_http_server):
    url, _ = shared_http_server("--stateless")
    resp = post(url, {"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, method="tools/list")
    assert resp.status_code == 400
    body = parse_body(resp)
    assert body["error"]["code"] in (-32600, -32602, -32700)
    ok = post(url, rpc("tools/list"), method="tools/list")
    assert ok.status_code == 200
