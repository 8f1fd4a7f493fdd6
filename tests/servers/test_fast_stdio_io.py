"""How the stdio transport reads its stdin (servers/_stdio.py): on the event loop for a pipe, by a thread otherwise.

A pipe (what MCP hosts give a stdio server) is watched by the event loop
itself, so a request reaches its handler without a thread hand-over; a
regular file (``serve < requests.jsonl``) cannot be watched that way and is
read by the ``openfunctions-stdin`` thread. Real ``serve`` subprocesses; the
``threads`` tool (``fast_stdio_tools.py``) reports the server's live threads.
The line splitting both share is checked directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import tty
from pathlib import Path
from typing import Any

import pytest

from openfunctions.servers._stdio import _LineSplitter

from .conftest import journaled_receipts, serve_argv, server_env

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
READER_THREAD = "openfunctions-stdin"


def _argv(tmp_path: Path) -> list[str]:
    return serve_argv("--module", "fast_stdio_tools:registry", "--no-example-tools", "--data-dir", str(tmp_path),
                      "--log-level", "info")


def _lines(*messages: Any) -> str:
    return "".join(json.dumps(m) + "\n" for m in messages)


def _call(rid: int, name: str = "threads") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": {}}}


def _served(err: str) -> int:
    return sum(json.loads(line)["served"] for line in err.splitlines() if '"fast_path"' in line)


def test_a_pipe_is_read_by_the_event_loop_not_a_thread(tmp_path: Path) -> None:
    proc = subprocess.Popen(_argv(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_lines(INIT, INITIALIZED))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        proc.stdin.write(_lines(_call(1)))  # after initialize's reply: the fast path takes it
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert reply["id"] == 1 and not reply["result"].get("isError"), reply
    names = reply["result"]["structuredContent"]["names"]
    assert READER_THREAD not in names, names
    assert proc.returncode == 0 and out == "", err
    assert _served(err) == 1, err  # the call went through the direct path, read by the loop


def test_a_terminal_is_read_by_a_thread(tmp_path: Path) -> None:
    """A terminal (here a pseudo-terminal in raw mode) is read by the thread; closing it ends the server (EOF)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    proc = subprocess.Popen(_argv(tmp_path), stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())
    os.close(slave)
    assert proc.stdout is not None
    try:
        os.write(master, _lines(INIT, INITIALIZED).encode())
        assert json.loads(proc.stdout.readline())["id"] == 0
        os.write(master, _lines(_call(1)).encode())
        reply = json.loads(proc.stdout.readline())
    finally:
        os.close(master)  # the server's read now fails (EIO): taken as EOF
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert reply["id"] == 1 and READER_THREAD in reply["result"]["structuredContent"]["names"], reply
    assert proc.returncode == 0, err


def test_a_regular_file_is_served_to_its_unterminated_last_line(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    # No newline after the last request: at EOF it still counts as a line.
    requests.write_text(_lines(INIT, INITIALIZED, _call(1)) + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
    with requests.open("rb") as stdin:
        done = subprocess.run(_argv(tmp_path), stdin=stdin, capture_output=True, text=True, env=server_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    replies = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert set(replies) == {0, 1, 2}, done.stdout
    assert replies[2]["result"] == {}
    assert not replies[1]["result"].get("isError"), replies[1]


def test_lines_behind_a_slow_consumer_are_all_answered(tmp_path: Path) -> None:
    """One write of ~600 KiB of lines, fast-path calls and SDK-path pings interleaved: more than the transport
    queues before it stops reading (256 KiB), so reading pauses and resumes; every request is answered once."""
    pad = "x" * 120
    calls = [_call(i, "threads") if i % 2 else {"jsonrpc": "2.0", "id": i, "method": "ping", "params": {"_meta": {"pad": pad}}}
             for i in range(1, 4001)]
    proc = subprocess.Popen(_argv(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_lines(INIT, INITIALIZED).encode())
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        payload = _lines(*calls).encode()
        assert len(payload) > 2 * 256 * 1024
        out, err = proc.communicate(payload, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    ids = [json.loads(line)["id"] for line in out.splitlines()]
    assert sorted(ids) == list(range(1, 4001))
    assert _served(err.decode()) > 0


def test_the_line_splitter_keeps_lines_across_chunks_and_refuses_long_ones_as_they_stream() -> None:
    s = _LineSplitter(limit=10)
    assert s.feed(b"ab\ncd") == [b"ab"]
    assert s.feed(b"ef\n\n") == [b"cdef", b""]
    assert s.feed(b"0123456789A\nok\n") == [None, b"ok"]  # over the limit within one chunk
    assert s.feed(b"0123456") == []
    assert s.feed(b"789AB") == [None]  # over the limit across chunks: refused at once, the rest discarded
    assert s.feed(b"CDEF") == []
    assert s.feed(b"GH\nnext\n") == [b"next"]
    assert s.feed(b"0123456789\n") == [b"0123456789"]  # exactly the limit is fine
    assert s.feed(b"tail") == []
    assert s.finish() == [b"tail"]
    assert s.finish() == []


@pytest.mark.parametrize("journal_sync", ["loop", "thread", None])
def test_journal_sync_chooses_who_makes_a_stdio_receipt_durable(tmp_path: Path, journal_sync: str | None) -> None:
    """``serve --journal-sync`` on stdio: ``thread`` starts the journal's writer thread at the first receipt
    (it is still there while the next call runs; it leaves only after 2 s idle); ``loop``, the default, never
    starts one."""
    choice = [] if journal_sync is None else ["--journal-sync", journal_sync]
    proc = subprocess.Popen([*_argv(tmp_path), *choice], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    replies = []
    try:
        proc.stdin.write(_lines(INIT, INITIALIZED))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        for rid in (1, 2):
            proc.stdin.write(_lines(_call(rid)))
            proc.stdin.flush()
            replies.append(json.loads(proc.stdout.readline()))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    names = replies[1]["result"]["structuredContent"]["names"]
    writers = [n for n in names if n.startswith("journal-writer:")]
    assert bool(writers) is (journal_sync == "thread"), names
    settled = [types for types in journaled_receipts(tmp_path).values() if types[-1] == "receipt"]
    assert len(settled) == 2  # both calls' receipts are in the journal either way


@pytest.mark.anyio
async def test_an_unknown_journal_sync_is_refused_before_serving() -> None:
    from openfunctions.core import ConfigurationError, ToolRegistry
    from openfunctions.servers import create_mcp_server
    from openfunctions.servers._runtime import run_stdio

    server = create_mcp_server(ToolRegistry([]), name="t", version="0", journal_dir=None)
    with pytest.raises(ConfigurationError, match="journal_sync must be one of loop, thread, not 'fsync'"):
        await run_stdio(server, journal_sync="fsync", handle_signals=False)
