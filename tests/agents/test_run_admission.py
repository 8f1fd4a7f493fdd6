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
