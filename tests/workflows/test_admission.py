"""A workflow served as a tool holds no scheduler reservation while it waits (admission="per_call", the
default): its tool steps are admitted one by one, linked to its receipt; admission="run" keeps the barrier."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.workflows import WorkflowDefinitionError, llm_step, pipe, tool_step

pytestmark = pytest.mark.anyio


def _registry() -> tuple[ToolRegistry, MemoryJournalSink, list[str]]:
    written: list[str] = []

    async def put(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        written.append(p["key"])
        return {"key": p["key"]}

    sink = MemoryJournalSink()
    reg = ToolRegistry([define_tool(name="put", description="a write", handler=put, capability={"effect": "write"},
                                    input_schema={"type": "object", "properties": {"key": {"type": "string"}},
                                                  "required": ["key"]})], sink=sink)
    return reg, sink, written


def _waiting_model() -> tuple[ScriptedAdapter, anyio.Event, anyio.Event]:
    thinking, answer = anyio.Event(), anyio.Event()

    async def think(messages: Any, tools: Any) -> str:
        thinking.set()
        await answer.wait()
        return "from-model"

    return ScriptedAdapter([think]), thinking, answer


async def test_a_workflow_waiting_on_its_model_holds_no_barrier_and_its_steps_are_admitted_and_linked() -> None:
    reg, sink, written = _registry()
    model, thinking, answer = _waiting_model()
    wf = pipe(tool_step("put", {"key": "before"}), llm_step("say something", adapter=model),
              tool_step("put", lambda text: {"key": text}), name="w")
    reg.register(wf.as_tool("w", registry=reg))  # unclassified: admitted exclusive, like any such tool
    out: dict[str, Any] = {}

    async def call() -> None:
        out["w"] = await reg.execute_detailed("w", {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            await thinking.wait()
        assert not reg.executor.scheduler.running_exclusive  # nothing held while the model thinks
        with anyio.fail_after(20):  # another write is admitted meanwhile (before: queued behind the workflow)
            other = await reg.execute_detailed("put", {"key": "other"})
        assert other.ok and written == ["before", "other"]
        answer.set()
    w = out["w"]
    assert w.ok, w.error
    assert written == ["before", "other", "from-model"]
    steps = [r for r in sink.receipts if r.tool == "put" and r.parent_receipt_id is not None]
    assert len(steps) == 2 and all(r.parent_receipt_id == w.receipt.receipt_id for r in steps)
    assert reg.executor.scheduler.running_shared == 0 and not reg.executor.scheduler.running_exclusive


async def test_admission_run_keeps_the_barrier_for_the_whole_run() -> None:
    reg, sink, written = _registry()
    model, thinking, answer = _waiting_model()
    wf = pipe(llm_step("say something", adapter=model), tool_step("put", lambda text: {"key": text}), name="w")
    reg.register(wf.as_tool("w", registry=reg, admission="run"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute_detailed, "w", {})
        with anyio.fail_after(20):
            await thinking.wait()
        assert reg.executor.scheduler.running_exclusive  # held while the model thinks: the older behaviour
        answer.set()
    (step,) = [r for r in sink.receipts if r.tool == "put"]
    (call,) = [r for r in sink.receipts if r.tool == "w"]
    assert written == ["from-model"] and step.parent_receipt_id == call.receipt_id and call.outcome == "succeeded"
    assert not reg.executor.scheduler.running_exclusive


async def test_a_step_inside_a_held_run_never_releases_its_parents_barrier() -> None:
    """A workflow tool called as a step of a workflow that holds its barrier runs inside the inherited
    reservation: it is the parent's to release, not the inner workflow's."""
    reg, sink, written = _registry()
    seen: list[bool] = []

    def probe(value: Any) -> Any:
        seen.append(reg.executor.scheduler.running_exclusive)
        return value

    inner = pipe(tool_step("put", {"key": "inner"}), name="inner")
    reg.register(inner.as_tool("inner", registry=reg))
    outer = pipe(tool_step("inner"), probe, tool_step("put", {"key": "outer"}), name="outer")
    reg.register(outer.as_tool("outer", registry=reg, admission="run"))
    d = await reg.execute_detailed("outer", {})
    assert d.ok, d.error
    assert seen == [True] and written == ["inner", "outer"]  # still held after the inner workflow finished


def test_an_unknown_admission_is_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="admission must be 'per_call' or 'run'"):
        pipe(tool_step("put"), name="w").as_tool("w", admission="later")  # type: ignore[arg-type]
