"""Agents served over MCP, thinking with the host's model: the official SDK client's
sampling callback plays the model (scripted); servers are real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openfunctions.agents import read_runs

from .._net import free_port, wait_for_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
RECEIPT = "dev.openfunctions/receipt"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(HERE), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e["PYTHONUNBUFFERED"] = "1"
    return e


def argv(data: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "agents",
            "--module", "fixture_agents:agents", "--data-dir", str(data), *extra]


class HostModel:
    """The host's model, scripted: each item answers one sampling request."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        self.requests.append(params)
        item = self.script.pop(0)
        if callable(item):
            item = await item(params)
        if isinstance(item, str):
            return types.CreateMessageResult(role="assistant", model="host-model-7",
                                             content=types.TextContent(type="text", text=item), stop_reason="endTurn")
        name, args = item
        return types.CreateMessageResultWithTools(
            role="assistant", model="host-model-7", stop_reason="toolUse",
            content=[types.ToolUseContent(type="tool_use", id=f"tu{len(self.requests)}", name=name, input=args)])


def client(target: Any, model: HostModel, *, tools: bool = True) -> Client:
    caps = types.SamplingCapability(tools=types.SamplingToolsCapability()) if tools else types.SamplingCapability()
    return Client(target, mode="legacy", sampling_callback=model, sampling_capabilities=caps, read_timeout_seconds=60)


async def _ask_researcher(c: Client, model: HostModel) -> tuple[Any, list[float]]:
    progress: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append(p)

    result = await c.call_tool("agent_researcher", {"task": "What is the capital of France?"}, progress_callback=on_progress)
    return result, progress


def _check_researcher_run(result: Any, model: HostModel, data: Path) -> None:
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload["text"] == "Paris." and payload["status"] == "completed" and payload["rounds"] == 2
    assert result.meta[RECEIPT]["tool"] == "agent_researcher" and result.meta[RECEIPT]["outcome"] == "succeeded"
    # The model saw the agent's tools in sampling-with-tools form, then the tool's result.
    first, second = model.requests
    assert first.system_prompt.startswith("You look facts up") and [t.name for t in first.tools] == ["lookup"]
    blocks = second.messages[-1].content
    blocks = blocks if isinstance(blocks, list) else [blocks]
    assert blocks[0].type == "tool_result" and "Paris is the capital" in blocks[0].content[0].text
    run = read_runs(data)[payload["run_id"]]
    assert run.status == "completed" and run.started["model"] == "host" and run.rounds[0]["model"] == "host-model-7"
    assert run.started["parent_receipt_id"] == result.meta[RECEIPT]["receipt_id"]
    inner = run.rounds[0]["tool_calls"][0]
    assert inner["name"] == "lookup" and inner["outcome"] == "succeeded" and inner["receipt_id"].startswith("rcpt_")
    # The inner call went through the executor: its receipt is in the execution journal, child of the agent call.
    from openfunctions.core.journal import read_records

    receipts = {r.data["receipt_id"]: r.data for r in read_records(data / "journal" / "agents.journal") if r.type == "receipt"}
    assert receipts[inner["receipt_id"]]["parent_receipt_id"] == result.meta[RECEIPT]["receipt_id"]
    assert run.finished["receipts"] == [inner["receipt_id"]]


async def test_agent_over_stdio_thinks_with_the_host_model(tmp_path: Path) -> None:
    data = tmp_path / "data"
    model = HostModel([("lookup", {"key": "paris"}), "Paris."])
    a = argv(data)
    async with client(StdioServerParameters(command=a[0], args=a[1:], env=env()), model) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"agent_researcher", "agent_scribe", "crew_team", "of_run_read", "lookup", "note", "workflow_shout"} <= names
        result, progress = await _ask_researcher(c, model)
        assert progress == [1.0]  # one progress notification per tool round
        _check_researcher_run(result, model, data)
        read = await c.call_tool("of_run_read", {"run_id": result.structured_content["run_id"]})
        assert not read.is_error and read.structured_content["status"] == "completed"
        assert read.structured_content["rounds"][0]["tool_calls"][0]["name"] == "lookup"


async def test_agent_over_http_thinks_with_the_host_model(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port)), env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, proc)
        model = HostModel([("lookup", {"key": "paris"}), "Paris."])
        async with client(f"http://127.0.0.1:{port}/mcp", model) as c:
            result, progress = await _ask_researcher(c, model)
            assert progress == [1.0]
            _check_researcher_run(result, model, data)
    finally:
        proc.kill()
        proc.wait(10)


async def test_host_without_sampling_gets_an_error_result_saying_so(tmp_path: Path) -> None:
    a = argv(tmp_path / "data")
    async with Client(StdioServerParameters(command=a[0], args=a[1:], env=env()), mode="legacy", read_timeout_seconds=60) as c:
        result = await c.call_tool("agent_researcher", {"task": "capital of France?"})
    assert result.is_error
    text = result.content[0].text
    assert "does not offer sampling" in text and "run_" in text


async def test_host_with_text_only_sampling_gets_no_tools(tmp_path: Path) -> None:
    model = HostModel(["I cannot look it up, but it is Paris."])
    a = argv(tmp_path / "data")
    async with client(StdioServerParameters(command=a[0], args=a[1:], env=env()), model, tools=False) as c:
        result = await c.call_tool("agent_researcher", {"task": "capital of France?"})
    assert not result.is_error and result.structured_content["text"].endswith("Paris.")
    assert model.requests[0].tools is None


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_client_cancellation_stops_the_loop(tmp_path: Path, transport: str) -> None:
    data, markers = tmp_path / "data", tmp_path / "m"
    markers.mkdir()
    model = HostModel([("wait_for_release", {"dir": str(markers)}), "never reached"])
    proc = None
    if transport == "stdio":
        a = argv(data)
        target: Any = StdioServerParameters(command=a[0], args=a[1:], env=env())
    else:
        port = free_port()
        proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port)), env=env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, proc)
        target = f"http://127.0.0.1:{port}/mcp"
    try:
        async with client(target, model) as c:
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await c.call_tool("agent_waiter", {"task": "wait"})

                tg.start_soon(call)
                with anyio.fail_after(30):
                    while not (markers / "started").exists():
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
            with anyio.fail_after(30):
                while not (markers / "cancelled").exists():
                    await anyio.sleep(0.01)
            # The server is still serving; the run is on disk as cancelled, and the model was asked only once.
            with anyio.fail_after(30):
                while True:
                    runs = [r for r in read_runs(data).values() if r.agent == "waiter"]
                    if runs and runs[0].status != "running":
                        break
                    await anyio.sleep(0.02)
            assert runs[0].status == "cancelled" and len(model.requests) == 1
            assert (await c.list_tools()).tools
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)


async def test_sequential_crew_over_mcp_threads_answers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    notes = tmp_path / "notes.txt"

    async def scribe_turn(params: Any) -> Any:
        task = params.messages[0].content.text
        assert "The previous agent (researcher) answered:\nParis." in task
        return ("note", {"file": str(notes), "text": "capital: Paris"})

    model = HostModel([("lookup", {"key": "paris"}), "Paris.", scribe_turn, "Noted."])
    a = argv(data)
    async with client(StdioServerParameters(command=a[0], args=a[1:], env=env()), model) as c:
        result = await c.call_tool("crew_team", {"task": "Find the capital of France and note it."})
    assert not result.is_error, result.content
    assert result.structured_content["text"] == "Noted."
    assert [r["agent"] for r in result.structured_content["runs"]] == ["researcher", "scribe"]
    assert notes.read_text() == "capital: Paris\n"
    runs = read_runs(data)
    assert all(runs[r["run_id"]].status == "completed" for r in result.structured_content["runs"])


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_client_on_the_default_protocol_lends_its_model_through_input_required_results(tmp_path: Path,
                                                                                         transport: str) -> None:
    """2026-07-28 has no server-initiated sampling: each request comes back as an InputRequiredResult, the SDK
    client answers it with its sampling callback and retries, and the run resumes where it was."""
    data = tmp_path / "data"
    model = HostModel([("lookup", {"key": "paris"}), "Paris.", "42"])
    keys: list[Any] = []

    async def host(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        keys.append(ctx.request_id)
        return await model(ctx, params)

    proc = None
    if transport == "stdio":
        a = argv(data)
        target: Any = StdioServerParameters(command=a[0], args=a[1:], env=env())
    else:
        port = free_port()
        proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port)), env=env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, proc)
        target = f"http://127.0.0.1:{port}/mcp"
    caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
    try:
        async with Client(target, sampling_callback=host, sampling_capabilities=caps, read_timeout_seconds=60) as c:
            assert c.protocol_version == "2026-07-28"
            result = await c.call_tool("agent_researcher", {"task": "What is the capital of France?"})
            _check_researcher_run(result, model, data)
            # A plain tool asking the host's model: its first leg takes the direct tools/call path.
            plain = await c.call_tool("ask_host", {"q": "the answer?"})
        assert not plain.is_error and plain.structured_content == {"answer": "42"}, plain.content
        assert keys == ["sampling-0", "sampling-1", "sampling-0"]  # embedded requests, not server->client ones
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(10)
