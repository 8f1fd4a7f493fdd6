"""The server as a real stdio subprocess: SDK client in both eras, and hand-written bad input."""

from __future__ import annotations

import json
import signal

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openfunctions.servers import RECEIPT_META_KEY

from .conftest import cancel_slow_call, journaled_receipts, serve_argv, server_env, wait_for_file

pytestmark = pytest.mark.slow

MODES = ["auto", "legacy"]


def params(tmp_path, *extra: str) -> StdioServerParameters:
    argv = serve_argv("--module", "fixture_tools:registry", "--example-tools", "--data-dir", str(tmp_path / "data"), *extra)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_env())


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_stdio(tmp_path, mode):
    seen = []

    async def on_progress(p, total, message):
        seen.append((p, total, message))

    async with Client(params(tmp_path), mode=mode, read_timeout_seconds=30) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        added = await client.call_tool("add", {"a": 40, "b": 2})
        failed = await client.call_tool("fail", {})
        progressed = await client.call_tool("progress", {"steps": 2}, progress_callback=on_progress)
        bad = await client.call_tool("add", {"a": [], "b": 2})
    assert "of_hash_text" in tools and tools["add"].meta == {"dev.example/owner": "tests", "dev.example/cost": 1}
    assert added.structured_content == {"sum": 42}
    assert added.meta[RECEIPT_META_KEY]["outcome"] == "succeeded"
    assert failed.is_error and "disk is full" in failed.content[0].text
    assert failed.meta[RECEIPT_META_KEY]["outcome"] == "failed"
    assert not progressed.is_error and [s[0] for s in seen] == [1, 2]
    assert bad.is_error and "$.a" in bad.content[0].text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_over_stdio_reaches_the_handler(tmp_path, mode):
    markers = tmp_path / "m"
    async with Client(params(tmp_path), mode=mode, read_timeout_seconds=30) as client:
        await cancel_slow_call(client, markers)
        after = await client.call_tool("add", {"a": 1, "b": 1})
    assert after.structured_content == {"sum": 2}
    assert not (markers / "finished").exists()


def test_printing_tool_keeps_stdout_pure_jsonrpc(raw_stdio):
    s = raw_stdio()
    s.initialize()
    printed = s.call("tools/call", {"name": "printer", "arguments": {}})
    s.call("tools/list")
    assert s.close() == 0
    assert printed["result"]["structuredContent"] == {"printed": True}
    assert s.stdout_lines, "no output at all"
    for line in s.stdout_lines:
        msg = json.loads(line)
        assert msg["jsonrpc"] == "2.0" and ("id" in msg or "method" in msg)
    err = bytes(s.stderr)
    assert b"a tool printed this to stdout" in err
    assert b"raw write to fd 1" in err
    assert b"a child process printed this" in err


def test_bad_input_gets_clear_errors_and_the_server_keeps_serving(raw_stdio):
    s = raw_stdio("--max-message-bytes", "2048")
    s.initialize()
    s.send_raw(b"{this is not json\n")
    parse = s.read()
    assert parse["id"] is None and parse["error"]["code"] == -32700 and "not valid JSON" in parse["error"]["message"]

    s.send_raw(b"[1, 2]\n")
    batch = s.read()
    assert batch["error"]["code"] == -32600 and "batch" in batch["error"]["message"]

    s.send({"jsonrpc": "1.0", "id": 77, "method": "tools/list"})
    wrong_version = s.read()
    assert wrong_version["id"] == 77 and wrong_version["error"]["code"] == -32600 and '"jsonrpc"' in wrong_version["error"]["message"]

    unknown = s.call("tools/frobnicate", {})
    assert unknown["error"]["code"] == -32601

    s.send_raw(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "add", "arguments": {"a": "' + b"x" * 5000 + b'"}}}\n')
    oversized = s.read()
    assert oversized["error"]["code"] == -32600 and "2048-byte limit" in oversized["error"]["message"]

    wrong_types = s.call("tools/call", {"name": "add", "arguments": {"a": "one", "b": None}})
    assert wrong_types["result"]["isError"] is True
    text = wrong_types["result"]["content"][0]["text"]
    assert "$.a" in text and "$.b" in text
    assert wrong_types["result"]["_meta"][RECEIPT_META_KEY]["outcome"] == "rejected"

    not_object = s.call("tools/call", {"name": "add", "arguments": [1, 2]})
    assert "error" in not_object or not_object["result"]["isError"]

    unknown_tool = s.call("tools/call", {"name": "nope", "arguments": {}})
    assert unknown_tool["error"]["code"] == -32602 and "'nope'" in unknown_tool["error"]["message"]

    ok = s.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    assert ok["result"]["structuredContent"] == {"sum": 3}
    assert s.close() == 0


def test_invalid_arguments_are_a_protocol_error_for_2025_06_18(raw_stdio):
    s = raw_stdio()
    init = s.initialize("2025-06-18")
    assert init["result"]["protocolVersion"] == "2025-06-18"
    bad = s.call("tools/call", {"name": "add", "arguments": {"a": "one", "b": 2}})
    assert bad["error"]["code"] == -32602
    assert "$.a" in bad["error"]["message"]
    # The prefix is said once, not "...'add': invalid arguments for tool 'add': ...".
    assert bad["error"]["message"].startswith("Invalid arguments for tool 'add': $.a")
    assert bad["error"]["message"].lower().count("invalid arguments for tool") == 1
    assert bad["error"]["data"]["receipt"]["outcome"] == "rejected"
    assert s.close() == 0


def test_modern_era_raw_request_without_handshake(raw_stdio):
    s = raw_stdio()
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    out = s.call("tools/call", {"name": "add", "arguments": {"a": 5, "b": 5}, "_meta": meta})
    assert out["result"]["structuredContent"] == {"sum": 10}
    assert out["result"]["_meta"][RECEIPT_META_KEY]["outcome"] == "succeeded"
    assert s.close() == 0


def test_closing_stdin_lets_running_calls_finish_and_answers_them(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "60")
    s.initialize()
    rid = s.request("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}})
    quick = s.request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}})
    wait_for_file(markers / "started")
    s.proc.stdin.close()  # the MCP stdio shutdown: EOF
    (markers / "release").write_text("go")
    assert s.response(rid)["result"]["structuredContent"] == {"finished": True}
    assert s.close() == 0
    assert any(json.loads(line).get("id") == quick for line in s.stdout_lines), (s.stdout_lines, bytes(s.stderr))


def test_closing_stdin_cancels_calls_that_outlive_the_shutdown_timeout(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "0.2")
    s.initialize()
    s.start_slow(markers)
    assert s.close() == 0
    assert (markers / "cancelled").exists() and not (markers / "finished").exists()


def test_client_vanishing_mid_call_cancels_it_at_once(tmp_path):
    """The host closed both pipes (it died): nobody can read an answer, so the call is cancelled now."""
    import subprocess

    markers = tmp_path / "m"
    argv = serve_argv("--module", "fixture_tools:registry", "--data-dir", str(tmp_path / "data"), "--shutdown-timeout", "600")
    proc = subprocess.Popen(argv, env=server_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {"dir": str(markers)}}}
        proc.stdin.write((json.dumps(init) + "\n").encode())
        proc.stdin.flush()
        proc.stdout.readline()
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n" + json.dumps(call) + "\n").encode())
        proc.stdin.flush()
        wait_for_file(markers / "started")
        proc.stdout.close()
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        assert (markers / "cancelled").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_lets_the_running_call_finish_and_refuses_new_ones(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "60", "--log-level", "info")
    s.initialize()
    rid = s.start_slow(markers)
    s.proc.send_signal(signal.SIGTERM)
    s.wait_for_stderr(b"shutdown_signal")
    late = s.call("tools/call", {"name": "fail", "arguments": {}})
    (markers / "release").write_text("go")
    finished = s.response(rid)
    assert s.proc.wait(timeout=30) == 0, bytes(s.stderr).decode()[-3000:]
    assert finished["result"]["structuredContent"] == {"finished": True}
    assert late["result"]["isError"] and "shutting down" in late["result"]["content"][0]["text"]
    # both receipts were journaled before the replies went out, and the journal was closed cleanly
    journal = journaled_receipts(tmp_path / "data")
    for reply in (finished, late):
        assert len(journal[reply["result"]["_meta"][RECEIPT_META_KEY]["receipt_id"]]) >= 1


def test_sigterm_cancels_calls_that_outlive_the_shutdown_timeout(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "0.2")
    s.initialize()
    s.start_slow(markers)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=30) == 0
    assert (markers / "cancelled").exists()
