"""The direct ``tools/call`` path over stdio answers exactly as the SDK path does (servers/_stdio.py).

Real ``serve`` subprocesses (stdio), one with the fast path and one with
``--no-fast-path``; the same lines go to both, the replies (matched by id, the
receipt's per-call fields masked) must be equal. The server's ``fast_path``
log line at exit says how many calls the fast path answered, so the
comparison is not vacuous.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import journaled_receipts, serve_argv, server_env, wait_for_file
from .test_fast_http import META, _mask


def _call(rid: Any, name: Any, arguments: Any = None, meta: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": META if meta is None else meta}
    if arguments is not None:
        params["arguments"] = arguments
    params.update(extra)
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


DISCOVER = {"jsonrpc": "2.0", "id": "d", "method": "server/discover", "params": {"_meta": META}}

# (line, taken by the fast path?)
LINES: list[tuple[Any, bool]] = [
    (DISCOVER, False),  # the first request decides the era; it always goes to the SDK
    (_call(1, "add", {"a": 2, "b": 3}), True),
    (_call("s", "add", {"a": 1, "b": 1}), True),
    (_call(2, "add", {"a": "x"}), True),
    (_call(3, "fail", {}), True),
    (_call(4, "crash", {}), True),
    (_call(5, "add"), True),
    (_call(6, "nope", {}), False),
    (_call(7, "add", [1, 2]), False),
    (_call(8, "add", {"a": 1, "b": 2}, meta={**META, "progressToken": 8}), False),
    (_call(9, "add", {"a": 1, "b": 2}, meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"}), False),
    (_call(10, "add", {"a": 1, "b": 2}, task={"ttl": 5}), False),
    (_call(11, "add", {"a": 1, "b": 2}, meta={**META, "io.modelcontextprotocol/clientInfo": 3}), False),
    ({"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": {"_meta": META}}, False),
    ({"jsonrpc": "2.0", "id": 13, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                                                     "clientInfo": {"name": "x", "version": "0"}}}, False),
    ("{not json", False),
]


def _serve(tmp_path: Path, lines: list[Any], expected: int, *extra: str) -> tuple[dict[Any, Any], int]:
    """Send ``lines``, wait for ``expected`` replies, close stdin; the replies by id and the fast path's count.

    Stdin closes only after every reply is in: at EOF the server drains, and a
    call not yet admitted then is refused (on either path), which would race.
    """
    argv = serve_argv("--module", "fixture_tools:registry", "--data-dir", str(tmp_path), "--log-level", "info", *extra)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    replies: dict[Any, Any] = {}
    try:
        proc.stdin.write("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
        proc.stdin.flush()
        while len(replies) < expected:
            msg = json.loads(proc.stdout.readline())
            replies[json.dumps(msg.get("id"))] = _mask(msg)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out == "", err
    served = [json.loads(line)["served"] for line in err.splitlines() if '"fast_path"' in line]
    return replies, served


@pytest.mark.slow
def test_fast_and_sdk_paths_give_the_same_replies_over_stdio(tmp_path: Path) -> None:
    lines = [line for line, _ in LINES]
    fast, served = _serve(tmp_path / "fast", lines, len(lines))
    sdk, none = _serve(tmp_path / "sdk", lines, len(lines), "--no-fast-path")
    assert fast == sdk
    assert served == [sum(taken for _, taken in LINES)] and none == []  # --no-fast-path: the path is not wired at all
    assert fast["1"]["result"]["structuredContent"] == {"sum": 5}
    assert fast["13"]["error"]["code"] == -32022  # initialize on a modern connection: refused by the SDK, as before


@pytest.mark.slow
def test_a_legacy_connection_takes_only_its_own_eras_calls(tmp_path: Path) -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, _call(1, "add", {"a": 1, "b": 1}),
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 1}}}]
    fast, served = _serve(tmp_path / "fast", lines, 3)
    sdk, none = _serve(tmp_path / "sdk", lines, 3, "--no-fast-path")
    assert fast == sdk and served == [1] and none == []  # the handshake-era call only (tests/servers/test_fast_era.py)
    assert fast["1"]["error"]["code"] == -32600  # an enveloped request on a legacy connection
    assert fast["2"]["result"]["structuredContent"] == {"sum": 2}


@pytest.mark.slow
def test_notifications_cancelled_reaches_a_fast_path_call(tmp_path: Path) -> None:
    markers = tmp_path / "m"
    argv = serve_argv("--module", "fixture_tools:registry", "--data-dir", str(tmp_path / "data"), "--log-level", "info")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    try:
        def send(msg: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()

        send(DISCOVER)
        assert json.loads(proc.stdout.readline())["id"] == "d"
        send(_call(1, "slow", {"dir": str(markers)}))
        wait_for_file(markers / "started")
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "test"}})
        wait_for_file(markers / "cancelled")
        time.sleep(0.2)
        send(_call(2, "add", {"a": 1, "b": 1}))
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 2 and reply["result"]["structuredContent"] == {"sum": 2}  # no reply for the cancelled 1
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out == ""
    assert [json.loads(line)["served"] for line in err.splitlines() if '"fast_path"' in line] == [2]
    # The handler's receipt (its id is what it wrote to the marker) is in the journal: the call was settled, not lost.
    slow_receipt = (markers / "started").read_text()
    assert slow_receipt in journaled_receipts(tmp_path / "data")
