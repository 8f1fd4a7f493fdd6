"""The gateway against hostile upstreams (``hostile_server.py``, real stdio subprocesses): what it bounds.

An upstream's schemas, tool list and output are data: no reference in a
schema is fetched, no pattern backtracks, a huge list is capped and re-listed
incrementally off the event loop, an endless line closes the connection, and
two servers whose tools map to one mounted name get neither mounted.
"""

from __future__ import annotations

import argparse
import http.server
import json
import multiprocessing
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core import ToolRegistry
from openfunctions.providers import Gateway, McpProvider, connect_provider, parse_upstreams
from openfunctions.providers.cli import cmd_check
from tests._harness import alive

pytestmark = [pytest.mark.slow]

HOSTILE = Path(__file__).resolve().parent / "hostile_server.py"
BOUND = 60.0  # seconds before a test counts as hung (a bound, not a timing claim)


def hostile_entry(tmp_path: Path, spec: dict[str, Any], name: str = "h", **extra: Any) -> dict[str, Any]:
    """The ``mcpServers`` entry that runs ``hostile_server.py`` with ``spec`` (written to a file)."""
    path = tmp_path / f"spec-{name}.json"
    path.write_text(json.dumps(spec))
    return {"command": sys.executable, "args": [str(HOSTILE), str(path)], **extra}


def run_bounded(body: Callable[[], Any]) -> None:
    """Run ``anyio.run(body)`` in a thread; fail if it has not finished within BOUND (a loop held by a backtracking
    regex never gets to a timeout of its own)."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            anyio.run(body)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(BOUND)
    assert not t.is_alive(), f"the gateway did not finish within {BOUND:g} s (its event loop was held)"
    if failure:
        raise failure[0]


async def _mounted(entry: dict[str, Any], name: str = "h") -> tuple[ToolRegistry, Any]:
    registry = ToolRegistry()
    config = parse_upstreams({"mcpServers": {name: entry}})[0]
    connected = await connect_provider(McpProvider(config), registry)
    return registry, connected


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.seen.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that serves a schema to anyone who asks, and records who did."""
    seen: list[str] = []
    handler = type("H", (_RecordingHandler,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_refs_to_urls_and_files_in_upstream_schemas_are_never_fetched(tmp_path, schema_host):
    base, seen = schema_host
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "integer"}')
    spec = {"tools": [
        {"name": "remote_in", "inputSchema": {"type": "object", "properties": {"x": {"$ref": f"{base}/in.json"}}}},
        {"name": "file_out", "inputSchema": {"type": "object"},
         "outputSchema": {"type": "object", "properties": {"x": {"$ref": secret.as_uri()}}}},
        {"name": "local_ok", "inputSchema": {"type": "object", "$defs": {"s": {"type": "string"}},
                                             "properties": {"x": {"$ref": "#/$defs/s"}}}},
    ], "answers": {"file_out": {"content": [], "structuredContent": {"x": 1}}}}

    async def body() -> None:
        registry, connected = await _mounted(hostile_entry(tmp_path, spec))
        try:
            # Whatever got mounted is called, so a reference resolved lazily would be fetched now.
            for name, params in (("mcp__h__remote_in", {"x": "a"}), ("mcp__h__file_out", {}), ("mcp__h__local_ok", {"x": 1})):
                if name in registry:
                    await registry.execute_detailed(name, params)
            assert "mcp__h__local_ok" in registry
            problems = (await connected.health()).details["tool_problems"]
            assert "mcp__h__remote_in" not in registry and "mcp__h__file_out" not in registry
            assert "never fetched" in problems["remote_in"] and f"{base}/in.json" in problems["remote_in"]
            assert "never fetched" in problems["file_out"] and "secret.json" in problems["file_out"]
            bad = await registry.execute_detailed("mcp__h__local_ok", {"x": 1})
            assert bad.error.code == "invalid_params"  # the local reference still works
        finally:
            await connected.close()

    run_bounded(body)
    assert seen == []  # nothing ever asked the schema host


async def _backtracking_body(entry: dict[str, Any], answer: str) -> None:
    registry, connected = await _mounted(entry)
    try:
        out = await registry.execute_detailed("mcp__h__out", {})
        assert out.error.code == "invalid_output" and "does not match" in out.error.message
        inp = await registry.execute_detailed("mcp__h__inp", {"s": answer})
        assert inp.error.code == "invalid_params" and "does not match" in inp.error.message
        keys = await registry.execute_detailed("mcp__h__keys", {answer: "v"})
        assert keys.error.code == "invalid_params"
        ok = await registry.execute_detailed("mcp__h__inp", {"s": "aaaa"})
        assert ok.ok, ok.error
        # A pattern outside the linear-time subset is refused at mount, with the reason.
        assert "mcp__h__lookahead" not in registry
        assert "linear-time" in (await connected.health()).details["tool_problems"]["lookahead"]
    finally:
        await connected.close()


def _run_in_child(entry: dict[str, Any], answer: str) -> None:
    anyio.run(_backtracking_body, entry, answer)


def test_a_backtracking_pattern_in_an_upstream_schema_costs_nothing(tmp_path):
    evil = "^(a+)+$"
    answer = "a" * 40 + "!"  # ~2**40 steps for a backtracking engine
    spec = {"tools": [
        {"name": "out", "inputSchema": {"type": "object"},
         "outputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": evil}}}},
        {"name": "inp", "inputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": evil}}}},
        {"name": "keys", "inputSchema": {"type": "object", "patternProperties": {evil: {"type": "string"}},
                                         "additionalProperties": False}},
        {"name": "lookahead", "inputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(?=a)a"}}}},
    ], "answers": {"out": {"content": [], "structuredContent": {"s": answer}}}}
    # In a child process: a backtracking regex holds the GIL, so a thread could not even be waited for.
    child = multiprocessing.get_context("spawn").Process(target=_run_in_child, args=(hostile_entry(tmp_path, spec), answer))
    child.start()
    child.join(BOUND)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"the gateway did not answer within {BOUND:g} s: a pattern backtracked on its event loop")
    assert child.exitcode == 0, "the child's assertion failed (its traceback is in the captured stderr)"


def test_a_huge_tool_list_is_capped_and_a_relisting_redefines_only_what_changed(tmp_path):
    spec = {"tools": [{"name": "grow", "inputSchema": {"type": "object"}}], "generate": 3000, "grow": "grow"}

    async def body() -> None:
        registry, connected = await _mounted(hostile_entry(tmp_path, spec, maxTools=200))
        try:
            health = await connected.health()
            assert health.tools == 200 and len([t for t in registry.list() if "context:h" in t.tags]) == 200
            assert health.details["tools_left_out"] == 2801
            assert any("maxTools" in why for why in health.details["tool_problems"].values())
            before = {t.name: t for t in registry.list()}
            defined_on: list[bool] = []
            real_define = connected._define

            def spy(name: str, t: Any) -> Any:
                defined_on.append(threading.current_thread() is threading.main_thread())
                return real_define(name, t)

            connected._define = spy
            changed = anyio.Event()

            async def on_change() -> None:
                changed.set()

            connected.on_tools_changed(on_change)
            await registry.execute_detailed("mcp__h__grow", {})
            with anyio.fail_after(BOUND):
                await changed.wait()
            assert "mcp__h__grown_0" in registry and "mcp__h__gen_197" in registry and "mcp__h__gen_198" not in registry
            assert defined_on == [False]  # one tool defined again (the new one), in a worker thread
            for t in registry.list():
                if t.name in before:
                    assert t is before[t.name]  # the same definition: its validators were not compiled again
        finally:
            await connected.close()

    run_bounded(body)


def test_an_endless_line_closes_the_connection_and_stops_the_upstream(tmp_path):
    markers = tmp_path / "markers"
    spec = {"tools": [{"name": "endless", "inputSchema": {"type": "object"}},
                      {"name": "fine", "inputSchema": {"type": "object"}}],
            "endless": ["endless"], "markers": str(markers)}

    async def body() -> None:
        registry, connected = await _mounted(hostile_entry(tmp_path, spec, maxLineBytes=1024 * 1024, timeout=30))
        try:
            d = await registry.execute_detailed("mcp__h__endless", {})
            assert d.error.code == "upstream_lost", d.error
            assert "maxLineBytes" in d.error.message
            pid = int((markers / "endless.called").read_text())
            with anyio.fail_after(BOUND):  # the violating process is stopped, not left writing
                while alive(pid):
                    await anyio.sleep(0.05)
            again = await registry.execute_detailed("mcp__h__fine", {})  # a new connection serves
            assert again.ok, again.error
        finally:
            await connected.close()

    run_bounded(body)


class _PromptShelf:
    """What the gateway serves as prompts (the two methods it calls on the MCP server that installs it)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add_prompt(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.names.add(name)

    def remove_prompt(self, name: str) -> bool:
        return self.names.discard(name) is None


@pytest.mark.parametrize("order", [("x", "x_"), ("x_", "x")])
def test_two_servers_whose_tools_map_to_one_name_mount_neither(tmp_path, order, capfd):
    specs = {"x": {"tools": [{"name": "_y", "inputSchema": {"type": "object"}},
                             {"name": "only_x", "inputSchema": {"type": "object"}}], "prompts": ["_p", "px"]},
             "x_": {"tools": [{"name": "y", "inputSchema": {"type": "object"}},
                              {"name": "only_x_", "inputSchema": {"type": "object"}}], "prompts": ["p"]}}
    document = {"mcpServers": {name: hostile_entry(tmp_path, specs[name], name=name) for name in order}}

    async def body() -> None:
        registry = ToolRegistry()
        gateway = Gateway(parse_upstreams(document), registry)
        await gateway.start()
        shelf = _PromptShelf()
        gateway.install(shelf)
        try:
            assert shelf.names == {"mcp__x__px"}  # mcp__x___p is both x's "_p" and x_'s "p": neither
            names = {t.name for t in registry.list()}
            assert "mcp__x___y" not in names
            assert {"mcp__x__only_x", "mcp__x___only_x_"} <= names
            health = {h.provider_id: h for h in await gateway.health()}
            assert "tool 'y' of server 'x_'" in health["x"].details["tool_problems"]["_y"]
            assert "tool '_y' of server 'x'" in health["x_"].details["tool_problems"]["y"]
        finally:
            await gateway.aclose()

    run_bounded(body)
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(document))
    cmd_check(argparse.Namespace(file=str(path), json=False, timeout=None, tools=False))
    out = capfd.readouterr().out
    assert "tool '_y': left out: it maps to 'mcp__x___y'" in out and "tool 'y': left out: it maps to 'mcp__x___y'" in out
