"""The provider interface: define, connect, tag, context (best-effort), prompt, tool guide, health."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.core import DuplicateTool, MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.providers import (
    DOMAINS,
    ContextProvider,
    ProviderError,
    ProviderHealth,
    auto_tool_guide,
    check_provider_health,
    compose_prompt,
    connect_provider,
    context_prompt,
    define_provider,
)


class Connected:
    """A connected provider whose behaviour each test chooses."""

    def __init__(self, provider, *, tools=(), context=None, health=None):
        self.provider = provider
        self._tools = list(tools)
        self._context = context
        self._health = health
        self.closed = False

    def create_tools(self):
        return list(self._tools)

    async def build_context(self):
        c = self._context
        return await c() if callable(c) else c

    async def health(self):
        h = self._health
        return await h() if callable(h) else (h or ProviderHealth(self.provider.id, "up", tools=len(self._tools)))

    async def close(self):
        self.closed = True


def _tool(name, effect=None):
    async def handler(p, ctx):
        return {"tool": name, "principal": ctx.principal, "args": p}

    cap = {"effect": effect, "parallel_safe": effect == "read"} if effect else None
    return define_tool(name=name, description=f"{name} does a thing.\n\nLonger text.", handler=handler, capability=cap)


def _provider(pid, **kw):
    holder = {}

    async def connect(p):
        holder["c"] = Connected(p, **kw)
        return holder["c"]

    return define_provider(id=pid, name=pid.title(), domains=("tasks",), connect=connect), holder


def test_metadata_is_cheap_and_checked():
    connected = []

    async def connect(p):
        connected.append(p)
        return Connected(p)

    p = define_provider(id="exf", name="ExecuFunction", domains=("tasks", "calendar"), connect=connect)
    assert p.metadata() == {"id": "exf", "name": "ExecuFunction", "domains": ["tasks", "calendar"], "description": None}
    assert connected == []  # nothing connects at definition time
    assert set(DOMAINS) >= {"tasks", "projects", "calendar", "knowledge", "people", "organizations",
                            "codebase", "vault", "datasets", "documents"}
    with pytest.raises(ProviderError, match="unknown capability domain.*'weather'"):
        define_provider(id="x", name="x", domains=("weather",), connect=connect)
    with pytest.raises(ProviderError, match="provider id 'a b' is invalid"):
        ContextProvider(id="a b", name="x")


@pytest.mark.anyio
async def test_connect_provider_tags_tools_and_they_run_through_the_executor():
    sink = MemoryJournalSink()
    registry = ToolRegistry(sink=sink)
    p, holder = _provider("exf", tools=[_tool("exf_list_tasks", "read"), _tool("exf_add_task")])
    connected = await connect_provider(p, registry)
    assert connected is holder["c"]
    for name in ("exf_list_tasks", "exf_add_task"):
        assert set(registry.get(name).tags) >= {"context", "context:exf"}
    assert [t.name for t in registry.project(tags=["context:exf"]).list()] == ["exf_list_tasks", "exf_add_task"]
    detailed = await registry.execute_detailed("exf_add_task", {"title": "x"})
    assert detailed.ok and detailed.value["tool"] == "exf_add_task"
    assert [r.receipt_id for r in sink.receipts] == [detailed.receipt.receipt_id]


@pytest.mark.anyio
async def test_connect_provider_rolls_back_on_a_name_collision():
    registry = ToolRegistry([_tool("b")])
    p, holder = _provider("exf", tools=[_tool("a"), _tool("b")])
    with pytest.raises(DuplicateTool, match="'b'"):
        await connect_provider(p, registry)
    assert [t.name for t in registry.list()] == ["b"]  # 'a' was removed again
    assert holder["c"].closed


@pytest.mark.anyio
async def test_context_prompt_skips_a_raising_and_a_hanging_provider(caplog):
    hang_started = anyio.Event()

    async def hang():
        hang_started.set()
        await anyio.sleep_forever()

    async def boom():
        raise RuntimeError("calendar API down")

    a = Connected(define_provider(id="a", name="A", connect=None), context="Active tasks: 3")  # type: ignore[arg-type]
    b = Connected(define_provider(id="b", name="B", connect=None), context=boom)  # type: ignore[arg-type]
    c = Connected(define_provider(id="c", name="C", connect=None), context=hang)  # type: ignore[arg-type]
    d = Connected(define_provider(id="d", name="D", connect=None), context=42)  # type: ignore[arg-type]
    e = Connected(define_provider(id="e", name="E", connect=None), context="Next event: standup at 10:00")  # type: ignore[arg-type]

    class NoContext:
        provider = a.provider

    text = await context_prompt([a, b, c, d, NoContext(), e], timeout=0.5)  # type: ignore[list-item]
    assert hang_started.is_set()
    assert text == "Active tasks: 3\n\nNext event: standup at 10:00"


@pytest.mark.anyio
async def test_compose_prompt_and_auto_tool_guide():
    registry = ToolRegistry([_tool("local_tool")])
    p, _ = _provider("exf", tools=[_tool("exf_list", "read"), _tool("exf_add")])
    await connect_provider(p, registry)
    guide = auto_tool_guide(registry)
    assert guide == (
        "### exf\n"
        "- exf_add: exf_add does a thing.\n"
        "- exf_list (read-only): exf_list does a thing.\n\n"
        "### Other tools\n"
        "- local_tool: local_tool does a thing."
    )
    prompt = compose_prompt(role="Personal assistant", context="Active tasks: 3", tool_guide=guide)
    assert prompt.startswith("Personal assistant\n\n## Context\n\nActive tasks: 3\n\n## Tools\n\n### exf\n")
    assert compose_prompt(role="R", context="  ", tool_guide=None) == "R"


@pytest.mark.anyio
async def test_check_provider_health_reports_raising_and_hanging_as_down():
    async def boom():
        raise RuntimeError("token expired")

    async def hang():
        await anyio.sleep_forever()

    ok = Connected(define_provider(id="ok", name="OK", connect=None))  # type: ignore[arg-type]
    bad = Connected(define_provider(id="bad", name="Bad", connect=None), health=boom)  # type: ignore[arg-type]
    slow = Connected(define_provider(id="slow", name="Slow", connect=None), health=hang)  # type: ignore[arg-type]
    results = await check_provider_health([ok, bad, slow], timeout=0.5)
    assert [(h.provider_id, h.status) for h in results] == [("ok", "up"), ("bad", "down"), ("slow", "down")]
    assert results[1].message == "health() raised: RuntimeError: token expired"
    assert "took over 0.5 s" in (results[2].message or "")
    assert results[0].ok and not results[1].ok
