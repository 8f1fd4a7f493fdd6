"""Tools the server tests serve (``--module fixture_tools:registry``, with tests/servers on PYTHONPATH).

Cross-process signalling uses marker files in the ``dir`` argument: a tool
creates ``<dir>/started`` when it is running, waits for ``<dir>/release``, and
creates ``<dir>/cancelled`` in its cancellation path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio

from openfunctions.core import ToolError, ToolRegistry, define_tool

ADD_OUTPUT = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"], "additionalProperties": False}


async def _add(p, ctx):
    return {"sum": p["a"] + p["b"]}


async def _fail(p, ctx):
    raise ToolError("the disk is full (fixture failure)", effect_happened=False)


async def _crash(p, ctx):
    raise RuntimeError("unexpected fixture crash")


def _printer(p, ctx):
    print("a tool printed this to stdout")
    sys.stdout.flush()
    os.write(1, b"raw write to fd 1\n")
    subprocess.run([sys.executable, "-c", "print('a child process printed this')"], check=True)
    return {"printed": True}


async def _progress(p, ctx):
    n = p.get("steps", 3)
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}/{n}")
    return {"steps": n}


async def _slow(p, ctx):
    d = Path(p["dir"])
    d.mkdir(parents=True, exist_ok=True)
    await ctx.report_progress(0, 1, "started")
    (d / "started").write_text(ctx.receipt_id or "")
    try:
        while not (d / "release").exists():
            await anyio.sleep(0.01)
    except anyio.get_cancelled_exc_class():
        (d / "cancelled").write_text("cancelled")
        raise
    (d / "finished").write_text("finished")
    return {"finished": True}


_SLOW_IN = {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}

tools = [
    define_tool(
        name="add",
        title="Add two integers",
        description="Add a and b.",
        input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        output_schema=ADD_OUTPUT,
        handler=_add,
        annotations={"read_only_hint": True, "open_world_hint": False},
        meta={"dev.example/owner": "tests", "dev.example/cost": 1},
        capability={"effect": "read", "parallel_safe": True, "idempotent": True},
    ),
    define_tool(name="fail", description="Always fails cleanly.", handler=_fail),
    define_tool(name="crash", description="Raises an unexpected exception.", handler=_crash),
    define_tool(name="printer", description="Prints to stdout three ways.", handler=_printer),
    define_tool(
        name="progress",
        description="Reports progress steps.",
        input_schema={"type": "object", "properties": {"steps": {"type": "integer", "minimum": 1}}},
        handler=_progress,
    ),
    define_tool(name="slow", description="Runs until released (marker files).", input_schema=_SLOW_IN, handler=_slow),
    define_tool(
        name="slow_read",
        description="Like slow, but a parallel-safe read.",
        input_schema=_SLOW_IN,
        handler=_slow,
        capability={"effect": "read", "parallel_safe": True},
    ),
]

registry = ToolRegistry(tools)


def factory():
    return list(tools)


not_tools = 42
