"""Agents served over MCP think with a 2026-07-28 client's model: each sampling request comes back as an
InputRequiredResult and the client's retry resumes the run (servers/_input_required.py).

The official SDK client, in process, on its default protocol; its sampling callback plays the model (scripted).
The bad-state tests drive the retries by hand (``session.call_tool(..., allow_input_required=True)``).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from openfunctions.agents import AgentRuntime, define_agent
from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.servers import RECEIPT_META_KEY, create_mcp_server

pytestmark = pytest.mark.anyio
FACTS = {"paris": "Paris is the capital of France.", "rome": "Rome is the capital of Italy."}
TOOLS_CAP = types.SamplingCapability(tools=types.SamplingToolsCapability())

lookup = define_tool(
    name="lookup", description="Look up a fact by key",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    handler=lambda p, c: {"fact": FACTS.get(p["key"], "unknown")},
    capability={"effect": "read", "parallel_safe": True},
)
written: list[str] = []


def _note(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    written.append(params["text"])
    return {"written": True}


note = define_tool(
    name="note", description="Write a note",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    handler=_note, capability={"effect": "write"},
)


class HostModel:
    """The client's model, scripted: each item answers one sampling request (a str: text; a tuple: a tool call)."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[types.CreateMessageRequestParams] = []
        self.keys: list[Any] = []

    async def __call__(self, ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        self.requests.append(params)
        self.keys.append(ctx.request_id)  # the InputRequiredResult's key for this request
        item = self.script.pop(0)
        if isinstance(item, str):
            return types.CreateMessageResult(role="assistant", model="host-model-7",
                                             content=types.TextContent(type="text", text=item), stop_reason="endTurn")
        name, args = item
        return types.CreateMessageResultWithTools(
            role="assistant", model="host-model-7", stop_reason="toolUse",
            content=[types.ToolUseContent(type="tool_use", id=f"tu{len(self.requests)}", name=name, input=args)])


def served(*, sampling_timeout_s: float | None = None, **server_options: Any) -> tuple[Any, AgentRuntime, MemoryJournalSink]:
    reg = ToolRegistry([note])
    sink = MemoryJournalSink()
    reg.executor.add_sink(sink)
    runtime = AgentRuntime(reg)
    limits = {"sampling_timeout_s": sampling_timeout_s} if sampling_timeout_s is not None else None
    runtime.register(define_agent("researcher", "You look facts up.", tools=[lookup], limits=limits))
    server = create_mcp_server(reg, name="t", version="1", **server_options)
    return server, runtime, sink


def text_reply(text: str) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text=text),
                                     stop_reason="endTurn")


async def test_agent_samples_three_rounds_with_tool_calls_between_on_the_default_protocol() -> None:
    server, runtime, sink = served(principal="alice")
    model = HostModel([("lookup", {"key": "paris"}), ("lookup", {"key": "rome"}), "Paris, and Rome."])
    async with server, Client(server.lowlevel, sampling_callback=model, sampling_capabilities=TOOLS_CAP) as c:
        assert c.protocol_version == "2026-07-28"  # the SDK's default: no server-to-client requests
        result = await c.call_tool("agent_researcher", {"task": "Capitals of France and Italy?"})
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload["text"] == "Paris, and Rome." and payload["status"] == "completed" and payload["rounds"] == 3
    # Each request came embedded in an InputRequiredResult, under the server's key (no server->client request).
    assert model.keys == ["sampling-0", "sampling-1", "sampling-2"]
    # The model saw its tools, then each tool's result before the next round.
    assert [t.name for t in model.requests[0].tools] == ["lookup"]
    last = model.requests[2].messages[-1].content
    last = last if isinstance(last, list) else [last]
    assert last[0].type == "tool_result" and "Rome is the capital" in last[0].content[0].text
    # The run record and the receipts: two inner calls, each a child of the agent call's receipt.
    receipt = result.meta[RECEIPT_META_KEY]
    assert receipt["tool"] == "agent_researcher" and receipt["outcome"] == "succeeded" and receipt["principal"] == "alice"
    run = runtime.runs.get(payload["run_id"])
    assert run is not None and run.status == "completed" and [r["model"] for r in run.rounds] == ["host-model-7"] * 3
    inner = [call["receipt_id"] for r in run.rounds for call in r["tool_calls"]]
    assert len(inner) == 2 and run.finished["receipts"] == inner
    by_id = {r.receipt_id: r for r in sink.receipts}
    assert all(by_id[i].parent_receipt_id == receipt["receipt_id"] and by_id[i].outcome == "succeeded" for i in inner)
    assert run.started["parent_receipt_id"] == receipt["receipt_id"]
    # Nothing is left behind: no suspended call, nothing in flight.
    assert server.input_required.suspended == 0 and server.in_flight == 0


async def test_a_plain_tool_that_samples_gets_the_clients_model_too() -> None:
    from openfunctions.adapters import Message, SamplingAdapter

    async def ask(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        reply = await SamplingAdapter.from_context(ctx).chat([Message.user(params["q"])])
        return {"answer": reply.text}

    reg = ToolRegistry([define_tool(name="ask_host", description="Ask the host's model",
                                    input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
                                    handler=ask)])
    server = create_mcp_server(reg, name="t", version="1")
    model = HostModel(["42"])
    async with server, Client(server.lowlevel, sampling_callback=model) as c:
        result = await c.call_tool("ask_host", {"q": "answer?"})
    assert not result.is_error and result.structured_content == {"answer": "42"}
    assert model.keys == ["sampling-0"] and model.requests[0].tools is None  # no sampling.tools declared: text-only
    assert server.input_required.suspended == 0 and server.in_flight == 0


async def _first_leg(c: Client, task: str = "Capital of France?") -> types.InputRequiredResult:
    first = await c.session.call_tool("agent_researcher", {"task": task}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult), first
    assert list(first.input_requests) == ["sampling-0"]
    assert first.input_requests["sampling-0"].method == "sampling/createMessage"
    return first


def _code(exc: MCPError) -> str:
    return (exc.error.data or {}).get("code")


async def test_bad_states_each_get_their_own_error_and_the_run_still_completes() -> None:
    server, runtime, _ = served(principal="alice")
    async with server, Client(server.lowlevel, sampling_callback=HostModel([])) as c:
        first = await _first_leg(c)
        state = first.request_state
        assert state.startswith("of:")
        instance, _, token = state.removeprefix("of:").partition(":")
        answer = {"sampling-0": text_reply("Paris.")}

        async def retry(**kw: Any) -> Any:
            args = kw.pop("arguments", {"task": "Capital of France?"})
            return await c.session.call_tool("agent_researcher", args, allow_input_required=True, **kw)

        cases = {
            "request_state_invalid": {"request_state": f"of:{instance}:{token[:-4]}AAAA", "input_responses": answer},
            "request_state_other_instance": {"request_state": f"of:i0000:{token}", "input_responses": answer},
            "request_state_mismatch": {"request_state": state, "input_responses": answer, "arguments": {"task": "Rome?"}},
            "input_responses_invalid": {"request_state": state, "input_responses": {"sampling-9": text_reply("x")}},
        }
        for code, kw in cases.items():
            with pytest.raises(MCPError) as caught:
                await retry(**kw)
            assert caught.value.error.code == types.INVALID_PARAMS and _code(caught.value) == code, (code, caught.value)
        # A token this server sealed but whose time is up, and one naming a call it does not know.
        codec = server.input_required._codec
        expired = f"of:{instance}:{codec.seal(json.dumps({'c': 'x', 'l': 1, 'exp': 1.0}).encode())}"
        unknown = f"of:{instance}:{codec.seal(json.dumps({'c': 'nope', 'l': 1, 'exp': 4e9}).encode())}"
        for code, bad in (("request_state_expired", expired), ("request_state_unknown", unknown)):
            with pytest.raises(MCPError) as caught:
                await retry(request_state=bad, input_responses=answer)
            assert _code(caught.value) == code
        # Another principal's retry of a real state: told exactly what an unknown state is told.
        server.principal = "bob"
        with pytest.raises(MCPError) as caught:
            await retry(request_state=state, input_responses=answer)
        assert _code(caught.value) == "request_state_unknown"
        server.principal = "alice"
        # None of that reached the run: the right retry completes it.
        done = await retry(request_state=state, input_responses=answer)
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
        assert done.structured_content["text"] == "Paris." and done.structured_content["rounds"] == 1
        # The same state once more: the call is over and its result was delivered.
        with pytest.raises(MCPError) as caught:
            await retry(request_state=state, input_responses=answer)
        assert _code(caught.value) == "request_state_unknown"
    assert runtime.runs.get(done.structured_content["run_id"]).status == "completed"


async def test_an_older_legs_state_is_stale() -> None:
    server, runtime, _ = served()
    async with server, Client(server.lowlevel, sampling_callback=HostModel([])) as c:
        first = await _first_leg(c)
        second = await c.session.call_tool(
            "agent_researcher", {"task": "Capital of France?"}, allow_input_required=True, request_state=first.request_state,
            input_responses={"sampling-0": types.CreateMessageResultWithTools(
                role="assistant", model="m", stop_reason="toolUse",
                content=[types.ToolUseContent(type="tool_use", id="t1", name="lookup", input={"key": "paris"})])})
        assert isinstance(second, types.InputRequiredResult) and list(second.input_requests) == ["sampling-1"]
        with pytest.raises(MCPError) as caught:
            await c.session.call_tool("agent_researcher", {"task": "Capital of France?"}, allow_input_required=True,
                                      request_state=first.request_state,
                                      input_responses={"sampling-1": text_reply("Paris.")})
        assert _code(caught.value) == "request_state_stale"
        done = await c.session.call_tool("agent_researcher", {"task": "Capital of France?"}, allow_input_required=True,
                                         request_state=second.request_state,
                                         input_responses={"sampling-1": text_reply("Paris.")})
        assert isinstance(done, types.CallToolResult) and done.structured_content["rounds"] == 2


async def _settled(runtime: AgentRuntime) -> Any:
    with anyio.fail_after(30):
        while True:
            runs = list(runtime.runs.state.values())
            if runs and runs[0].status != "running":
                return runs[0]
            await anyio.sleep(0.01)


async def test_an_abandoned_call_ends_timeout_with_its_receipt_and_holds_nothing() -> None:
    written.clear()
    server, runtime, sink = served(sampling_timeout_s=0.2)
    async with server, Client(server.lowlevel, sampling_callback=HostModel([])) as c:
        first = await _first_leg(c)  # ... and the client never comes back
        run = await _settled(runtime)
        assert run.status == "timeout" and run.finished["error"]["code"] == "sampling_timeout"
        agent_receipt = next(r for r in sink.receipts if r.tool == "agent_researcher")
        assert agent_receipt.outcome == "failed" and agent_receipt.error.code == "sampling_timeout"
        # Nothing held: a write runs, nothing is in flight.
        with anyio.fail_after(10):
            wrote = await c.call_tool("note", {"text": "after"})
        assert not wrote.is_error and written == ["after"] and server.in_flight == 0
        # A late retry still gets the call's end, with its receipt; then the state is spent.
        late = await c.session.call_tool("agent_researcher", {"task": "Capital of France?"}, allow_input_required=True,
                                         request_state=first.request_state,
                                         input_responses={"sampling-0": text_reply("Paris.")})
        assert isinstance(late, types.CallToolResult) and late.is_error
        assert "timed out" in late.content[0].text and late.meta[RECEIPT_META_KEY]["receipt_id"] == agent_receipt.receipt_id
        assert server.input_required.suspended == 0


async def test_an_ended_calls_result_is_dropped_after_its_retention() -> None:
    server, runtime, _ = served(sampling_timeout_s=0.2)
    server.input_required.retain_s = 0.0
    async with server, Client(server.lowlevel, sampling_callback=HostModel([])) as c:
        first = await _first_leg(c)
        await _settled(runtime)
        with pytest.raises(MCPError) as caught:
            await c.session.call_tool("agent_researcher", {"task": "Capital of France?"}, allow_input_required=True,
                                      request_state=first.request_state,
                                      input_responses={"sampling-0": text_reply("Paris.")})
    assert _code(caught.value) == "request_state_unknown" and "Call the tool again" in caught.value.error.message
    assert server.input_required.suspended == 0


async def test_closing_the_server_cancels_a_call_waiting_for_its_client() -> None:
    server, runtime, sink = served(close_timeout=0.1)
    async with Client(server.lowlevel, sampling_callback=HostModel([])) as c:
        await server.start()
        await _first_leg(c)
        await server.close()
    run = await _settled(runtime)
    assert run.status == "cancelled" and server.in_flight == 0
    assert next(r for r in sink.receipts if r.tool == "agent_researcher").outcome == "cancelled"


async def test_cancelling_the_waiting_request_cancels_the_run() -> None:
    started = anyio.Event()

    async def block(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        return {}

    blocker = define_tool(name="block", description="Block", input_schema={"type": "object"}, handler=block,
                          capability={"effect": "read", "parallel_safe": True})
    reg = ToolRegistry()
    runtime = AgentRuntime(reg)
    runtime.register(define_agent("waiter", "Wait.", tools=[blocker]))
    server = create_mcp_server(reg, name="t", version="1")
    model = HostModel([("block", {})])
    async with server, Client(server.lowlevel, sampling_callback=model, sampling_capabilities=TOOLS_CAP) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "agent_waiter", {"task": "wait"})
            with anyio.fail_after(30):
                await started.wait()  # the retry that answered sampling-0 now waits while the tool runs
            tg.cancel_scope.cancel()
        run = await _settled(runtime)
        assert run.status == "cancelled" and len(model.requests) == 1
        with anyio.fail_after(30):
            while server.in_flight:
                await anyio.sleep(0.01)
        assert server.input_required.suspended == 0


async def test_a_parallel_crews_concurrent_requests_all_reach_the_client() -> None:
    from openfunctions.agents import define_crew

    reg = ToolRegistry()
    runtime = AgentRuntime(reg)
    france = define_agent("france", "You know France.", tools=[lookup])
    italy = define_agent("italy", "You know Italy.", tools=[lookup])
    runtime.register_crew(define_crew("pair", [france, italy], mode="parallel"))
    server = create_mcp_server(reg, name="t", version="1")
    seen: list[tuple[Any, str]] = []
    legs: list[list[str]] = []

    async def host(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        who = "france" if "France" in params.system_prompt else "italy"
        seen.append((ctx.request_id, who))
        last = params.messages[-1].content
        if isinstance(last, list) and last[0].type == "tool_result":
            return text_reply(last[0].content[0].text)
        return types.CreateMessageResultWithTools(
            role="assistant", model="m", stop_reason="toolUse",
            content=[types.ToolUseContent(type="tool_use", id="t1", name="lookup",
                                          input={"key": "paris" if who == "france" else "rome"})])

    async with server, Client(server.lowlevel, sampling_callback=host, sampling_capabilities=TOOLS_CAP) as c:
        step = await c.session.call_tool("crew_pair", {"task": "Your capital?"}, allow_input_required=True)
        while isinstance(step, types.InputRequiredResult):
            legs.append(sorted(step.input_requests))
            answers = {k: await host(type("Ctx", (), {"request_id": k})(), r.params) for k, r in step.input_requests.items()}
            step = await c.session.call_tool("crew_pair", {"task": "Your capital?"}, allow_input_required=True,
                                             input_responses=answers, request_state=step.request_state)
    assert not step.is_error, step.content
    assert "Paris is the capital" in step.structured_content["text"] and "Rome is the capital" in step.structured_content["text"]
    # Four requests (two per agent), each under its own key, each answered once, whichever leg carried it.
    keys = [k for k, _ in seen]
    assert sorted(keys) == ["sampling-0", "sampling-1", "sampling-2", "sampling-3"] and sorted(sum(legs, [])) == sorted(keys)
    assert sorted(who for _, who in seen) == ["france", "france", "italy", "italy"]
    assert all(r.status == "completed" for r in runtime.runs.state.values()) and len(runtime.runs.state) == 2
