"""Concurrency across a gateway's upstreams (real stdio subprocesses, ``hostile_server.py``).

By default calls to one upstream run one at a time (the conflict key
``mcp:<server>``) and never wait for another upstream or a local tool that is
not a barrier; ``scope`` / ``toolScopes`` in ``servers.json`` say otherwise.
Every "ran at once" below is proved by tools that wait for each other's
marker files: run one at a time, they could never both finish.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.providers import Gateway, UpstreamConfigError, parse_upstreams
from openfunctions.providers.cli import cmd_check

from .test_gateway_bounds import BOUND, hostile_entry, run_bounded

pytestmark = [pytest.mark.slow]

OBJ = {"type": "object"}


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": OBJ, **extra}


async def _await_file(path: Path) -> None:
    with anyio.fail_after(BOUND):
        while not path.exists():
            await anyio.sleep(0.01)


def test_two_upstreams_never_block_each_other_nor_a_local_read(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    document = {"mcpServers": {
        # A's tool answers only once B's tool has been called: if A's call held a barrier, B's never would be.
        "A": hostile_entry(tmp_path, {"tools": [_tool("wait_for_b")], "markers": str(a),
                                      "wait_for": {"wait_for_b": str(b / "go.called")}}, name="A", timeout=20),
        "B": hostile_entry(tmp_path, {"tools": [_tool("go")], "markers": str(b)}, name="B", timeout=20),
    }}

    async def body() -> None:
        registry = ToolRegistry()
        registry.register(define_tool(name="local_read", description="A local parallel-safe read.",
                                      handler=lambda p, c: "ok", capability={"effect": "read", "parallel_safe": True}))
        gateway = Gateway(parse_upstreams(document), registry)
        await gateway.start()
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            results[name] = await registry.execute_detailed(name, {})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "mcp__A__wait_for_b")
                await _await_file(a / "wait_for_b.called")  # A's call is inside its upstream now
                await call("local_read")  # a local read runs meanwhile
                await call("mcp__B__go")  # and so does B's call, which lets A's answer
            for name in ("mcp__A__wait_for_b", "local_read", "mcp__B__go"):
                assert results[name].ok, (name, results[name].error)
        finally:
            await gateway.aclose()

    run_bounded(body)


def test_calls_to_one_upstream_run_one_at_a_time_by_default(tmp_path):
    markers = tmp_path / "m"
    document = {"mcpServers": {"A": hostile_entry(tmp_path, {
        "tools": [_tool("first"), _tool("second"), _tool("peek", annotations={"readOnlyHint": True})],
        "markers": str(markers), "wait_for": {"first": str(tmp_path / "release")}}, name="A", timeout=30)}}

    async def body() -> None:
        registry = ToolRegistry()
        gateway = Gateway(parse_upstreams(document), registry)
        await gateway.start()
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            results[name] = await registry.execute_detailed(name, {})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "mcp__A__first")
                await _await_file(markers / "first.called")
                tg.start_soon(call, "mcp__A__second")
                tg.start_soon(call, "mcp__A__peek")
                with anyio.fail_after(BOUND):  # both wait in our scheduler, behind the running call's key
                    while registry.executor.scheduler.queued < 2:
                        await anyio.sleep(0.01)
                assert not (markers / "second.called").exists() and not (markers / "peek.called").exists()
                (tmp_path / "release").write_text("go")
            assert all(r.ok for r in results.values()), results
        finally:
            await gateway.aclose()

    run_bounded(body)


def test_declared_scopes_parallel_and_keys_let_calls_of_one_upstream_meet(tmp_path):
    m = tmp_path / "m"
    # Each pair of tools waits for the other's marker: they finish only if they run at once.
    spec = {"tools": [_tool("p1"), _tool("p2"), _tool("k1"), _tool("k2"), _tool("alone")], "markers": str(m),
            "wait_for": {"p1": str(m / "p2.called"), "p2": str(m / "p1.called"),
                         "k1": str(m / "k2.called"), "k2": str(m / "k1.called")}}
    document = {"mcpServers": {"A": hostile_entry(tmp_path, spec, name="A", timeout=30, toolScopes={
        "p1": "parallel", "p2": "parallel", "k1": {"keys": ["/repo"]}, "k2": {"keys": ["/repo"]},
        "alone": "exclusive"})}}

    async def body() -> None:
        registry = ToolRegistry()
        gateway = Gateway(parse_upstreams(document), registry)
        await gateway.start()
        results: dict[str, Any] = {}

        async def call(name: str, params: dict[str, Any]) -> None:
            results[name] = await registry.execute_detailed(name, params)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "mcp__A__p1", {})
                tg.start_soon(call, "mcp__A__p2", {})
                tg.start_soon(call, "mcp__A__k1", {"repo": "one"})
                tg.start_soon(call, "mcp__A__k2", {"repo": "two"})
            assert all(r.ok for r in results.values()), {n: r.error for n, r in results.items()}
            assert registry.get("mcp__A__alone").schedule_class == "exclusive"
            assert registry.get("mcp__A__k1").capability.conflict_keys == ("/repo",)
        finally:
            await gateway.aclose()

    run_bounded(body)


def test_gateway_check_shows_each_tools_scope(tmp_path, capfd):
    spec = {"tools": [_tool("plain"), _tool("keyed")]}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"A": hostile_entry(tmp_path, spec, name="A",
                                                                   toolScopes={"keyed": {"keys": ["/repo"]}})}}))
    assert cmd_check(argparse.Namespace(file=str(path), json=False, timeout=None, tools=True)) == 0
    out = capfd.readouterr().out
    assert "scope: serial (key mcp:A" in out
    assert "- mcp__A__plain  [serial (key mcp:A" in out and "- mcp__A__keyed  [keys /repo" in out


@pytest.mark.parametrize("scope", ["sometimes", {"keys": []}, {"keys": ["repo"]}, {"keys": ["/a"], "x": 1}, 3])
def test_a_malformed_scope_is_a_config_error_naming_the_server(scope):
    with pytest.raises(UpstreamConfigError, match="server 'A'"):
        parse_upstreams({"mcpServers": {"A": {"command": "x", "scope": scope}}})
    with pytest.raises(UpstreamConfigError, match="toolScopes.t"):
        parse_upstreams({"mcpServers": {"A": {"command": "x", "toolScopes": {"t": scope}}}})


def test_the_documented_scopes_example_parses_as_it_says():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "GATEWAY.md").read_text()
    block = next(b for b in re.findall(r"```json\n(.*?)```", doc, re.S) if "toolScopes" in b)
    configs = {c.name: c for c in parse_upstreams(json.loads(block))}
    assert configs["git"].scope_of("git_status") == "serial"
    assert configs["git"].scope_of("git_commit") == ("/repo",)
    assert configs["search"].scope == "parallel" and configs["legacy"].scope == "exclusive"
