"""``openfunctions-mcp serve --profile gateway --upstreams FILE`` end to end, and ``gateway check``.

The gateway is a real subprocess driven by the SDK client over stdio; its
upstreams are real subprocesses too (the fixture upstream and our own
``tools`` profile), plus one that does not exist (reported, not fatal).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from ..interop._serve import cli_command
from .conftest import HERE, FixtureUpstream
from .test_mcp_peers import _ours_stdio

pytestmark = pytest.mark.slow

RECEIPT = "dev.openfunctions/receipt"


def _write_servers(path: Path, fixture: FixtureUpstream, data: Path, *, ghost: bool = True) -> Path:
    servers = {"up": fixture.entry(), "ours": _ours_stdio(data / "ours")}
    if ghost:
        servers["ghost"] = {"command": str(data / "no-such-server")}
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def _gateway_params(data: Path, servers: Path, *extra: str) -> StdioServerParameters:
    cmd = cli_command()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return StdioServerParameters(command=cmd[0], env=env, args=[
        *cmd[1:], "serve", "--profile", "gateway", "--upstreams", str(servers),
        "--data-dir", str(data / "gateway"), "--log-level", "warning", *extra])


@pytest.mark.anyio
async def test_serve_gateway_over_stdio(tmp_path, fixture_upstream):
    servers = _write_servers(tmp_path / "servers.json", fixture_upstream, tmp_path)
    changed = anyio.Event()
    notices: list[object] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            notices.append(message)
            changed.set()

    async with Client(_gateway_params(tmp_path, servers), mode="legacy", message_handler=on_message, cache=None) as c:
        assert c.server_capabilities.tools is not None and c.server_capabilities.tools.list_changed is True
        assert "mcp__<server>__<tool>" in (c.instructions or "")
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert {"mcp__up__echo", "mcp__up__get_weather_", "mcp__ours__of_hash_text"} <= set(tools)
        assert not any(n.startswith("mcp__ghost__") for n in tools)  # down: reported, not fatal
        assert tools["mcp__up__echo"].output_schema["required"] == ["echo"]
        assert tools["mcp__up__echo"].annotations.read_only_hint is True

        r = await c.call_tool("mcp__up__echo", {"message": "through the gateway", "n": 2})
        assert not r.is_error
        assert r.structured_content == {"echo": "through the gateway", "n": 2}
        receipt = r.meta[RECEIPT]
        assert (receipt["tool"], receipt["outcome"], receipt["certainty"]) == ("mcp__up__echo", "succeeded", "known")

        h = await c.call_tool("mcp__ours__of_hash_text", {"text": "hello"})
        assert h.structured_content["hex"].startswith("2cf24dba")
        assert h.meta[RECEIPT]["tool"] == "mcp__ours__of_hash_text"  # ours, not the upstream's receipt

        # The upstream announces a new tool; the gateway re-lists and tells us, once per
        # connection however often we listed (servers/_server.py finds the connection
        # behind each request's session: if an SDK release hides it, this fails).
        await c.list_tools()
        assert not (await c.call_tool("mcp__up__grow", {})).is_error
        with anyio.fail_after(30):
            await changed.wait()
        await anyio.sleep(0.5)
        assert len(notices) == 1
        assert "mcp__up__extra_1" in {t.name for t in (await c.list_tools()).tools}
        assert (await c.call_tool("mcp__up__extra_1", {})).content[0].text == "extra_1 ran"

        # Health and context as resources, for hosts and people.
        health = json.loads((await c.read_resource("openfunctions://gateway/upstreams")).contents[0].text)
        status = {u["provider"]: (u["status"], u["tools"]) for u in health["upstreams"]}
        assert status == {"up": ("up", 9), "ours": ("up", 3), "ghost": ("down", 0)}
        context = (await c.read_resource("openfunctions://gateway/context")).contents[0].text
        assert context.startswith("### MCP server up\nA test upstream for the gateway.")
    journal = (tmp_path / "gateway" / "journal" / "gateway.journal").read_text()
    assert receipt["receipt_id"] in journal  # the mounted call's receipt is durable


@pytest.mark.anyio
async def test_served_upstream_prompts_and_prompt_changes(tmp_path, fixture_upstream):
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"up": fixture_upstream.entry()}}))
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.PromptListChangedNotification):
            changed.set()

    async with Client(_gateway_params(tmp_path, servers), mode="legacy", message_handler=on_message, cache=None) as c:
        assert c.server_capabilities.prompts is not None and c.server_capabilities.prompts.list_changed is True
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert set(prompts) == {"mcp__up__greet", "mcp__up__bad_prompt_"}
        assert prompts["mcp__up__greet"].title == "Greeting" and prompts["mcp__up__greet"].arguments[0].required is True
        got = await c.get_prompt("mcp__up__greet", {"name": "Ada"})
        assert got.messages[0].content.text == "Say hello to Ada, warmly." and got.description == "upstream prompt greet"
        with pytest.raises(MCPError) as refused:  # the upstream's declared arguments are checked here first
            await c.get_prompt("mcp__up__greet", {"other": "x"})
        assert refused.value.error.code == -32602
        assert refused.value.error.message == "prompt 'mcp__up__greet' is missing required arguments: name"

        assert not (await c.call_tool("mcp__up__grow_prompts", {})).is_error
        with anyio.fail_after(30):
            await changed.wait()
        assert "mcp__up__extra_prompt_1" in {p.name for p in (await c.list_prompts()).prompts}
        assert (await c.get_prompt("mcp__up__extra_prompt_1")).messages[0].content.text == "the prompt extra_prompt_1"


@pytest.mark.anyio
async def test_a_2026_client_hears_of_changes_on_its_listen_stream(tmp_path, fixture_upstream):
    """Protocol 2026-07-28 has no standing notification channel: change events ride `subscriptions/listen`."""
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"up": fixture_upstream.entry()}}))
    async with Client(_gateway_params(tmp_path, servers), mode="2026-07-28", cache=None) as c:
        assert c.protocol_version == "2026-07-28"
        async with c.listen(tools_list_changed=True, prompts_list_changed=True) as sub:
            assert sub.honored.tools_list_changed and sub.honored.prompts_list_changed
            events = []
            assert not (await c.call_tool("mcp__up__grow", {})).is_error
            with anyio.fail_after(30):
                events.append(await sub.__anext__())
            assert "mcp__up__extra_1" in {t.name for t in (await c.list_tools()).tools}
            assert not (await c.call_tool("mcp__up__grow_prompts", {})).is_error
            with anyio.fail_after(30):
                events.append(await sub.__anext__())
        assert [type(e).__name__ for e in events] == ["ToolsListChanged", "PromptsListChanged"]
        assert "mcp__up__extra_prompt_1" in {p.name for p in (await c.list_prompts()).prompts}


@pytest.mark.anyio
async def test_serve_gateway_under_a_governed_policy(tmp_path, fixture_upstream):
    servers = _write_servers(tmp_path / "servers.json", fixture_upstream, tmp_path, ghost=False)
    params = _gateway_params(tmp_path, servers, "--module", "policy_fixture:registry", "--principal", "intern")
    async with Client(params, mode="legacy", cache=None) as c:
        r = await c.call_tool("mcp__up__write_note", {"text": "x", "principal": "admin"})
        assert r.is_error and r.content[0].text == "intern may not run mcp__up__write_note"
        assert r.meta[RECEIPT]["outcome"] == "rejected" and r.meta[RECEIPT]["principal"] == "intern"
        assert not (fixture_upstream.markers / "note.txt").exists()
        assert not (await c.call_tool("mcp__up__echo", {"message": "reads are fine"})).is_error


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, timeout=timeout)


def test_gateway_profile_without_upstreams_is_a_clear_usage_error(tmp_path):
    p = _run_cli("serve", "--profile", "gateway", "--data-dir", str(tmp_path))
    assert p.returncode == 2
    assert "the 'gateway' profile needs --upstreams FILE" in p.stderr


def test_gateway_check_reports_each_upstream(tmp_path, fixture_upstream):
    servers = _write_servers(tmp_path / "servers.json", fixture_upstream, tmp_path)
    p = _run_cli("gateway", "check", str(servers))
    assert p.returncode == 1, p.stderr  # ghost is down
    lines = p.stdout.splitlines()
    assert lines[0].startswith("up    up                      8 tools  stdio ")
    assert "      tool 'get weather!': renamed to 'mcp__up__get_weather_'" in p.stdout
    assert any(line.startswith("up    ours") and " 3 tools" in line for line in lines)
    ghost = lines.index(next(line for line in lines if line.startswith("DOWN  ghost")))
    assert lines[ghost + 1].startswith("      error: cannot start ")

    ok = _write_servers(tmp_path / "ok.json", fixture_upstream, tmp_path, ghost=False)
    p = _run_cli("gateway", "check", str(ok), "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["provider"]: r for r in json.loads(p.stdout)["upstreams"]}
    assert rows["up"]["ok"] and rows["up"]["tools"] == 8 and rows["ours"]["tools"] == 3


def test_gateway_check_names_what_is_wrong_in_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"fs": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}}))
    p = _run_cli("gateway", "check", str(bad))
    assert p.returncode == 2
    assert f"{bad}: server 'fs': give either 'command' (stdio) or 'url' (streamable HTTP), not both" in p.stderr


@pytest.mark.anyio
async def test_the_all_profile_mounts_the_upstreams_too(tmp_path, fixture_upstream):
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"up": fixture_upstream.entry()}}))
    cmd = cli_command()
    params = StdioServerParameters(command=cmd[0], env=dict(os.environ), args=[
        *cmd[1:], "serve", "--profile", "all", "--upstreams", str(servers), "--data-dir", str(tmp_path / "all")])
    async with Client(params, mode="legacy", cache=None) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"of_hash_text", "mcp__up__echo"} <= names
        r = await c.call_tool("mcp__up__echo", {"message": "in all"})
        assert r.structured_content == {"echo": "in all", "n": 0} and r.meta[RECEIPT]["outcome"] == "succeeded"
