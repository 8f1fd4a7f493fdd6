"""Agents a test server serves (``--module fixture_agents:agents``). They have no adapter:
they think with the MCP host's model (the test client's sampling callback)."""

from __future__ import annotations

from pathlib import Path

import anyio

from openfunctions.agents import define_agent, define_crew
from openfunctions.core import define_tool

FACTS = {"paris": "Paris is the capital of France.", "rome": "Rome is the capital of Italy."}

lookup = define_tool(
    name="lookup", description="Look up a fact by key",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    handler=lambda p, c: {"fact": FACTS.get(p["key"].lower(), "unknown")},
    capability={"effect": "read", "parallel_safe": True},
)


async def _note(params, ctx):
    path = Path(params["file"])
    with path.open("a") as f:
        f.write(params["text"] + "\n")
    return {"written": True}


note = define_tool(
    name="note", description="Append a line to a file",
    input_schema={"type": "object", "properties": {"file": {"type": "string"}, "text": {"type": "string"}},
                  "required": ["file", "text"]},
    handler=_note, capability={"effect": "write"},
)


async def _wait(params, ctx):
    d = Path(params["dir"])
    with (d / "invocations").open("a") as f:
        f.write("1\n")
    (d / "started").touch()
    try:
        while not (d / "release").exists():
            await anyio.sleep(0.01)
    except BaseException:
        (d / "cancelled").touch()
        raise
    return {"released": True}


wait = define_tool(
    name="wait_for_release", description="Wait until a file appears",
    input_schema={"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
    handler=_wait, capability={"effect": "write"},
)



async def _ask_host(params, ctx):
    from openfunctions.adapters import Message, SamplingAdapter

    reply = await SamplingAdapter.from_context(ctx).chat([Message.user(params["q"])])
    return {"answer": reply.text}


# A plain tool (no task support: the direct tools/call path takes it) that asks the host's model.
ask_host = define_tool(
    name="ask_host", description="Ask the host's model a question",
    input_schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    handler=_ask_host,
)

researcher = define_agent("researcher", "You look facts up and answer in one sentence.", tools=[lookup])
scribe = define_agent("scribe", "You write notes.", tools=[note])
waiter = define_agent("waiter", "You wait.", tools=[wait], max_rounds=3)
team = define_crew("team", [researcher, scribe], mode="sequential")

# A workflow served next to the agents (the workflows package's own tool form).
from openfunctions.workflows import pipe, transform  # noqa: E402

shout = pipe(transform(lambda x: {"text": x["text"].upper()}), name="shout").as_tool(
    "workflow_shout", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    output_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)

agents = [researcher, scribe, waiter, team, shout, ask_host]
