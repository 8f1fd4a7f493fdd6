"""The server API through the SDK client, in process, in both protocol eras."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.servers import RECEIPT_META_KEY, create_mcp_server

from . import fixture_tools

MODES = ["auto", "legacy"]


def make_server(**kw):
    return create_mcp_server(ToolRegistry(fixture_tools.tools), name="test-server", version="9.9.9", **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_is_exactly_what_was_registered(mode):
    server = make_server()
    async with Client(server.lowlevel, mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {t.name for t in fixture_tools.tools}
    add = listed["add"].model_dump(by_alias=True, exclude_none=True, mode="json")
    registered = fixture_tools.tools[0]
    assert add["title"] == registered.title
    assert add["description"] == registered.description
    assert add["inputSchema"] == registered.input_schema
    assert add["outputSchema"] == registered.output_schema
    assert add["annotations"] == registered.annotations.to_wire()
    assert add["_meta"] == {"dev.example/owner": "tests", "dev.example/cost": 1}
    assert "_meta" not in listed["fail"].model_dump(by_alias=True, exclude_none=True)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_call_result_payload_exact_and_receipt_only_in_meta(mode):
    server = make_server(principal="alice")
    async with Client(server.lowlevel, mode=mode) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.is_error is False
    assert result.structured_content == {"sum": 5}
    assert result.content[0].type == "text" and '"sum": 5' in result.content[0].text
    receipt = result.meta[RECEIPT_META_KEY]
    assert receipt["tool"] == "add" and receipt["outcome"] == "succeeded" and receipt["certainty"] == "known"
    assert receipt["principal"] == "alice"
    assert RECEIPT_META_KEY not in result.structured_content


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_tool_failure_is_iserror_naming_the_problem_with_receipt(mode):
    server = make_server()
    async with Client(server.lowlevel, mode=mode) as client:
        failed = await client.call_tool("fail", {})
        crashed = await client.call_tool("crash", {})
    assert failed.is_error and "disk is full" in failed.content[0].text
    assert failed.meta[RECEIPT_META_KEY]["outcome"] == "failed"
    assert failed.meta[RECEIPT_META_KEY]["certainty"] == "known"
    assert crashed.is_error and "RuntimeError" in crashed.content[0].text and "unexpected fixture crash" in crashed.content[0].text
    assert crashed.meta[RECEIPT_META_KEY]["certainty"] == "unknown"
    assert failed.structured_content is None


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_invalid_arguments_are_tool_errors_in_current_versions(mode):
    server = make_server()
    async with Client(server.lowlevel, mode=mode) as client:
        result = await client.call_tool("add", {"a": "two", "b": 3})
        version = client.protocol_version
    # 2026-07-28 (auto) and 2025-11-25 (legacy) make bad arguments a tool execution error
    assert version in ("2026-07-28", "2025-11-25")
    assert result.is_error
    assert "$.a" in result.content[0].text and "integer" in result.content[0].text
    assert result.meta[RECEIPT_META_KEY]["outcome"] == "rejected"
    assert result.meta[RECEIPT_META_KEY]["handler_started"] is False


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_is_invalid_params_with_candidates(mode):
    server = make_server()
    async with Client(server.lowlevel, mode=mode) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("ad", {})
        # the server keeps serving
        ok = await client.call_tool("add", {"a": 1, "b": 1})
    assert info.value.error.code == -32602
    assert "'ad'" in info.value.error.message and "'add'" in info.value.error.message
    assert ok.structured_content == {"sum": 2}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_progress_reaches_the_client(mode):
    server = make_server()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p, total, message):
        seen.append((p, total, message))

    async with Client(server.lowlevel, mode=mode) as client:
        result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert not result.is_error
    assert [(p, t, m) for p, t, m in seen] == [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]


def runs_until_cancelled(started: anyio.Event, cancelled: anyio.Event):
    """A handler that sets ``started``, waits forever, and sets ``cancelled`` when it is cancelled."""

    async def handler(p, ctx):
        started.set()
        try:
            await anyio.Event().wait()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    return handler


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_reaches_the_handler_and_the_receipt(mode):
    started, cancelled = anyio.Event(), anyio.Event()
    blocker = runs_until_cancelled(started, cancelled)

    sink = MemoryJournalSink()
    registry = ToolRegistry(
        [define_tool(name="block", description="blocks", handler=blocker), *fixture_tools.tools], sink=sink
    )
    server = create_mcp_server(registry, name="t", version="1")
    async with Client(server.lowlevel, mode=mode) as client:
        async with anyio.create_task_group() as tg:
            async def call():
                await client.call_tool("block", {})

            tg.start_soon(call)
            await started.wait()
            tg.cancel_scope.cancel()
        with anyio.fail_after(10):
            await cancelled.wait()
        with anyio.fail_after(10):
            while not sink.receipts:
                await anyio.sleep(0.01)
        assert sink.receipts[0].tool == "block" and sink.receipts[0].outcome == "cancelled"
        # the connection goes on serving
        after = await client.call_tool("add", {"a": 1, "b": 2})
    assert after.structured_content == {"sum": 3}


@pytest.mark.anyio
async def test_close_refuses_queued_and_lets_running_finish():
    release = anyio.Event()
    running = anyio.Event()

    async def exclusive(p, ctx):
        running.set()
        await release.wait()
        return {"done": p["n"]}

    sink = MemoryJournalSink()
    registry = ToolRegistry([define_tool(name="excl", description="exclusive", handler=exclusive)], sink=sink)
    server = create_mcp_server(registry, name="t", version="1", close_timeout=30)
    results: dict[int, object] = {}
    async with Client(server.lowlevel, mode="legacy") as client:
        async with anyio.create_task_group() as tg:
            async def call(n):
                results[n] = await client.call_tool("excl", {"n": n})

            tg.start_soon(call, 1)
            await running.wait()
            tg.start_soon(call, 2)
            while registry.executor.scheduler.queued == 0:
                await anyio.sleep(0)

            async def closer():
                await server.close()

            tg.start_soon(closer)
            while not server._closing:
                await anyio.sleep(0)
            # call 2 was queued: refused now, before call 1 finishes
            while 2 not in results:
                await anyio.sleep(0.01)
            assert 1 not in results
            release.set()
    assert results[1].structured_content == {"done": 1}
    assert results[2].is_error and "shutting down" in results[2].content[0].text
    assert results[2].meta[RECEIPT_META_KEY]["outcome"] == "cancelled"
    assert results[2].meta[RECEIPT_META_KEY]["handler_started"] is False


@pytest.mark.anyio
async def test_close_cancels_calls_that_outlive_the_timeout():
    started, cancelled = anyio.Event(), anyio.Event()
    forever = runs_until_cancelled(started, cancelled)

    registry = ToolRegistry([define_tool(name="forever", description="never ends", handler=forever)])
    server = create_mcp_server(registry, name="t", version="1", close_timeout=0.05)
    async with Client(server.lowlevel, mode="legacy") as client:
        async with anyio.create_task_group() as tg:
            out = {}

            async def call():
                out["r"] = await client.call_tool("forever", {})

            tg.start_soon(call)
            await started.wait()
            await server.close()
    assert cancelled.is_set()
    assert out["r"].is_error and "shut down" in out["r"].content[0].text


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_resources_templates_and_prompts(mode):
    server = make_server()
    server.add_resource("test://static", "static", "text/plain", lambda: "hello resource", description="a text")
    server.add_resource("test://blob", "blob", "image/png", lambda: b"\x89PNG")

    async def greet(variables):
        return f"hello {variables['who']}"

    server.add_resource_template("test://greet/{who}", "greeting", "text/plain", greet)
    server.add_prompt(
        "summarize",
        "Summarize a text",
        [{"name": "text", "description": "what to summarize", "required": True}],
        lambda args: f"Please summarize: {args['text']}",
    )
    async with Client(server.lowlevel, mode=mode) as client:
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        text = (await client.read_resource("test://static")).contents[0]
        blob = (await client.read_resource("test://blob")).contents[0]
        greeted = (await client.read_resource("test://greet/world")).contents[0]
        prompts = (await client.list_prompts()).prompts
        prompt = await client.get_prompt("summarize", {"text": "abc"})
        with pytest.raises(MCPError) as missing:
            await client.read_resource("test://nope")
        with pytest.raises(MCPError) as bad_prompt:
            await client.get_prompt("summarize", {})
    assert {r.name for r in resources} == {"static", "blob"}
    assert templates[0].uri_template == "test://greet/{who}"
    assert text.text == "hello resource"
    assert blob.blob == "iVBORw==" and blob.mime_type == "image/png"
    assert greeted.text == "hello world"
    assert prompts[0].name == "summarize" and prompts[0].arguments[0].required is True
    assert prompt.messages[0].content.text == "Please summarize: abc"
    assert "test://nope" in missing.value.error.message
    assert "text" in bad_prompt.value.error.message


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_prompt_rendering_neither_text_nor_messages_is_an_error_naming_the_prompt(mode):
    # A render returning None or a number reached the client as an anonymous internal error
    # ("Internal server error", or code 0 on a handshake-era connection).
    server = make_server()
    server.add_prompt("nothing", None, [], lambda args: None)
    server.add_prompt("number", None, [], lambda args: 42)
    async with Client(server.lowlevel, mode=mode) as client:
        with pytest.raises(MCPError) as nothing:
            await client.get_prompt("nothing", {})
        with pytest.raises(MCPError) as number:
            await client.get_prompt("number", {})
    for err, name, kind in ((nothing, "nothing", "NoneType"), (number, "number", "int")):
        assert err.value.error.code == -32603
        assert f"prompt {name!r} rendered a {kind}" in err.value.error.message
        assert err.value.error.data == {"prompt": name}


@pytest.mark.anyio
async def test_start_attaches_and_close_detaches_the_journal(tmp_path, monkeypatch):
    from openfunctions.servers import _journaling as journaling

    opened: list[object] = []

    class FakeJournal(MemoryJournalSink):
        closed = False

        async def close(self):
            self.closed = True

    async def fake_open(data_dir, profile, **options):  # options: reopen_interval (the server passes its own)
        j = FakeJournal()
        opened.append(j)
        return j, data_dir / "journal" / f"{profile}.journal"

    monkeypatch.setattr(journaling, "open_execution_journal", fake_open)
    registry = ToolRegistry(fixture_tools.tools)
    async with create_mcp_server(registry, name="t", version="1", journal_dir=tmp_path) as server:
        async with Client(server.lowlevel, mode="legacy") as client:
            await client.call_tool("add", {"a": 1, "b": 2})
        assert registry.executor.sink is opened[0]
    assert opened[0].closed
    assert registry.executor.sink is None
    assert [r.tool for r in opened[0].receipts] == ["add"]
