"""The MCP Inspector CLI (``@modelcontextprotocol/inspector --cli``) drives our server over stdio.

The Inspector launches ``openfunctions-mcp serve ...`` itself, as a host
would, lists the tools and calls one, in both protocol eras; and once more
over streamable HTTP (``--server-url``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ._serve import cli_command, http_server, serve_args

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def _inspect(node_peers: Any, server: list[str], *method: str) -> dict[str, Any]:
    # The server command goes before the method flags: Inspector takes the
    # positional target words up to the first of its own options.
    proc = subprocess.run(
        [*node_peers.inspector, "--cli", *server, *method, "--format", "json"],
        env=node_peers.env, cwd=node_peers.home, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"inspector exited {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_inspector_lists_the_default_profile(node_peers: Any, tmp_path: Path) -> None:
    """What an MCP host launches with no arguments: ``openfunctions-mcp serve`` (the tools profile)."""
    out = _inspect(node_peers, [*cli_command(), "serve", "--data-dir", str(tmp_path)], "--method", "tools/list")
    tools = out["result"]["tools"]
    assert tools, "the default profile serves no tools"
    for t in tools:
        assert t["name"] and t["inputSchema"]["type"] == "object"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_lists_and_calls_a_tool(node_peers: Any, tmp_path: Path, era: str) -> None:
    server = [*cli_command(), *serve_args("conformance", tmp_path)]
    listed = _inspect(node_peers, server, "--method", "tools/list", "--protocol-era", era)
    names = [t["name"] for t in listed["result"]["tools"]]
    assert "greet" in names and "test_simple_text" in names

    called = _inspect(
        node_peers, server, "--method", "tools/call", "--tool-name", "greet",
        "--tool-args-json", json.dumps({"name": "Inspector"}), "--protocol-era", era,
    )
    result = called["result"]
    assert result["content"] == [{"type": "text", "text": "Hello, Inspector!"}]
    receipt = result["_meta"]["dev.openfunctions/receipt"]
    assert receipt["tool"] == "greet" and receipt["outcome"] == "succeeded"


def test_inspector_sees_a_tool_error_for_bad_arguments(node_peers: Any, tmp_path: Path) -> None:
    """A wrong argument type comes back as a tool result with isError (Inspector exits 5), not a protocol failure."""
    server = [*cli_command(), *serve_args("conformance", tmp_path)]
    proc = subprocess.run(
        [*node_peers.inspector, "--cli", *server, "--method", "tools/call", "--tool-name", "greet",
         "--tool-args-json", json.dumps({"name": 42}), "--protocol-era", "modern", "--format", "json"],
        env=node_peers.env, cwd=node_peers.home, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 5, proc.stdout + proc.stderr[-3000:]
    assert json.loads(proc.stderr.strip().splitlines()[-1])["error"]["code"] == "tool_is_error", proc.stderr


def test_inspector_lists_and_calls_over_http(node_peers: Any, tmp_path: Path) -> None:
    """The same through ``--server-url`` against the streamable HTTP server on 127.0.0.1."""
    with http_server("conformance", tmp_path) as url:
        target = ["--server-url", url, "--transport", "http"]
        listed = _inspect(node_peers, target, "--method", "tools/list")
        assert "greet" in [t["name"] for t in listed["result"]["tools"]]
        called = _inspect(node_peers, target, "--method", "tools/call", "--tool-name", "greet",
                          "--tool-args-json", json.dumps({"name": "HTTP"}))
    assert called["result"]["content"] == [{"type": "text", "text": "Hello, HTTP!"}]
    assert called["result"]["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
