"""RunOptions: history, a per-run system prompt, an event observer and streaming for a host embedding the loop (the chat agent)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from openfunctions.adapters import Message, ScriptedAdapter
from openfunctions.agents import AgentRuntime, MemoryRunLog, RunOptions, define_agent, run_agent
from openfunctions.core import ToolRegistry, define_tool

pytestmark = pytest.mark.anyio


def registry() -> ToolRegistry:
    return ToolRegistry([define_tool(
        name="add", description="add", handler=lambda p, c: {"sum": p["a"] + p["b"]},
        input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        capability={"effect": "read", "parallel_safe": True})])


async def test_history_system_and_events_in_order() -> None:
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, "3"])
    agent = define_agent("calc", "Declared instructions.", tools=["add"], adapter=model)
    events: list[dict[str, Any]] = []

    async def observe(e: dict[str, Any]) -> None:
        events.append(e)

    runs = MemoryRunLog()
    history = [Message.user("earlier question"), Message.assistant("earlier answer")]
    r = await run_agent(agent, "1+2?", registry=registry(), runs=runs,
                        options=RunOptions(history=history, system="Per-run prompt.", on_event=observe, stream=True))
    assert r.status == "completed"
    shown = model.calls[0][0]
    assert [(m.role, m.content) for m in shown] == [("system", "Per-run prompt."), ("user", "earlier question"),
                                                    ("assistant", "earlier answer"), ("user", "1+2?")]
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "text"]
    assert events[1]["receipt_id"] == r.receipts[0] and events[1]["outcome"] == "succeeded"
    assert events[2]["text"] == "3"
    digest = "sha256:" + hashlib.sha256(b"Per-run prompt.").hexdigest()
    assert runs.get(r.run_id).started["instructions_sha256"] == digest


async def test_a_failing_observer_never_ends_the_run_and_delegates_do_not_inherit_options() -> None:
    helper_model = ScriptedAdapter(["helped"])
    helper = define_agent("helper", "Help.", tools=[], adapter=helper_model)
    boss = define_agent("boss", "Delegate.", tools=[], delegates=[helper],
                        adapter=ScriptedAdapter([{"tool": "delegate_to_helper", "arguments": {"task": "help"}}, "done"]))

    async def broken(e: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    rt = AgentRuntime(registry())
    r = await rt.run(boss, "go", options=RunOptions(history=[Message.user("old")], system="Boss prompt.",
                                                     on_event=broken))
    assert r.status == "completed" and r.text == "done"
    # The delegated run saw its own instructions and no history.
    assert [(m.role, m.content) for m in helper_model.calls[0][0]] == [("system", "Help."), ("user", "help")]
