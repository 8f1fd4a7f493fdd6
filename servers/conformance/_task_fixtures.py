"""Tasks fixtures (io.modelcontextprotocol/tasks, SEP-2663)."""

from __future__ import annotations

from typing import Any

import anyio

from openfunctions.core import ToolExecutionContext, ToolResult

from ._common import (
    _FIXTURE,
)
from ._input_required import _accepted, _elicit_request, _input_required, _mrtr_inputs

# -- tasks fixtures (io.modelcontextprotocol/tasks, SEP-2663) -----------------------
#
# Task-capable tools run through the executor like any other; the server decides
# whether a call becomes a task. These fixtures ask for it explicitly
# (``escalate``) so the suite's timing-sensitive checks are deterministic, and ask
# for input mid-task through ``request_input`` (``tasks/update`` answers it).

_TASK_OPTIONAL = {**_FIXTURE, "task_support": "optional"}
_TASK_REQUIRED = {**_FIXTURE, "task_support": "required"}


def _task(ctx: ToolExecutionContext) -> Any:
    return ctx.task


async def _slow_compute(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    seconds = float(params.get("seconds", 1))
    task = _task(ctx)
    if seconds > 0 and task is not None:
        await task.escalate()
    await anyio.sleep(seconds)
    return ToolResult.text(f"computed {params.get('label', 'result')!s} after {seconds:g}s")


async def _failing_job(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    await anyio.sleep(1)
    return ToolResult.text("failing_job failed as designed: the job reported an error", is_error=True)


async def _protocol_error_job(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    raise RuntimeError("protocol_error_job crashed as designed")


def _confirm_request(message: str, fields: dict[str, str]) -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {k: {"type": t} for k, t in fields.items()},
                                "required": list(fields)},
        },
    }


async def _confirm_delete(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    filename = str(params.get("filename"))
    if task is None:
        return ToolResult.text(f"not deleting {filename}: confirming needs the tasks extension", is_error=True)
    answers = await task.request_input({"confirm": _confirm_request(f"Delete {filename}?", {"confirm": "boolean"})})
    if _accepted(answers["confirm"], "confirm"):
        return ToolResult.text(f"deleted {filename} (nothing real: a conformance fixture)")
    return ToolResult.text(f"kept {filename}")


async def _multi_input(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is None:
        return ToolResult.text("multi_input asks two questions at once: it needs the tasks extension", is_error=True)
    answers = await task.request_input({
        "name": _confirm_request("What is your name?", {"name": "string"}),
        "confirm": _confirm_request("Confirm?", {"confirm": "boolean"}),
    })
    return ToolResult.text(f"name={_accepted(answers['name'], 'name')} confirm={_accepted(answers['confirm'], 'confirm')}")


async def _tool_with_task(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    # SEP-2663 + SEP-2322: gather input synchronously (an InputRequiredResult), then become a task.
    responses, _ = _mrtr_inputs(ctx)
    if "user_name" not in responses:
        return _input_required({"user_name": _elicit_request("What is your name?", "name")})
    name = _accepted(responses["user_name"], "name")
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    await anyio.sleep(0.2)
    return ToolResult.text(f"Hello, {name}! (answered before the task, finished inside it)")

