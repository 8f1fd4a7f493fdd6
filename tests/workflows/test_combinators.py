"""pipe / then / parallel / branch over tool, transform and LLM steps, in memory (no journal)."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.adapters import ChatOptions, ScriptedAdapter
from openfunctions.core import Capability, MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.workflows import (
    StepFailed,
    StepOutputInvalid,
    WorkflowDefinitionError,
    llm_step,
    pipe,
    tool_step,
    transform,
)

READ = {"effect": "read", "parallel_safe": True}


def make_registry(sink=None) -> ToolRegistry:
    async def add(p, ctx):
        return {"n": p["n"] + p.get("by", 1)}

    def double(p, ctx):
        return {"n": p["n"] * 2}

    return ToolRegistry(
        [
            define_tool(name="add", description="n + by", handler=add, capability=READ,
                        input_schema={"type": "object", "properties": {"n": {"type": "integer"}, "by": {"type": "integer"}},
                                      "required": ["n"]}),
            define_tool(name="double", description="2n", handler=double, capability={"effect": "write"}),
        ],
        sink=sink,
    )


@pytest.mark.anyio
async def test_pipe_then_runs_tool_and_transform_steps_in_order_with_receipts():
    sink = MemoryJournalSink()
    reg = make_registry(sink)
    wf = pipe(tool_step("add"), registry=reg).then(tool_step("double")).then(lambda r: r["n"] + 0.5)
    assert await wf.run({"n": 1}) == 4.5
    # each tool step went through the executor: one receipt each, in order
    assert [r.tool for r in sink.receipts] == ["add", "double"]
    assert all(r.outcome == "succeeded" for r in sink.receipts)


@pytest.mark.anyio
async def test_tool_step_params_constant_or_built_from_the_input():
    reg = make_registry()
    wf = pipe(tool_step("add", {"n": 10, "by": 5}), tool_step("add", lambda r: {"n": r["n"], "by": 100}), registry=reg)
    assert await wf.run(None) == {"n": 115}


@pytest.mark.anyio
async def test_builder_is_immutable_and_a_prefix_can_be_extended_twice():
    reg = make_registry()
    base = pipe(tool_step("add"), registry=reg)
    a = base.then(transform(lambda r: "a", name="to_a"))
    b = base.then(transform(lambda r: "b", name="to_b"))
    assert (await a.run({"n": 0}), await b.run({"n": 0}), await base.run({"n": 0})) == ("a", "b", {"n": 1})
    # the digest covers the steps' kinds and names (not a function's code: see the replay rules)
    assert a.digest != b.digest


@pytest.mark.anyio
async def test_parallel_runs_branches_concurrently_and_gathers_results_in_order():
    both_running = anyio.Event()
    arrived: list[str] = []

    def gate(tag):
        async def step(x):
            arrived.append(tag)
            if len(arrived) == 2:
                both_running.set()
            await both_running.wait()  # neither finishes until both have started: proof they overlap
            return f"{tag}:{x}"
        return step

    async def slow_first(x):
        await both_running.wait()
        await anyio.sleep(0)  # let the second branch finish first
        return "first"

    wf = pipe(lambda x: x + 1).parallel(gate("a"), gate("b"), slow_first)
    assert await wf.run(1) == ["a:2", "b:2", "first"]


@pytest.mark.anyio
async def test_parallel_failure_cancels_the_siblings_and_fails_with_the_first_error():
    sink = MemoryJournalSink()
    sibling_started = anyio.Event()
    sibling_cancelled = anyio.Event()

    async def hang(p, ctx):
        sibling_started.set()
        try:
            await anyio.sleep_forever()
        finally:
            sibling_cancelled.set()

    reg = ToolRegistry([define_tool(name="hang", description="waits", handler=hang, capability=READ)], sink=sink)

    async def fail(x):
        await sibling_started.wait()
        raise ValueError("boom in branch 1")

    wf = pipe(registry=reg).parallel(tool_step("hang"), fail)
    with pytest.raises(StepFailed) as ei:
        await wf.run({})
    assert ei.value.details["step"] == "0.1"
    assert "boom in branch 1" in ei.value.message
    assert sibling_cancelled.is_set()
    [receipt] = sink.receipts
    assert receipt.tool == "hang" and receipt.outcome == "cancelled"


@pytest.mark.anyio
async def test_branch_takes_one_side_and_none_passes_through():
    reg = make_registry()
    wf = pipe(tool_step("add"), registry=reg).branch(lambda r: r["n"] > 5, tool_step("double"), lambda r: "small")
    assert await wf.run({"n": 10}) == {"n": 22}
    assert await wf.run({"n": 1}) == "small"
    passthrough = pipe(lambda x: x).branch(lambda x: x > 0, None, lambda x: -x)
    assert await passthrough.run(3) == 3
    assert await passthrough.run(-3) == 3


@pytest.mark.anyio
async def test_nested_workflows_and_plain_tool_definitions_are_steps():
    reg = make_registry()
    inner = pipe(tool_step("add"), tool_step("double"))
    wf = pipe(inner, reg.get("add"), registry=reg)
    assert await wf.run({"n": 1}) == {"n": 5}
    assert wf.describe()[0]["kind"] == "pipe"


@pytest.mark.anyio
async def test_cancelling_a_run_cancels_the_running_tool_step():
    entered = anyio.Event()
    cancelled = anyio.Event()
    sink = MemoryJournalSink()

    async def hang(p, ctx):
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    reg = ToolRegistry([define_tool(name="hang", description="waits", handler=hang)], sink=sink)
    wf = pipe(tool_step("hang"), lambda r: pytest.fail("a step after a cancelled one ran"), registry=reg)
    async with anyio.create_task_group() as tg:
        tg.start_soon(wf.run, {})
        await entered.wait()
        tg.cancel_scope.cancel()
    assert cancelled.is_set()
    assert [r.outcome for r in sink.receipts] == ["cancelled"]


@pytest.mark.anyio
async def test_llm_step_sends_the_prompt_and_validates_the_output_schema():
    model = ScriptedAdapter(['```json\n{"title": "Hi"}\n```', "plain words"])
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    opts = ChatOptions(max_tokens=64, temperature=0.0)
    wf = pipe(llm_step("Title for {input}", system="be brief", output_schema=schema, options=opts), adapter=model).then(
        llm_step(lambda r: f"explain {r['title']}")
    )
    assert await wf.run({"doc": 1}) == "plain words"
    (first, tools, used), (second, _, _) = model.calls
    assert [(m.role, m.content) for m in first] == [("system", "be brief"), ("user", 'Title for {"doc": 1}')]
    assert tools == [] and used == opts  # an LLM step offers no tools
    assert second[-1].content == "explain Hi"


@pytest.mark.anyio
async def test_llm_step_reply_not_matching_the_schema_fails_naming_the_step():
    schema = {"type": "object", "required": ["title"]}
    with pytest.raises(StepOutputInvalid, match=r"step 0 \(llm\).*not JSON"):
        await pipe(llm_step("x", output_schema=schema), adapter=ScriptedAdapter(["no json here"])).run(None)
    with pytest.raises(StepOutputInvalid, match=r'does not match the output schema: \$: "title" is a required property'):
        await pipe(llm_step("x", output_schema=schema), adapter=ScriptedAdapter(['{"other": 1}'])).run(None)
    with pytest.raises(StepOutputInvalid, match="has no text"):
        await pipe(llm_step("x"), adapter=ScriptedAdapter([{"tool": "t", "arguments": {}}])).run(None)
    with pytest.raises(WorkflowDefinitionError, match="no adapter"):
        await pipe(llm_step("x")).run(None)


@pytest.mark.anyio
async def test_a_failing_model_fails_the_llm_step_with_the_adapters_error_code():
    from openfunctions.adapters import RateLimited

    with pytest.raises(StepFailed) as ei:
        await pipe(llm_step("x", name="ask"), adapter=ScriptedAdapter([RateLimited("slow down")])).run(None)
    assert ei.value.details == {"step": "0", "name": "ask", "cause": RateLimited.code}
    assert "slow down" in ei.value.message


@pytest.mark.anyio
async def test_a_step_returning_non_json_data_fails_naming_the_step_and_the_path():
    wf = pipe(lambda x: {"ok": [1, {2, 3}]}, name="bad")
    with pytest.raises(StepOutputInvalid) as ei:
        await wf.run(None)
    assert ei.value.details["step"] == "0"
    assert "$.ok[1]" in ei.value.message
    with pytest.raises(StepOutputInvalid, match="NaN|nan"):
        await pipe(lambda x: float("nan")).run(None)


@pytest.mark.anyio
async def test_tool_step_failures_name_the_step_tool_and_receipt():
    reg = make_registry()
    with pytest.raises(StepFailed, match=r"step 1 \(nope\): unknown tool 'nope'"):
        await pipe(tool_step("add"), tool_step("nope"), registry=reg).run({"n": 1})
    with pytest.raises(StepFailed) as ei:
        await pipe(tool_step("add"), registry=reg).run({"n": "one"})
    assert ei.value.details["cause"] == "invalid_params" and ei.value.details["receipt_id"].startswith("rcpt_")
    with pytest.raises(WorkflowDefinitionError, match="no registry"):
        await pipe(tool_step("add")).run({"n": 1})


def test_bad_definitions_are_refused_at_build_time():
    with pytest.raises(WorkflowDefinitionError):
        pipe(42)
    with pytest.raises(WorkflowDefinitionError):
        tool_step("bad name!")
    with pytest.raises(WorkflowDefinitionError):
        pipe().parallel()
    with pytest.raises(WorkflowDefinitionError):
        pipe(name="../etc")
    with pytest.raises(WorkflowDefinitionError):
        llm_step("x", output_schema={"type": "nonsense"})
    with pytest.raises(WorkflowDefinitionError):
        transform("not callable")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_workflow_is_a_tool_its_steps_are_child_executions():
    sink = MemoryJournalSink()
    reg = make_registry(sink)
    wf = pipe(tool_step("add"), tool_step("double"), name="add_then_double")
    # Unclassified: the workflow tool runs exclusively; its exclusive 'double' step must not wait for it.
    reg.register(wf.as_tool("add_then_double", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                            registry=reg))
    detailed = await reg.execute_detailed("add_then_double", {"n": 2})
    assert detailed.ok, detailed.error
    assert detailed.result.structured == {"n": 6}
    parent = detailed.receipt.receipt_id
    by_tool = {r.tool: r for r in sink.receipts}
    assert by_tool["add"].parent_receipt_id == parent and by_tool["double"].parent_receipt_id == parent
    # a failing step becomes the tool's error, with the step's error code
    bad = await reg.execute_detailed("add_then_double", {"n": 2, "by": "x"})
    assert bad.error is not None and bad.error.code == "workflow_step_failed" and bad.receipt.outcome == "failed"
    assert "step 0 (add): tool 'add' rejected" in bad.error.message
    wf_fail = pipe(lambda x: 1 / 0, name="div").as_tool("div")
    reg.register(wf_fail)
    failed = await reg.execute_detailed("div", {})
    assert failed.error is not None and failed.error.code == "workflow_step_failed"
    assert "ZeroDivisionError" in failed.error.message


@pytest.mark.anyio
async def test_a_read_only_workflow_tool_cannot_run_a_write_step():
    reg = make_registry()
    reg.register(pipe(tool_step("double"), name="w").as_tool("w", registry=reg, capability=Capability(**READ)))
    d = await reg.execute_detailed("w", {"n": 1})
    assert d.error is not None and "admission_refused" in d.error.message + str(d.error.details)
