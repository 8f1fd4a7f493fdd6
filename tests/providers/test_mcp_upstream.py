"""The MCP provider against a real upstream subprocess that misbehaves on demand (``upstream_server.py``).

Every call goes through a registry with a real execution journal, so the
receipts checked here are the durable ones.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core import PolicyDecision, ToolRegistry
from openfunctions.core.journal import ExecutionJournal
from openfunctions.providers import (
    UPSTREAM_META_KEY,
    McpProvider,
    ProviderHealth,
    check_provider_health,
    connect_provider,
    context_prompt,
)

from .conftest import FixtureUpstream, one_upstream

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def _await_file(path: Path, timeout: float = 30.0) -> str:
    with anyio.fail_after(timeout):
        while not path.exists():
            await anyio.sleep(0.02)
    return path.read_text()


class Mounted:
    def __init__(self, registry: ToolRegistry, connected: Any, journal: ExecutionJournal) -> None:
        self.registry, self.connected, self.journal = registry, connected, journal

    def receipt(self, receipt_id: str):
        return next(r for r in self.journal.receipts() if r.receipt_id == receipt_id)


async def _mount(tmp_path: Path, config, **registry_kw) -> Mounted:
    journal = await ExecutionJournal.open(tmp_path / "journal.jsonl")
    registry = ToolRegistry(sink=journal, **registry_kw)
    connected = await connect_provider(McpProvider(config), registry)
    return Mounted(registry, connected, journal)


def _signal() -> tuple[anyio.Event, Any]:
    """An event and an async callback that sets it (for on_tools_changed / on_prompts_changed)."""
    event = anyio.Event()

    async def set_it() -> None:
        event.set()

    return event, set_it


async def _unmount(m: Mounted) -> None:
    await m.connected.close()
    await m.journal.close()


async def test_tools_mounted_with_schemas_annotations_and_structured_output(tmp_path, fixture_upstream: FixtureUpstream):
    m = await _mount(tmp_path, fixture_upstream.config("up"))
    try:
        names = sorted(t.name for t in m.registry.list())
        assert names == sorted(f"mcp__up__{n}" for n in
                               ("echo", "get_weather_", "hang", "big", "garbage", "grow", "grow_prompts", "write_note"))
        echo = m.registry.get("mcp__up__echo")
        assert echo.input_schema["required"] == ["message"] and echo.input_schema["additionalProperties"] is False
        assert echo.output_schema is not None and echo.output_schema["required"] == ["echo"]
        assert echo.meta[UPSTREAM_META_KEY] == {"server": "up", "tool": "echo",
                                                "scope": "serial (key mcp:up: calls to up one at a time, reads together)"}
        assert set(echo.tags) >= {"context", "context:up", "mcp"}
        # readOnlyHint -> a parallel-safe read; otherwise an external effect. Both hold the server's key
        # (scope "serial"): the upstream's calls one at a time, reads together.
        assert echo.capability.effect == "read" and echo.schedule_class == "shared"
        note = m.registry.get("mcp__up__write_note")
        assert note.capability.effect == "external" and note.schedule_class == "keyed"
        assert note.admission({"text": "x"}).keys == echo.admission({}).keys == frozenset({"mcp:up"})
        assert note.annotations.read_only_hint is False

        d = await m.registry.execute_detailed("mcp__up__echo", {"message": "hi", "n": 3})
        assert d.ok, d.error
        assert d.result.structured == {"echo": "hi", "n": 3}  # the upstream's structuredContent, unchanged
        assert d.result.content == [{"type": "text", "text": "echo: hi"}]
        assert m.receipt(d.receipt.receipt_id).outcome == "succeeded"

        # Our executor validates against the upstream's schema: the upstream never sees a bad call.
        bad = await m.registry.execute_detailed("mcp__up__echo", {"message": "hi", "extra": 1})
        assert bad.error.code == "invalid_params" and not bad.receipt.handler_started
        assert not (fixture_upstream.markers / "echo.started").read_text() == ""  # only the good call ran

        # A name with characters ours lacks is mounted under a safe name and called by its own.
        w = await m.registry.execute_detailed("mcp__up__get_weather_", {})
        assert w.ok and w.result.content[0]["text"] == "sunny"
        health = (await check_provider_health([m.connected]))[0]
        assert health.ok and health.tools == 8
        assert "renamed to 'mcp__up__get_weather_'" in health.details["tool_problems"]["get weather!"]
    finally:
        await _unmount(m)
    assert m.registry.list() == []  # close() unmounts


async def test_upstream_killed_mid_call_is_unknown_and_journaled_then_reconnects(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up", timeout=60))
    try:
        result: dict[str, Any] = {}

        async def call() -> None:
            result["d"] = await m.registry.execute_detailed("mcp__up__hang", {})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            pid = int(await _await_file(fixture_upstream.markers / "hang.started"))
            os.kill(pid, signal.SIGKILL)
        d = result["d"]
        assert d.error.code == "upstream_lost"
        assert "may have had its effect" in d.error.message
        stored = m.receipt(d.receipt.receipt_id)
        assert (stored.outcome, stored.certainty, stored.handler_started) == ("failed", "unknown", True)

        again = await m.registry.execute_detailed("mcp__up__echo", {"message": "back"})
        assert again.ok, again.error
        assert again.result.structured == {"echo": "back", "n": 0}
        assert int((fixture_upstream.markers / "echo.started").read_text()) != pid  # a new upstream process
        assert (await m.connected.health()).details["connects"] == 2
    finally:
        await _unmount(m)


async def test_malformed_jsonrpc_fails_the_call_clearly_and_the_next_call_works(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up", timeout=60))
    try:
        d = await m.registry.execute_detailed("mcp__up__garbage", {})
        assert d.error.code == "upstream_lost"
        assert "malformed JSON-RPC" in d.error.message
        assert (d.receipt.outcome, d.receipt.certainty) == ("failed", "unknown")
        again = await m.registry.execute_detailed("mcp__up__echo", {"message": "ok"})
        assert again.ok, again.error
    finally:
        await _unmount(m)


async def test_a_20_mb_reply_is_refused_and_the_gateway_stays_up(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up", timeout=120))
    try:
        d = await m.registry.execute_detailed("mcp__up__big", {"bytes": 20 * 1024 * 1024})
        assert d.error.code == "upstream_result_too_large"
        assert "20,971,5" in d.error.message and "4,194,304 (maxResultBytes)" in d.error.message
        assert d.receipt.certainty == "unknown"  # the upstream did run it
        small = await m.registry.execute_detailed("mcp__up__big", {"bytes": 1000})
        assert small.ok and len(small.result.content[0]["text"]) == 1000
    finally:
        await _unmount(m)


async def test_a_hanging_call_cancelled_by_the_caller_is_cancelled_upstream(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up", timeout=60))
    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(m.registry.execute_detailed, "mcp__up__hang", {})
                await _await_file(fixture_upstream.markers / "hang.started")
                scope.cancel()
        assert await _await_file(fixture_upstream.markers / "hang.cancelled") == "cancelled"
        cancelled = [r for r in m.journal.receipts() if r.tool == "mcp__up__hang"]
        assert [(r.outcome, r.certainty) for r in cancelled] == [("cancelled", "unknown")]
        again = await m.registry.execute_detailed("mcp__up__echo", {"message": "still here"})
        assert again.ok and (await m.connected.health()).details["connects"] == 1  # same connection
    finally:
        await _unmount(m)


async def test_a_call_past_its_timeout_is_unknown_and_cancelled_upstream(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up", timeout=1))
    try:
        d = await m.registry.execute_detailed("mcp__up__hang", {})
        assert d.error.code == "upstream_timeout" and d.receipt.certainty == "unknown"
        assert await _await_file(fixture_upstream.markers / "hang.cancelled") == "cancelled"
        assert (await m.registry.execute_detailed("mcp__up__echo", {"message": "x"})).ok
    finally:
        await _unmount(m)


async def test_tools_list_changed_is_followed(tmp_path, fixture_upstream):
    m = await _mount(tmp_path, fixture_upstream.config("up"))
    changed, on_change = _signal()
    m.connected.on_tools_changed(on_change)
    try:
        assert "mcp__up__extra_1" not in m.registry
        assert (await m.registry.execute_detailed("mcp__up__grow", {})).ok
        with anyio.fail_after(30):
            await changed.wait()
        assert "mcp__up__extra_1" in m.registry
        d = await m.registry.execute_detailed("mcp__up__extra_1", {})
        assert d.ok and d.result.content[0]["text"] == "extra_1 ran"
    finally:
        await _unmount(m)


async def test_list_changed_is_followed_over_an_http_upstream(tmp_path, fixture_upstream):
    """The same notifications over streamable HTTP (the SDK client's standing GET stream): a real HTTP upstream."""
    import subprocess
    import sys

    from .._net import free_port, wait_for_port
    from .conftest import UPSTREAM_SCRIPT

    port = free_port()
    log = (tmp_path / "http-upstream.log").open("w")
    proc = subprocess.Popen([sys.executable, str(UPSTREAM_SCRIPT), str(fixture_upstream.markers), "--http", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, timeout=60, output=(tmp_path / "http-upstream.log").read_text)
        m = await _mount(tmp_path, one_upstream("web", {"url": f"http://127.0.0.1:{port}/mcp"}))
        (tools_changed, on_tools), (prompts_changed, on_prompts) = _signal(), _signal()
        m.connected.on_tools_changed(on_tools)
        m.connected.on_prompts_changed(on_prompts)
        try:
            assert (await m.connected.health()).details["transport"] == "http"
            assert "mcp__web__extra_1" not in m.registry
            assert (await m.registry.execute_detailed("mcp__web__grow", {})).ok
            with anyio.fail_after(30):
                await tools_changed.wait()
            d = await m.registry.execute_detailed("mcp__web__extra_1", {})
            assert d.ok and d.result.content[0]["text"] == "extra_1 ran"
            assert (await m.registry.execute_detailed("mcp__web__grow_prompts", {})).ok
            with anyio.fail_after(30):
                await prompts_changed.wait()
            assert "mcp__web__extra_prompt_1" in {p["name"] for p in m.connected.prompts()}
        finally:
            await _unmount(m)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_upstream_prompts_are_mounted_fetched_and_followed(tmp_path, fixture_upstream):
    from openfunctions.providers import UpstreamError

    m = await _mount(tmp_path, fixture_upstream.config("up"))
    changed, on_change = _signal()
    m.connected.on_prompts_changed(on_change)
    try:
        prompts = {p["name"]: p for p in m.connected.prompts()}
        assert set(prompts) == {"mcp__up__greet", "mcp__up__bad_prompt_"}
        assert prompts["mcp__up__greet"]["arguments"] == [{"name": "name", "description": "Who to greet", "required": True}]
        assert prompts["mcp__up__greet"]["title"] == "Greeting" and prompts["mcp__up__bad_prompt_"]["upstream"] == "bad prompt!"
        got = await m.connected.get_prompt("mcp__up__greet", {"name": "Ada"})
        assert got["messages"] == [{"role": "user", "content": {"type": "text", "text": "Say hello to Ada, warmly."}}]
        assert (await m.connected.get_prompt("mcp__up__bad_prompt_"))["messages"][0]["content"]["text"] == "the prompt bad prompt!"
        with pytest.raises(UpstreamError) as refused:  # the upstream's own -32602, named
            await m.connected.get_prompt("mcp__up__greet", {})
        assert refused.value.code == "upstream_error" and refused.value.details["upstream_code"] == -32602
        assert "greet needs the argument 'name'" in refused.value.message
        with pytest.raises(UpstreamError) as unknown:
            await m.connected.get_prompt("mcp__up__nope")
        assert unknown.value.code == "upstream_unknown_prompt"
        # notifications/prompts/list_changed is followed.
        assert (await m.registry.execute_detailed("mcp__up__grow_prompts", {})).ok
        with anyio.fail_after(30):
            await changed.wait()
        assert "mcp__up__extra_prompt_1" in {p["name"] for p in m.connected.prompts()}
        assert (await m.connected.health()).details["prompts"] == 3
    finally:
        await _unmount(m)


async def test_a_missing_upstream_is_reported_not_fatal(tmp_path):
    config = one_upstream("ghost", {"command": str(tmp_path / "no-such-server"), "connectTimeout": 5})
    registry = ToolRegistry()
    connected = await connect_provider(McpProvider(config), registry)
    try:
        health = await connected.health()
        assert health.status == "down" and "cannot start" in (health.message or "")
        assert registry.list() == []
    finally:
        await connected.close()


class DenyForPrincipal:
    """A governed policy: ``principal`` may not run ``tool``; everything else is allowed."""

    name = "deny-for-principal"

    def __init__(self, principal: str, tool: str) -> None:
        self.principal, self.tool = principal, tool

    async def decide(self, tool, params: Mapping[str, Any], ctx) -> PolicyDecision:
        if tool.name == self.tool and ctx.principal == self.principal:
            return PolicyDecision(False, self.name, f"{ctx.principal} may not run {tool.name}")
        return PolicyDecision(True, self.name)


async def test_a_governed_policy_refuses_a_mounted_tool_for_a_principal(tmp_path, fixture_upstream):
    from openfunctions.core import ToolExecutionContext

    policy = DenyForPrincipal("intern", "mcp__up__write_note")
    m = await _mount(tmp_path, fixture_upstream.config("up"), policy=policy, mode="governed")
    try:
        # Arguments never confer authority: a 'principal' argument changes nothing.
        denied = await m.registry.execute_detailed(
            "mcp__up__write_note", {"text": "hi", "principal": "admin"}, ToolExecutionContext(principal="intern"))
        assert denied.error.code == "policy_denied" and not denied.receipt.handler_started
        assert not (fixture_upstream.markers / "note.txt").exists()
        assert m.receipt(denied.receipt.receipt_id).policy.allowed is False
        ok = await m.registry.execute_detailed(
            "mcp__up__write_note", {"text": "hi"}, ToolExecutionContext(principal="admin"))
        assert ok.ok and (fixture_upstream.markers / "note.txt").read_text() == "hi"
    finally:
        await _unmount(m)


async def test_context_from_an_upstream_survives_a_raising_and_a_hanging_provider(tmp_path, fixture_upstream):
    from openfunctions.providers import define_provider

    from .test_provider import Connected

    async def boom():
        raise RuntimeError("nope")

    async def hang():
        await anyio.sleep_forever()

    m = await _mount(tmp_path, fixture_upstream.config("up"))
    try:
        raising = Connected(define_provider(id="r", name="R", connect=None), context=boom)  # type: ignore[arg-type]
        hanging = Connected(define_provider(id="h", name="H", connect=None), context=hang)  # type: ignore[arg-type]
        text = await context_prompt([raising, m.connected, hanging], timeout=1.0)
        assert text == "### MCP server up\nA test upstream for the gateway."
    finally:
        await _unmount(m)


def test_provider_health_dict():
    h = ProviderHealth("x", "down", "boom", tools=0)
    assert h.to_dict() == {"provider": "x", "status": "down", "ok": False, "message": "boom", "tools": 0, "details": {}}
