"""An agent run as a 2026-07-28 task thinks with the client's model: each sampling request parks the task in
``input_required`` (``tasks/get`` shows it) and ``tasks/update`` answers it. A real server (subprocess, HTTP),
a client speaking plain JSON-RPC (the SDK client has no tasks extension)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from openfunctions.agents import read_runs

from .._net import free_port, wait_for_port
from .test_mcp_sampling import RECEIPT, argv, env

pytestmark = pytest.mark.slow
PROTOCOL = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"


class Rpc:
    def __init__(self, url: str) -> None:
        self.url, self.n = url, 0

    def __call__(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        caps = {"extensions": {EXT: {}}, "sampling": {"tools": {}}}
        meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": caps}
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": method}
        name = params.get("name") if method == "tools/call" else params.get("taskId")
        if name:
            headers["Mcp-Name"] = name
        resp = httpx.post(self.url, headers=headers, timeout=30,
                          json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": {**params, "_meta": meta}})
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            msgs = [json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            msg = next(m for m in msgs if m.get("id") == self.n)
        else:
            msg = resp.json()
        assert "result" in msg, msg
        return msg["result"]

    def until(self, task_id: str, status: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            got = self("tasks/get", {"taskId": task_id})
            if got["status"] == status:
                return got
            assert got["status"] in ("working", "input_required") and time.monotonic() < deadline, got
            time.sleep(0.05)


def test_an_agent_task_asks_for_the_clients_model_through_input_required(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port)), env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        rpc = Rpc(f"http://127.0.0.1:{port}/mcp")
        created = rpc("tools/call", {"name": "agent_researcher", "arguments": {"task": "Capital of France?"}})
        assert created["resultType"] == "task", created  # the first sampling request made it a task at once
        task_id = created["taskId"]
        asked = rpc.until(task_id, "input_required")
        (key, request), = asked["inputRequests"].items()
        assert key == "sampling-0" and request["method"] == "sampling/createMessage"
        assert [t["name"] for t in request["params"]["tools"]] == ["lookup"]
        rpc("tasks/update", {"taskId": task_id, "inputResponses": {key: {
            "role": "assistant", "model": "host-model-7", "stopReason": "toolUse",
            "content": [{"type": "tool_use", "id": "tu1", "name": "lookup", "input": {"key": "paris"}}]}}})
        asked = rpc.until(task_id, "input_required")
        assert list(asked["inputRequests"]) == ["sampling-1"]  # a new key: the tool ran between the two
        last = asked["inputRequests"]["sampling-1"]["params"]["messages"][-1]["content"][0]
        assert last["type"] == "tool_result" and "Paris is the capital" in last["content"][0]["text"]
        rpc("tasks/update", {"taskId": task_id, "inputResponses": {"sampling-1": {
            "role": "assistant", "model": "host-model-7", "content": {"type": "text", "text": "Paris."}}}})
        done = rpc.until(task_id, "completed")
    finally:
        proc.kill()
        proc.wait(10)
    result = done["result"]
    assert not result.get("isError") and result["structuredContent"]["text"] == "Paris.", result
    run = read_runs(data)[result["structuredContent"]["run_id"]]
    assert run.status == "completed" and [r["model"] for r in run.rounds] == ["host-model-7", "host-model-7"]
    assert run.started["parent_receipt_id"] == result["_meta"][RECEIPT]["receipt_id"]
    assert run.rounds[0]["tool_calls"][0]["outcome"] == "succeeded"
