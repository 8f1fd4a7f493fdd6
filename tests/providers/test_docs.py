"""The examples in docs/GATEWAY.md run: the Python one prints what it says; the Claude Desktop
setup fronting two servers serves both (with the npm servers the interop tests install)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from ..interop._serve import cli_command
from .conftest import NpmServers

DOC = Path(__file__).resolve().parents[2] / "docs" / "GATEWAY.md"


def test_the_context_provider_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    example = next(b for b in blocks if "anyio.run(main)" in b)
    p = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "('context', 'context:tasks')"
    assert lines[1] == "['write the report', 'review the gateway']"
    assert "## Context\n\nOpen tasks: 2" in p.stdout
    assert "### tasks\n- tasks_list (read-only): List my open tasks." in p.stdout
    assert lines[-1] == "['up']"


def _json_blocks() -> list[dict]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]


def _local(entry: dict, npm: NpmServers, notes: Path) -> dict:
    """A documented ``npx -y @modelcontextprotocol/<pkg> ...`` entry, run from the locally installed package."""
    assert entry["command"] == "npx", entry
    args = entry["args"]
    at = next(i for i, a in enumerate(args) if a.startswith("@modelcontextprotocol/"))
    package = args[at].split("/", 1)[1]
    script = str(npm.root / "node_modules" / "@modelcontextprotocol" / package / "dist" / "index.js")
    rest = [str(notes) if a == "/Users/me/notes" else a for a in args[at + 1:]]
    return {**entry, "command": str(npm.node), "args": [script, *rest]}


@pytest.mark.slow
@pytest.mark.interop
@pytest.mark.anyio
async def test_the_claude_desktop_example_fronting_two_servers_runs(tmp_path, npm_servers: NpmServers):
    servers_doc, desktop_doc = _json_blocks()[:2]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("- ship the gateway\n")
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {
        name: _local(entry, npm_servers, notes) for name, entry in servers_doc["mcpServers"].items()}}))
    gateway = desktop_doc["mcpServers"]["gateway"]
    assert gateway["command"] == "uvx" and gateway["args"][0] == "openfunctions-mcp"
    args = [str(servers) if a.endswith("servers.json") else a for a in gateway["args"][1:]]
    cmd = cli_command()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], *args, "--data-dir", str(tmp_path / "data")],
                                   env=dict(os.environ))
    async with Client(params, mode="legacy", cache=None) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {"mcp__fs__read_text_file", "mcp__fs__write_file", "mcp__everything__echo"} <= tools
        prompts = {p.name for p in (await c.list_prompts()).prompts}
        assert "mcp__everything__simple-prompt" in prompts
        echo = await c.call_tool("mcp__everything__echo", {"message": "through the gateway"})
        assert echo.content[0].text == "Echo: through the gateway"
        read = await c.call_tool("mcp__fs__read_text_file", {"path": str((notes / "todo.md").resolve())})
        assert not read.is_error and "ship the gateway" in read.content[0].text
        for r, tool in ((echo, "mcp__everything__echo"), (read, "mcp__fs__read_text_file")):
            receipt = r.meta["dev.openfunctions/receipt"]
            assert (receipt["tool"], receipt["outcome"], receipt["principal"]) == (tool, "succeeded", "me")
        got = await c.get_prompt("mcp__everything__simple-prompt")
        assert got.messages and got.messages[0].role == "user"
