"""The agent loop over a real registry, executor and journal sink; only the model is scripted."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.adapters import AdapterError, ScriptedAdapter
from openfunctions.agents import (
    AgentDefinitionError,
    AgentRuntime,
    MemoryRunLog,
    define_agent,
    define_crew,
    run_agent,
)
from openfunctions.core import MemoryJournalSink, ToolError, ToolRegistry, define_tool

pytestmark = pytest.mark.anyio

READ = {"effect": "read", "parallel_safe": True}


def add_tool():
    return define_tool(
        name="add", description="add two integers",
        input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                      "required": ["a", "b"], "additionalProperties": False},
        handler=lambda p, c: {"sum": p["a"] + p["b"]}, capability=READ, tags=("math",),
    )


def fail_tool():
    def boom(p, c):
        raise ToolError("the disk is full", effect_happened=False)

    return define_tool(name="save", description="save", handler=boom, capability={"effect": "write"}, tags=("io",))


@pytest.fixture
def setup():
    sink = MemoryJournalSink()
    reg = ToolRegistry([add_tool(), fail_tool()], sink=sink)
    return reg, sink, MemoryRunLog()


async def test_completed_run_records_everything(setup) -> None:
    reg, sink, runs = setup
    agent = define_agent("calc", "You add.", tools=["add"],
                         adapter=ScriptedAdapter([{"tool": "add", "arguments": {"a": 2, "b": 3}}, "5"]))
    r = await run_agent(agent, "2+3?", registry=reg, runs=runs)
    assert (r.status, r.text, r.rounds) == ("completed", "5", 2)
    by_tool = {x.tool: x for x in sink.receipts}
    assert by_tool["add"].parent_receipt_id == r.receipt.receipt_id == by_tool["agent_calc"].receipt_id
    rec = runs.get(r.run_id)
    assert rec.started["tools"] == [{"name": "add", "spec_sha256": reg.get("add").spec_sha256}]
    assert rec.started["parent_receipt_id"] == r.receipt.receipt_id
    assert rec.finished["receipts"] == [by_tool["add"].receipt_id] and len(rec.claims) == 1
    # What the model saw: its filtered tools only, and the tool's result in the second round.
    calls = agent.adapter.calls
    assert calls[0][1] == ["add"] and calls[1][0][-1].role == "tool" and '"sum": 5' in calls[1][0][-1].content


async def test_filtered_registry_by_tags_and_exclude(setup) -> None:
    reg, _, runs = setup
    rt = AgentRuntime(reg, runs)
    assert [t.name for t in rt.view(define_agent("a", "x", tags=["math"], adapter=ScriptedAdapter([]))).list()] == ["add"]
    assert [t.name for t in rt.view(define_agent("b", "x", exclude=["save"], adapter=ScriptedAdapter([]))).list()] == ["add"]
    rt.register(define_agent("c", "x", adapter=ScriptedAdapter([])))
    # Other agents' tools are not in an unfiltered agent's view.
    assert "agent_c" not in [t.name for t in rt.view(define_agent("d", "x", adapter=ScriptedAdapter([]))).list()]


async def test_a_tool_outside_the_view_is_refused_and_fed_back(setup) -> None:
    reg, sink, runs = setup
    agent = define_agent("calc", "You add.", tools=["add"],
                         adapter=ScriptedAdapter([{"tool": "save"}, "gave up"]))
    r = await run_agent(agent, "save it", registry=reg, runs=runs)
    assert r.status == "completed" and r.receipts == []
    fed = agent.adapter.calls[1][0][-1]
    assert fed.is_error and "unknown tool 'save'" in fed.content and "add" in fed.content
    assert runs.get(r.run_id).rounds[0]["tool_calls"][0]["outcome"] == "not_found"
    assert not [x for x in sink.receipts if x.tool == "save"]  # it never reached a handler


async def test_tool_failures_and_bad_arguments_are_fed_back_with_receipts(setup) -> None:
    reg, sink, runs = setup
    agent = define_agent("w", "You save.", adapter=ScriptedAdapter([
        {"tool_calls": [{"name": "save", "arguments": {}}, {"name": "add", "arguments": {"a": "x"}}]}, "could not"]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    assert r.status == "completed" and len(r.receipts) == 2
    outcomes = [(c["name"], c["outcome"]) for c in runs.get(r.run_id).rounds[0]["tool_calls"]]
    assert outcomes == [("save", "failed"), ("add", "rejected")]
    msgs = agent.adapter.calls[1][0]
    assert "the disk is full" in msgs[-2].content and msgs[-1].is_error


async def test_max_rounds_is_its_own_status(setup) -> None:
    reg, _, runs = setup
    agent = define_agent("loop", "x", tools=["add"], max_rounds=2,
                         adapter=ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 1}}] * 2))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    assert r.status == "max_rounds" and r.rounds == 2 and len(r.receipts) == 2
    assert r.receipt.outcome == "failed" and r.receipt.error.code == "agent_max_rounds"
    assert runs.get(r.run_id).finished["status"] == "max_rounds"


async def test_adapter_failure_is_failed_with_its_code(setup) -> None:
    reg, _, runs = setup
    agent = define_agent("x", "x", adapter=ScriptedAdapter([AdapterError("provider exploded")]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    assert r.status == "failed" and r.error == {"code": "adapter_error", "message": "provider exploded"}
    assert r.receipt.error.code == "adapter_error" and runs.get(r.run_id).status == "failed"


async def test_no_model_outside_mcp_fails_clearly(setup) -> None:
    reg, _, runs = setup
    r = await run_agent(define_agent("x", "x"), "go", registry=reg, runs=runs)
    assert r.status == "failed" and r.error["code"] == "sampling_unavailable"
    assert "did not arrive over MCP" in r.error["message"]


async def test_tool_call_limit(setup) -> None:
    reg, _, runs = setup
    agent = define_agent("x", "x", tools=["add"], limits={"max_tool_calls": 1}, adapter=ScriptedAdapter(
        [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}, {"name": "add", "arguments": {"a": 1, "b": 1}}]}]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    assert r.status == "failed" and r.error["code"] == "tool_call_limit" and len(r.receipts) == 1


async def test_cancellation_is_recorded_and_propagates(setup) -> None:
    reg, sink, runs = setup
    entered, never = anyio.Event(), anyio.Event()

    async def think(msgs, tools):
        entered.set()
        await never.wait()

    agent = define_agent("slow", "x", adapter=ScriptedAdapter([think]))
    async with anyio.create_task_group() as tg:
        async def go():
            await run_agent(agent, "go", registry=reg, runs=runs)
        tg.start_soon(go)
        await entered.wait()
        tg.cancel_scope.cancel()
    (run,) = runs.state.values()
    assert run.status == "cancelled"
    assert [x.outcome for x in sink.receipts if x.tool == "agent_slow"] == ["cancelled"]


async def test_structured_output_through_the_extraction_tool(setup) -> None:
    reg, sink, runs = setup
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    agent = define_agent("x", "x", tools=["add"], output_schema=schema, adapter=ScriptedAdapter([
        "it is 5",                                              # text: reminded to use the tool
        {"tool": "submit_output", "arguments": {"answer": "five"}},  # invalid: fed back
        {"tool": "submit_output", "arguments": {"answer": 5}},
    ]))
    r = await run_agent(agent, "2+3", registry=reg, runs=runs)
    assert r.status == "completed" and r.output == {"answer": 5} and r.rounds == 3
    assert [x.outcome for x in sink.receipts if x.tool == "submit_output"] == ["rejected", "succeeded"]
    assert "submit_output" in agent.adapter.calls[0][1]


async def test_read_only_agent_cannot_delegate_to_a_writer(setup) -> None:
    reg, sink, runs = setup
    writer = define_agent("writer", "x", tools=["save"], adapter=ScriptedAdapter(["never runs"]))
    helper = define_agent("helper", "x", tools=["add"], adapter=ScriptedAdapter(["2"]))
    boss = define_agent("boss", "x", tools=["add"], delegates=[writer, helper], adapter=ScriptedAdapter([
        {"tool": "delegate_to_writer", "arguments": {"task": "save"}},
        {"tool": "delegate_to_helper", "arguments": {"task": "1+1"}},
        "done",
    ]))
    rt = AgentRuntime(reg, runs)
    assert rt.agent_tool(boss).schedule_class == "shared"  # only reads: served as a read
    r = await rt.run(boss, "go")
    assert r.status == "completed"
    d = [x for x in sink.receipts if x.tool == "delegate_to_writer"]
    assert len(d) == 1 and d[0].outcome == "rejected" and d[0].error.code == "admission_refused"
    assert d[0].parent_receipt_id == r.receipt.receipt_id and not d[0].handler_started
    assert writer.adapter.remaining == 1  # the writer never ran
    h = [x for x in sink.receipts if x.tool == "delegate_to_helper"][0]
    assert h.outcome == "succeeded"
    child = next(s for s in runs.state.values() if s.agent == "helper")
    assert child.started["parent_run_id"] == r.run_id and child.started["parent_receipt_id"] == h.receipt_id


async def test_writer_agent_can_delegate_to_writer_with_narrowed_scopes(setup) -> None:
    reg, sink, runs = setup
    seen = []
    probe = define_tool(name="whoami", description="scopes", handler=lambda p, c: (seen.append(c.scopes), "ok")[1],
                        capability={"effect": "write"})
    reg.register(probe)
    child = define_agent("child", "x", tools=["whoami"], scopes=["a"], adapter=ScriptedAdapter([{"tool": "whoami"}, "ok"]))
    parent = define_agent("parent", "x", tools=["save"], delegates=[child],
                          adapter=ScriptedAdapter([{"tool": "delegate_to_child", "arguments": {"task": "t"}}, "ok"]))
    from openfunctions.core import ToolExecutionContext

    r = await AgentRuntime(reg, runs).run(parent, "go", ToolExecutionContext(scopes=frozenset({"a", "b"})))
    assert r.status == "completed" and seen == [frozenset({"a"})]


async def test_parallel_crew_runs_all_on_the_same_task(setup) -> None:
    reg, _, runs = setup
    both_in = [anyio.Event(), anyio.Event()]

    def agent(i: int):
        async def answer(msgs, tools):
            both_in[i].set()
            await both_in[1 - i].wait()  # each waits for the other: only concurrent runs finish
            return f"answer {i} to {msgs[-1].content}"

        return define_agent(f"p{i}", "x", tools=["add"], adapter=ScriptedAdapter([answer]))

    crew = define_crew("pair", [agent(0), agent(1)], mode="parallel")
    rt = AgentRuntime(reg, runs)
    tool = rt.register_crew(crew)
    with anyio.fail_after(10):
        out = await reg.execute(tool.name, {"task": "T"})
    assert out["text"] == "## p0\nanswer 0 to T\n\n## p1\nanswer 1 to T"
    assert [r["status"] for r in out["runs"]] == ["completed", "completed"]


def test_definition_errors_name_the_problem() -> None:
    with pytest.raises(AgentDefinitionError, match="name"):
        define_agent("bad name!", "x")
    with pytest.raises(AgentDefinitionError, match="instructions"):
        define_agent("a", "  ")
    with pytest.raises(AgentDefinitionError, match="not both"):
        define_agent("a", "x", adapter=ScriptedAdapter([]), model="openai:x")
    with pytest.raises(AgentDefinitionError, match="one string"):
        define_agent("a", "x", tools="add")
    with pytest.raises(AgentDefinitionError, match="positive"):
        define_agent("a", "x", max_rounds=0)
    with pytest.raises(AgentDefinitionError, match="mode"):
        define_crew("c", [define_agent("a", "x")], mode="random")


async def test_crew_delegation_child_outside_its_narrowed_authority_is_refused_with_a_receipt() -> None:
    from openfunctions.core import ScopePolicy, ToolExecutionContext

    sink = MemoryJournalSink()
    written = []
    deploy = define_tool(name="deploy", description="deploy", handler=lambda p, c: (written.append(1), "deployed")[1],
                         capability={"effect": "write", "required_scopes": ["deploy"]})
    reg = ToolRegistry([deploy, add_tool()], policy=ScopePolicy(), sink=sink)
    # The child may only read ("math"): its authority is narrowed, whatever the parent holds.
    child = define_agent("child", "x", tools=["deploy", "add"], scopes=["math"], adapter=ScriptedAdapter([
        {"tool": "deploy"}, "I could not deploy."]))
    lead = define_agent("lead", "x", tools=["deploy"], delegates=[child], adapter=ScriptedAdapter([
        {"tool": "delegate_to_child", "arguments": {"task": "deploy it"}}, "child reported"]))
    crew = define_crew("ops", [lead])
    rt = AgentRuntime(reg, MemoryRunLog())
    tool = rt.register_crew(crew)
    out = await reg.execute(tool.name, {"task": "ship"}, ToolExecutionContext(principal="op", scopes=frozenset({"deploy", "math"})))
    assert out["status"] == "completed" and written == []
    denied = [r for r in sink.receipts if r.tool == "deploy"]
    assert len(denied) == 1 and denied[0].outcome == "rejected" and denied[0].error.code == "policy_denied"
    assert "lacks scope(s) deploy" in denied[0].error.message and not denied[0].handler_started
    delegated = next(r for r in sink.receipts if r.tool == "delegate_to_child")
    assert denied[0].parent_receipt_id == delegated.receipt_id  # the refusal is the child run's call, linked to its delegation


async def test_run_timeout_ends_timeout_with_its_code(setup) -> None:
    reg, _, runs = setup
    never = anyio.Event()

    async def think(msgs, tools):
        await never.wait()

    agent = define_agent("t", "x", limits={"timeout_s": 0.05}, adapter=ScriptedAdapter([think]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    assert r.status == "timeout" and r.error["code"] == "run_timeout" and runs.get(r.run_id).status == "timeout"


async def test_model_resolves_a_provider_adapter_at_the_first_run_and_the_runtime_closes_it(setup, monkeypatch) -> None:
    reg, _, runs = setup
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    agent = define_agent("p", "x", model="openai:gpt-test")
    rt = AgentRuntime(reg, runs)
    r = await rt.run(agent, "go")
    assert r.status == "failed" and r.error["code"] == "adapter_not_configured" and "OPENAI_API_KEY" in r.error["message"]
    assert runs.get(r.run_id).started["provider"] == "unresolved"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens: connection refused (after the retries)
    r2 = await rt.run(agent, "go")
    adapter = agent._resolved["adapter"]
    assert adapter.provider == "openai" and adapter.model == "gpt-test"
    assert runs.get(r2.run_id).started["provider"] == "openai" and r2.error["code"] == "provider_unavailable"
    await rt.aclose()
    assert adapter._client is None


def test_two_different_tools_of_one_name_are_refused(setup) -> None:
    reg, _, runs = setup
    mine = define_tool(name="add", description="another add", handler=lambda p, c: 0)
    with pytest.raises(AgentDefinitionError, match="different tool of that name"):
        AgentRuntime(reg, runs).register(define_agent("x", "x", tools=[mine], adapter=ScriptedAdapter([])))


async def test_a_bug_below_the_loop_still_ends_the_record_and_a_lost_progress_channel_does_not(setup) -> None:
    from openfunctions.core import ToolExecutionContext

    reg, sink, runs = setup

    async def broken_progress(p, total, message):
        raise RuntimeError("the client went away")

    ok = define_agent("ok", "x", tools=["add"], adapter=ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, "3"]))
    r = await AgentRuntime(reg, runs).run(ok, "go", ToolExecutionContext(progress=broken_progress))
    assert r.status == "completed" and r.text == "3"

    bad = define_agent("bad", "x", adapter=ScriptedAdapter([ZeroDivisionError("boom")]))
    r2 = await AgentRuntime(reg, runs).run(bad, "go")
    run = next(s for s in runs.state.values() if s.agent == "bad")
    assert run.status == "failed" and run.finished["error"]["code"] == "agent_internal_error"
    assert r2.receipt.outcome == "failed" and r2.receipt.error.code == "tool_failed"


async def test_an_unanswered_sampling_request_ends_the_run_timeout(setup) -> None:
    """The agent's own sampling deadline wins over the runtime's; the run ends 'timeout' with its record
    and the run call's receipt, and nothing stays held."""
    from openfunctions.adapters import SAMPLER_KEY, SAMPLING_CAPABILITY_KEY
    from openfunctions.core import ToolExecutionContext

    reg, sink, runs = setup
    never = anyio.Event()

    async def silent_host(params: dict) -> dict:
        await never.wait()
        return {}

    ctx = ToolExecutionContext(metadata={SAMPLER_KEY: silent_host, SAMPLING_CAPABILITY_KEY: {}})
    agent = define_agent("s", "x", tools=["save"], limits={"sampling_timeout_s": 0.05})
    rt = AgentRuntime(reg, runs, sampling_timeout_s=3600)
    with anyio.fail_after(20):
        r = await rt.run(agent, "go", ctx)
    assert r.status == "timeout" and r.error["code"] == "sampling_timeout" and runs.get(r.run_id).status == "timeout"
    assert r.receipt.outcome == "failed" and r.receipt.error.code == "sampling_timeout"
    assert runs.get(r.run_id).started["limits"]["sampling_timeout_s"] == 0.05
    assert not reg.executor.scheduler.running_exclusive and reg.executor.scheduler.running_shared == 0
    # Without a deadline of its own the agent gets the runtime's.
    assert rt._adapter(define_agent("d", "x"), ctx).timeout_s == 3600


def test_run_deadlines_have_defaults_and_are_checked() -> None:
    from openfunctions.agents import DEFAULT_RUN_TIMEOUT_S, AgentDefinitionError, AgentLimits

    assert AgentLimits().timeout_s == DEFAULT_RUN_TIMEOUT_S == 600 and AgentLimits().sampling_timeout_s is None
    for bad in ({"timeout_s": 0}, {"sampling_timeout_s": -1}, {"timeout_s": "soon"}):
        with pytest.raises(AgentDefinitionError, match="positive number of seconds"):
            define_agent("x", "x", limits=bad)
