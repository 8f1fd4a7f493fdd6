"""An agent run's tools see ``ctx.run_id``; the runtime gets each run's result back without anything in metadata
(a run, an agent served as a tool, a crew, a workflow step)."""

from __future__ import annotations

from typing import Any

import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import RUN_ID_KEY, AgentRuntime, MemoryRunLog, RunOptions, define_agent, define_crew
from openfunctions.core import MemoryJournalSink, ToolExecutionContext, ToolRegistry, define_tool
from openfunctions.workflows import pipe, tool_step

pytestmark = pytest.mark.anyio
READ = {"effect": "read", "parallel_safe": True}


def _setup() -> tuple[ToolRegistry, list[ToolExecutionContext], MemoryRunLog]:
    seen: list[ToolExecutionContext] = []

    def look(p: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"run_id": ctx.run_id}

    reg = ToolRegistry([define_tool(name="look", description="see the context", handler=look, capability=READ)],
                       sink=MemoryJournalSink())
    return reg, seen, MemoryRunLog()


def _agent(name: str, *replies: Any) -> Any:
    return define_agent(name, "You look.", tools=["look"], adapter=ScriptedAdapter(list(replies)))


async def test_a_runs_tools_read_its_run_id_and_the_result_comes_back_without_metadata() -> None:
    reg, seen, runs = _setup()
    rt = AgentRuntime(reg, runs)
    agent = _agent("a", {"tool": "look", "arguments": {}}, "done")
    r = await rt.run(agent, "look", options=RunOptions(system="Be brief."))
    assert (r.status, r.text) == ("completed", "done") and r.receipt is not None
    assert seen[0].run_id == r.run_id
    assert dict(seen[0].metadata) == {}  # no result list, no options, no run id under a string key
    first = agent.adapter.calls[0][0][0]
    assert (first.role, first.content) == ("system", "Be brief.")  # the run's options reached the run
    assert rt._waiting == {}  # the per-call slot is gone once the call settled


async def test_a_failed_run_still_returns_its_result() -> None:
    reg, _, runs = _setup()
    agent = define_agent("a", "x", tools=["look"], max_rounds=2,
                         adapter=ScriptedAdapter([{"tool": "look", "arguments": {}}] * 2))
    r = await AgentRuntime(reg, runs).run(agent, "loop")
    assert r.status == "max_rounds" and r.run_id and r.receipt is not None and r.receipt.outcome == "failed"


async def test_the_parent_run_id_comes_from_ctx_run_id_and_the_old_key_is_still_read() -> None:
    reg, _, runs = _setup()
    rt = AgentRuntime(reg, runs)
    typed = await rt.run(_agent("a", "ok"), "x", ToolExecutionContext(run_id="run_outer"))
    legacy = await rt.run(_agent("b", "ok"), "x", ToolExecutionContext(metadata={RUN_ID_KEY: "run_legacy"}))
    assert runs.get(typed.run_id).started["parent_run_id"] == "run_outer"
    assert runs.get(legacy.run_id).started["parent_run_id"] == "run_legacy"


async def test_an_agent_served_as_a_tool_answers_with_its_payload() -> None:
    reg, _, runs = _setup()
    rt = AgentRuntime(reg, runs)
    rt.register(_agent("a", "served answer"))
    d = await reg.execute_detailed("agent_a", {"task": "x"})
    assert d.ok and d.result.structured["text"] == "served answer" and d.result.structured["status"] == "completed"
    assert rt._waiting == {}


async def test_a_crew_gets_each_members_result() -> None:
    reg, seen, runs = _setup()
    rt = AgentRuntime(reg, runs)
    crew = define_crew("pair", [_agent("m1", {"tool": "look", "arguments": {}}, "one"), _agent("m2", "two")],
                       mode="sequential")
    rt.register_crew(crew)
    d = await reg.execute_detailed("crew_pair", {"task": "go"})
    assert d.ok, d.error
    runs_out = d.result.structured["runs"]
    assert [(x["agent"], x["status"]) for x in runs_out] == [("m1", "completed"), ("m2", "completed")]
    assert d.result.structured["text"] == "two"
    assert seen[0].run_id == runs_out[0]["run_id"] and rt._waiting == {}


async def test_a_workflow_step_calling_an_agent_gets_its_answer() -> None:
    reg, _, runs = _setup()
    AgentRuntime(reg, runs).register(_agent("a", "from the agent"))
    wf = pipe(tool_step("agent_a", {"task": "x"}), name="w")
    reg.register(wf.as_tool("w", registry=reg))
    d = await reg.execute_detailed("w", {})
    assert d.ok, d.error
    assert "from the agent" in str(d.result.structured)
