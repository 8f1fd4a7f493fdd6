"""Conflict keys over real HTTP: a ``serve`` subprocess on 127.0.0.1, two concurrent clients.

Calls keyed on different repositories are inside their handlers at the same
time; calls keyed on the same repository never are (see lanes_http_tools.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from .._net import free_port, wait_for_port

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "lanes-test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "rendezvous"}


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--transport", "http", "--port", str(port),
         "--module", "lanes_http_tools:registry", "--no-example-tools", "--data-dir", str(tmp_path / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stderr.close()


async def _call(url: str, rid: int, args: dict) -> str:
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "rendezvous", "arguments": args, "_meta": META}}
    async with httpx.AsyncClient(timeout=60) as client:  # one connection per caller
        resp = await client.post(url, json=body, headers=HEADERS)
    assert resp.status_code == 200, resp.text
    text = resp.text
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(ln[5:] for ln in text.splitlines() if ln.startswith("data:") and '"result"' in ln)
    result = json.loads(text)["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]["met"]


async def _pair(url: str, markers: Path, repos: tuple[str, str], wait_s: float) -> list[str]:
    markers.mkdir()
    out: dict[str, str] = {}

    async def one(rid: int, me: str, other: str, repo: str) -> None:
        out[me] = await _call(url, rid, {"repo": repo, "dir": str(markers), "me": me, "other": other, "wait_s": wait_s})

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 1, "a", "b", repos[0])
        tg.start_soon(one, 2, "b", "a", repos[1])
    return [out["a"], out["b"]]


@pytest.mark.anyio
async def test_keyed_calls_on_different_keys_overlap_over_http_and_same_key_calls_do_not(server, tmp_path):
    # Different repositories: both handlers meet inside (each waits up to 30 s for the other).
    assert await _pair(server, tmp_path / "distinct", ("repo-1", "repo-2"), 30.0) == ["together", "together"]
    # The same repository: one at a time, so neither ever sees the other inside (a bounded 1 s wait each).
    assert await _pair(server, tmp_path / "same", ("repo-1", "repo-1"), 1.0) == ["alone", "alone"]
