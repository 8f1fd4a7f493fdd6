"""Task-capable tools the task tests serve (``--module task_fixture_tools:registry``).

Cross-process signalling uses marker files in the ``dir`` argument, as in
``fixture_tools.py``: ``task_slow`` writes ``<dir>/started`` (the task id and
receipt id) once it runs as a task, waits for ``<dir>/release``, and writes
``<dir>/cancelled`` when its cancellation reaches it. ``task_idem`` does the
same, declared ``idempotent``, and appends one line per run to ``<dir>/runs``
(the effect counter). With ``TASK_FIXTURE_DROP=task_idem`` in the environment
the module leaves that tool out (a tool no longer registered after a restart),
and with ``TASK_FIXTURE_IDEM_STRICT=1`` its schema also requires ``n`` (recorded
arguments that no longer validate).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio

from openfunctions.core import ToolRegistry, define_tool

_DIR_IN = {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}


async def _slow(p, ctx):
    d = Path(p["dir"])
    d.mkdir(parents=True, exist_ok=True)
    task = ctx.task
    task_id = await task.escalate() if task is not None else None
    (d / "started").write_text(json.dumps({"task_id": task_id, "receipt_id": ctx.receipt_id}))
    try:
        while not (d / "release").exists():
            await anyio.sleep(0.01)
    except anyio.get_cancelled_exc_class():
        (d / "cancelled").write_text("cancelled")
        raise
    return {"released": True}


async def _idem(p, ctx):
    d = Path(p["dir"])
    d.mkdir(parents=True, exist_ok=True)
    task = ctx.task
    task_id = await task.escalate() if task is not None else None
    with (d / "runs").open("a") as f:
        f.write(json.dumps({"task_id": task_id, "receipt_id": ctx.receipt_id, "principal": ctx.principal,
                            "scopes": sorted(ctx.scopes)}) + "\n")
    runs = len((d / "runs").read_text().splitlines())
    (d / "started").write_text(json.dumps({"task_id": task_id, "receipt_id": ctx.receipt_id}))
    while not (d / "release").exists():
        await anyio.sleep(0.01)
    return {"run": runs, "receipt_id": ctx.receipt_id}


async def _quick(p, ctx):
    task = ctx.task
    if task is not None:
        await task.escalate()
    return {"answer": 42, "text": p.get("text", "")}


async def _ask(p, ctx):
    task = ctx.task
    answers = await task.request_input({"color": {"method": "elicitation/create", "params": {
        "message": "Favourite colour?", "requestedSchema": {"type": "object", "properties": {"color": {"type": "string"}}}}}})
    return {"color": answers["color"]["content"]["color"]}


async def _big(p, ctx):
    task = ctx.task
    if task is not None:
        await task.escalate()
    return "x" * int(p.get("size", 400_000))


_ANSWER_OUT = {"type": "object", "properties": {"answer": {"type": "integer"}, "text": {"type": "string"}},
               "required": ["answer", "text"]}

tools = [
    define_tool(name="task_slow", description="Runs as a task until released (marker files); an effectful write.",
                input_schema=_DIR_IN, handler=_slow, capability={"effect": "write", "task_support": "optional"}),
    define_tool(name="task_idem", description="Like task_slow, declared idempotent; counts its runs.",
                input_schema={**_DIR_IN, "required": ["dir", "n"]} if os.environ.get("TASK_FIXTURE_IDEM_STRICT")
                else _DIR_IN, handler=_idem,
                capability={"effect": "write", "idempotent": True, "task_support": "optional"}),
    define_tool(name="task_quick", description="Becomes a task and answers at once.",
                input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
                output_schema=_ANSWER_OUT, handler=_quick,
                capability={"effect": "read", "parallel_safe": True, "task_support": "optional"}),
    define_tool(name="task_required", description="Runs only as a task.", handler=_quick,
                output_schema=_ANSWER_OUT, capability={"effect": "read", "task_support": "required"}),
    define_tool(name="task_ask", description="Asks the client a question through the task.", handler=_ask,
                capability={"effect": "read", "task_support": "optional"}),
    define_tool(name="task_big", description="Becomes a task and answers with a large text.", handler=_big,
                input_schema={"type": "object", "properties": {"size": {"type": "integer"}}},
                capability={"effect": "read", "task_support": "optional"}),
    define_tool(name="plain", description="A synchronous tool.", handler=_quick,
                output_schema=_ANSWER_OUT, capability={"effect": "read", "parallel_safe": True}),
]

registry = ToolRegistry([t for t in tools if t.name not in os.environ.get("TASK_FIXTURE_DROP", "").split(",")])
