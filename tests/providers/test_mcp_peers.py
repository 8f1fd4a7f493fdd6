"""The MCP provider against real servers: our own ``tools`` profile (stdio and HTTP) and npm servers nobody here wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openfunctions.core import ToolExecutionContext, ToolRegistry
from openfunctions.providers import McpProvider, connect_provider, context_prompt

from ..interop._serve import cli_command, http_server, serve_args
from .conftest import NpmServers, one_upstream
from .test_mcp_upstream import DenyForPrincipal

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _ours_stdio(data_dir: Path) -> dict:
    cmd = cli_command()
    return {"command": cmd[0], "args": [*cmd[1:], *serve_args("tools", data_dir)],
            "env": {"PATH": os.environ.get("PATH", "")}}


async def _check_our_tools(registry: ToolRegistry, server: str) -> None:
    name = f"mcp__{server}__of_hash_text"
    tool = registry.get(name)
    assert tool.output_schema["required"] == ["algorithm", "hex", "bytes"]
    assert tool.schedule_class == "shared"  # the upstream marks it read-only
    d = await registry.execute_detailed(name, {"text": "hello"})
    assert d.ok, d.error
    assert d.result.structured == {
        "algorithm": "sha256", "bytes": 5,
        "hex": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
    }
    assert d.receipt.tool == name and d.receipt.outcome == "succeeded"
    # Validation is ours, before anything is sent upstream.
    bad = await registry.execute_detailed(name, {"text": "x", "algorithm": "rot13"})
    assert bad.error.code == "invalid_params" and not bad.receipt.handler_started


async def test_our_own_server_over_stdio(tmp_path):
    registry = ToolRegistry()
    connected = await connect_provider(McpProvider(one_upstream("ours", _ours_stdio(tmp_path / "up"))), registry)
    try:
        assert (await connected.health()).ok
        await _check_our_tools(registry, "ours")
    finally:
        await connected.close()
    # The upstream journaled the call too: its own receipt, in its own data dir.
    assert (tmp_path / "up" / "journal" / "tools.journal").stat().st_size > 0


async def test_our_own_server_over_http_with_a_bearer_token(tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    with http_server("tools", tmp_path / "up", "--auth-token-file", str(token_file)) as url:
        monkeypatch.setenv("UPSTREAM_TOKEN", "s3cret-token")
        registry = ToolRegistry()
        connected = await connect_provider(
            McpProvider(one_upstream("web", {"url": url, "bearerTokenEnv": "UPSTREAM_TOKEN"})), registry)
        try:
            await _check_our_tools(registry, "web")
        finally:
            await connected.close()
        # A wrong token: reported as down (401), not fatal.
        monkeypatch.setenv("UPSTREAM_TOKEN", "wrong")
        denied = await connect_provider(
            McpProvider(one_upstream("web", {"url": url, "bearerTokenEnv": "UPSTREAM_TOKEN", "connectTimeout": 10})),
            ToolRegistry())
        try:
            health = await denied.health()
            assert health.status == "down" and "401" in (health.message or "")
        finally:
            await denied.close()


@pytest.mark.interop
async def test_the_npm_everything_server(npm_servers: NpmServers):
    registry = ToolRegistry()
    connected = await connect_provider(McpProvider(one_upstream("ev", {
        **npm_servers.everything(),
        "contextResources": ["demo://resource/static/document/architecture.md"],
    })), registry)
    try:
        health = await connected.health()
        assert health.ok and health.tools and health.tools >= 10
        d = await registry.execute_detailed("mcp__ev__echo", {"message": "from the gateway"})
        assert d.ok and d.result.content == [{"type": "text", "text": "Echo: from the gateway"}]
        s = await registry.execute_detailed("mcp__ev__get-structured-content", {"location": "New York"})
        assert s.ok, s.error
        assert s.result.structured is not None and set(s.result.structured) >= {"temperature", "conditions"}
        assert registry.get("mcp__ev__get-structured-content").output_schema is not None
        # Not read-only: an external effect holding the server's key (calls to ev one at a time), not a barrier.
        toggle = registry.get("mcp__ev__toggle-simulated-logging")
        assert toggle.schedule_class == "keyed" and toggle.admission({}).keys == frozenset({"mcp:ev"})
        # Upstream resources feed the context block.
        text = await context_prompt([connected], timeout=30)
        assert text.startswith("### MCP server ev\n")
        assert "<demo://resource/static/document/architecture.md>" in text
        assert "#### demo://resource/static/document/architecture.md\n" in text
    finally:
        await connected.close()


@pytest.mark.interop
async def test_a_governed_policy_refuses_filesystem_write_file_for_a_principal(tmp_path, npm_servers: NpmServers):
    root = tmp_path / "files"
    root.mkdir()
    policy = DenyForPrincipal("intern", "mcp__fs__write_file")
    registry = ToolRegistry(policy=policy, mode="governed")
    connected = await connect_provider(McpProvider(one_upstream("fs", npm_servers.filesystem(root))), registry)
    target = root.resolve() / "note.txt"
    try:
        intern = ToolExecutionContext(principal="intern")
        denied = await registry.execute_detailed(
            "mcp__fs__write_file", {"path": str(target), "content": "hi"}, intern)
        assert denied.error.code == "policy_denied"
        assert denied.error.message == "intern may not run mcp__fs__write_file"
        assert not target.exists()
        # The same principal may read; another principal may write.
        listing = await registry.execute_detailed("mcp__fs__list_allowed_directories", {}, intern)
        assert listing.ok and str(root.resolve()) in listing.result.content[0]["text"]
        ok = await registry.execute_detailed(
            "mcp__fs__write_file", {"path": str(target), "content": "hi"}, ToolExecutionContext(principal="owner"))
        assert ok.ok, ok.error
        assert target.read_text() == "hi"
    finally:
        await connected.close()


async def test_an_upstream_down_at_start_is_mounted_when_it_comes_up(tmp_path, monkeypatch):
    import subprocess

    import anyio

    from openfunctions.providers import _mcp

    from .._net import free_port, wait_for_port
    from ..interop._serve import cli_command

    # What is tested is that a retry finds the server once it is up, not the backoff schedule: with the
    # default 30 s cap the retries may have grown to seconds apart by the time the server listens.
    monkeypatch.setattr(_mcp, "BACKOFF_MAX_S", 1.0)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    registry = ToolRegistry()
    connected = await connect_provider(McpProvider(one_upstream("late", {"url": url, "connectTimeout": 2})), registry)
    proc = None
    try:
        health = await connected.health()
        assert health.status == "down" and "ConnectError" in (health.message or "")
        # A call meanwhile is refused before anything is sent: certainty known. (No tools are mounted yet,
        # so call the provider the way a mounted tool's handler does.) It waits connectTimeout for a
        # reconnect first, hence 2 s here: an attempt that times out later on is retried, not fatal.
        with pytest.raises(Exception) as info:
            await connected.call("of_hash_text", {"text": "x"}, ToolExecutionContext())
        assert info.value.code == "upstream_unavailable" and info.value.effect_happened is False
        assert registry.list() == []

        log = (tmp_path / "server.log").open("wb")
        proc = subprocess.Popen([*cli_command(), "serve", "--transport", "http", "--port", str(port),
                                 "--data-dir", str(tmp_path / "up")], stdout=log, stderr=subprocess.STDOUT)
        wait_for_port(port, proc, timeout=60)
        with anyio.fail_after(60):  # the supervisor's backoff retries find it
            while "mcp__late__of_hash_text" not in registry:
                await anyio.sleep(0.1)
        d = await registry.execute_detailed("mcp__late__of_hash_text", {"text": "hello"})
        assert d.ok and d.result.structured["bytes"] == 5
        assert (await connected.health()).ok
    finally:
        await connected.close()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
