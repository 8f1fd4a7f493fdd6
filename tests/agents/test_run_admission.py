"""RunOptions.admission: a "per_call" run holds no place in the registry's scheduler while its model thinks; each
tool call it makes is admitted on its own (a write still runs alone) and its receipt is linked to the run's."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import AgentRuntime, RunOptions, define_agent
from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool

pytestmark = pytest.mark.anyio


async def test_per_call_runs_overlap_and_their_writes_are_admitted_one_by_one_and_linked() -> None:
    running: list[str] = []
    overlapped: list[bool] = []

    async def write(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        overlapped.append(bool(running))  # another write running now?
        running.append(p["key"])
        await anyio.sleep(0)
        running.remove(p["key"])
        return {"written": p["key"]}

    sink = MemoryJournalSink()
    reg = ToolRegistry([define_tool(name="put", description="a write", handler=write,
                                    input_schema={"type": "object", "properties": {"key": {"type": "string"}}})],
                       sink=sink)
    a_thinking, b_done = anyio.Event(), anyio.Event()

    async def a_thinks(messages: list[Any], tools: list[Any]) -> str:
        a_thinking.set()
        with anyio.fail_after(20):  # "run" admission: B never gets in while A holds the write barrier
            await b_done.wait()
        return "A done"

    a = define_agent("a", "A.", tools=["put"], adapter=ScriptedAdapter([{"tool": "put", "arguments": {"key": "a"}}, a_thinks]))
    b = define_agent("b", "B.", tools=["put"], adapter=ScriptedAdapter([{"tool": "put", "arguments": {"key": "b"}}, "B done"]))
    rt = AgentRuntime(reg)
    per_call = RunOptions(admission="per_call")
    results: dict[str, Any] = {}

    async def run(agent: Any) -> None:
        results[agent.name] = await rt.run(agent, "go", options=per_call)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, a)
        with anyio.fail_after(20):
            await a_thinking.wait()  # A made its write and its model is thinking
        with anyio.fail_after(20):
            await run(b)  # while A's model is still thinking
        b_done.set()
    assert results["a"].text == "A done" and results["b"].text == "B done"
    assert overlapped == [False, False]
    by_id = {r.receipt_id: r for r in sink.receipts}
    for name in ("a", "b"):
        run_receipt = results[name].receipt
        (child,) = [by_id[i] for i in results[name].receipts]
        assert child.tool == "put" and child.parent_receipt_id == run_receipt.receipt_id
        assert by_id[run_receipt.receipt_id].tool == f"agent_{name}"  # the run's own call is journaled too


def test_an_unknown_admission_is_refused() -> None:
    with pytest.raises(ValueError, match="admission must be 'run' or 'per_call'"):
        RunOptions(admission="whenever")  # type: ignore[arg-type]


def _put_registry() -> tuple[ToolRegistry, MemoryJournalSink, list[str]]:
    written: list[str] = []

    async def put(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        written.append(p["key"])
        return {"written": p["key"]}

    sink = MemoryJournalSink()
    reg = ToolRegistry([define_tool(name="put", description="a write", handler=put, capability={"effect": "write"},
                                    input_schema={"type": "object", "properties": {"key": {"type": "string"}}})],
                       sink=sink)
    return reg, sink, written


def _waiting(first: Any, answer: str = "done") -> tuple[ScriptedAdapter, anyio.Event, anyio.Event]:
    thinking, go = anyio.Event(), anyio.Event()

    async def think(messages: list[Any], tools: list[Any]) -> str:
        thinking.set()
        await go.wait()
        return answer

    return ScriptedAdapter([first, think]), thinking, go


@pytest.mark.parametrize("kind", ["agent", "crew"])
async def test_a_served_run_waiting_on_its_model_holds_no_barrier(kind: str) -> None:
    """Served as a tool (the registry's own executor, as an MCP server calls it): the agent's or crew's call
    gives its reservation back, another client's write runs while the model thinks, and the run's own
    write is admitted on its own, linked to the run's receipt."""
    reg, sink, written = _put_registry()
    model, thinking, go = _waiting({"tool": "put", "arguments": {"key": "mine"}})
    agent = define_agent("w", "W.", tools=["put"], adapter=model)
    rt = AgentRuntime(reg)
    rt.register(agent)
    name = "agent_w"
    if kind == "crew":
        from openfunctions.agents import define_crew

        rt.register_crew(define_crew("c", [agent]))
        name = "crew_c"
    assert reg.get(name).schedule_class == "exclusive"  # it may write: admitted like any unclassified tool
    out: dict[str, Any] = {}

    async def call() -> None:
        out["run"] = await reg.execute_detailed(name, {"task": "go"})

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            await thinking.wait()
        assert not reg.executor.scheduler.running_exclusive
        with anyio.fail_after(20):  # before: queued behind the run's barrier until the model answered
            other = await reg.execute_detailed("put", {"key": "other"})
        assert other.ok and written == ["mine", "other"]
        go.set()
    run = out["run"]
    assert run.ok, run.error
    by_id = {r.receipt_id: r for r in sink.receipts}
    (mine,) = [r for r in sink.receipts if r.tool == "put" and r.parent_receipt_id is not None]
    parent = by_id[mine.parent_receipt_id]
    assert parent.tool == "agent_w"
    if kind == "crew":  # the member's call is itself admitted on its own, linked to the crew's call
        assert parent.parent_receipt_id == run.receipt.receipt_id
    else:
        assert parent.receipt_id == run.receipt.receipt_id
    assert not reg.executor.scheduler.running_exclusive and reg.executor.scheduler.running_shared == 0


async def test_admission_run_still_holds_the_barrier_while_the_model_thinks() -> None:
    reg, _, written = _put_registry()
    model, thinking, go = _waiting({"tool": "put", "arguments": {"key": "mine"}})
    agent = define_agent("w", "W.", tools=["put"], adapter=model)
    rt = AgentRuntime(reg)
    out: dict[str, Any] = {}

    async def run() -> None:
        out["r"] = await rt.run(agent, "go", options=RunOptions(admission="run"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(20):
            await thinking.wait()
        assert reg.executor.scheduler.running_exclusive  # the older behaviour, on request
        go.set()
    assert out["r"].status == "completed" and written == ["mine"]


async def test_an_agent_calling_a_served_workflow_with_write_steps_does_not_deadlock() -> None:
    """Agent -> workflow tool -> write step: each call admitted on its own, none queued behind its own parent."""
    from openfunctions.workflows import pipe, tool_step

    reg, sink, written = _put_registry()
    reg.register(pipe(tool_step("put", {"key": "from-workflow"}), name="wf").as_tool("wf", registry=reg))
    agent = define_agent("w", "W.", tools=["wf"], adapter=ScriptedAdapter([{"tool": "wf", "arguments": {}}, "ok"]))
    rt = AgentRuntime(reg)
    rt.register(agent)
    with anyio.fail_after(20):
        d = await reg.execute_detailed("agent_w", {"task": "go"})
    assert d.ok, d.error
    by_id = {r.receipt_id: r for r in sink.receipts}
    (step,) = [r for r in sink.receipts if r.tool == "put"]
    wf_call = by_id[step.parent_receipt_id]
    assert written == ["from-workflow"] and wf_call.tool == "wf" and wf_call.parent_receipt_id == d.receipt.receipt_id


async def test_a_served_read_only_agent_still_cannot_reach_a_writer() -> None:
    reg, sink, written = _put_registry()
    reg.register(define_tool(name="peek", description="a read", handler=lambda p, c: "seen",
                             capability={"effect": "read", "parallel_safe": True}))
    writer = define_agent("writer", "x", tools=["put"], adapter=ScriptedAdapter([{"tool": "put", "arguments": {"key": "x"}}, "no"]))
    boss = define_agent("boss", "x", tools=["peek"], delegates=[writer], adapter=ScriptedAdapter([
        {"tool": "peek", "arguments": {}}, {"tool": "delegate_to_writer", "arguments": {"task": "write"}}, "done"]))
    rt = AgentRuntime(reg)
    rt.register(boss)
    assert reg.get("agent_boss").schedule_class == "shared"
    d = await reg.execute_detailed("agent_boss", {"task": "go"})
    assert d.ok, d.error
    (refused,) = [r for r in sink.receipts if r.tool == "delegate_to_writer"]
    assert refused.outcome == "rejected" and refused.error.code == "admission_refused" and not refused.handler_started
    assert refused.parent_receipt_id == d.receipt.receipt_id and written == []
    (peek,) = [r for r in sink.receipts if r.tool == "peek"]
    assert peek.outcome == "succeeded" and peek.parent_receipt_id == d.receipt.receipt_id
