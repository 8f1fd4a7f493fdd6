"""Task-augmented calls of protocol 2025-11-25 (the handshake era's tasks, "v1"), on the same durable tasks.

A 2025-11-25 client asks for a task by putting ``task: {"ttl": ms}`` in the
``tools/call`` params of a tool whose ``execution.taskSupport`` is
``optional`` or ``required``; it then polls ``tasks/get``, waits with
``tasks/result``, enumerates with ``tasks/list`` and stops with
``tasks/cancel``. Those tasks are the same :class:`~._tasks.TaskManager`
tasks the 2026-07-28 extension serves: journaled, principal-scoped,
surviving restarts, never re-run.

Why a middleware: the SDK's runner validates and *sieves* every spec
method's result against the negotiated version's surface
(``mcp/server/runner.py`` ``ServerRunner._serialize`` →
``mcp_types.methods.serialize_server_result``), and its 2025-11-25 surface
types a ``tools/call`` result as ``CallToolResult`` only
(``SERVER_RESULTS[("tools/call", "2025-11-25")]``): a ``CreateTaskResult``
returned by the ``tools/call`` handler fails that validation ("Handler
returned an invalid result"). A server middleware that answers without
calling ``call_next`` owns its result, envelope included (the runner's
documented contract), so the v1 shapes are answered here, before the sieve.
``tasks/get|result|list|cancel`` at 2025-11-25 are answered here too (the
2026-07-28 handlers keep their own shapes, and ``tasks/result``/``tasks/list``
stay ``-32601`` there, as SEP-2663 requires). ``initialize`` at 2025-11-25
gets ``capabilities.tasks`` (``list``, ``cancel``, ``requests.tools.call``).

Shapes (2025-11-25 schema): ``CreateTaskResult`` = ``{"task": Task}``;
``Task`` = ``taskId``, ``status``, ``statusMessage``?, ``createdAt``,
``lastUpdatedAt``, ``ttl`` (ms: what the request's ``task.ttl`` asked, within
``[MIN_TTL_MS, the server's TTL]``; the server's when it asked none; refused, ``-32602``, when not a
non-negative integer),
``pollInterval`` (ms). ``tasks/result`` blocks until the task is terminal and
answers the ``CallToolResult`` (with ``_meta["io.modelcontextprotocol/related-task"]``),
or the task's JSON-RPC error. ``tasks/cancel`` of a terminal task is
``-32602``. A ``task`` on a tool whose task support is ``forbidden`` is
``-32601``. Not served in v1: input requests during a task (a handler's
``request_input`` fails with a clear error; use the 2026-07-28 extension) and
``notifications/tasks/status`` (clients poll).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND

from . import _task_records as rec
from ._task_records import TaskState

V1_VERSION = "2025-11-25"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
LIST_PAGE = 100
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def v1_task(task: TaskState, message: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"taskId": task.task_id, "status": task.status, "createdAt": task.created_at,
                           "lastUpdatedAt": task.last_updated_at, "ttl": task.ttl_ms, "pollInterval": task.poll_interval_ms}
    if message or task.message:
        out["statusMessage"] = message or task.message
    return out


class TasksV1:
    """Server middleware answering the 2025-11-25 task methods for an ``OpenFunctionsServer``."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        method = ctx.method
        if method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") == V1_VERSION:
                caps = result.get("capabilities")
                if isinstance(caps, dict):
                    result["capabilities"] = {**caps, "tasks": dict(CAPABILITY)}
            return result
        if ctx.protocol_version != V1_VERSION:
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if method == "tools/call" and isinstance(params.get("task"), Mapping):
            return await self._call(ctx, params)
        handler = {"tasks/get": self._get, "tasks/result": self._result, "tasks/list": self._list,
                   "tasks/cancel": self._cancel}.get(method)
        if handler is None:
            return await call_next(ctx)
        return await handler(ctx, params)

    # -- tools/call with a task ------------------------------------------------------

    async def _call(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        from openfunctions.core import ToolNotFound

        from ._tasks import TaskHandle

        s = self.server
        try:
            p = types.CallToolRequestParams.model_validate({k: v for k, v in params.items() if k != "task"}, by_name=False)
        except Exception as exc:
            raise MCPError(INVALID_PARAMS, f"Invalid tools/call params: {str(exc)[:300]}") from None
        try:
            tool = s.registry.get(p.name)
        except ToolNotFound as exc:
            raise MCPError(INVALID_PARAMS, exc.message[0].upper() + exc.message[1:], data=exc.to_dict()) from None
        support = tool.capability.task_support if tool.capability is not None else "forbidden"
        if support == "forbidden":
            raise MCPError(METHOD_NOT_FOUND, f"tool {tool.name!r} does not support task-augmented calls "
                           "(its execution.taskSupport is forbidden): call it without `task`")
        ttl_ms = s.tasks.ttl_for(params["task"].get("ttl"))  # refused before anything runs
        run = s.tasks.new_run(tool.name, s._principal_for(ctx), **s._rerun_authority(tool, p.arguments))
        run.v1 = True
        run.ttl_ms = ttl_ms
        tctx = s._execution_context(ctx, TaskHandle(run))
        executor = s.registry.executor
        s._inflight.add(run.scope)
        s.tasks.start(run, lambda: executor.execute_detailed(tool, p.arguments, tctx, receipt_id=run.receipt_id),
                      on_exit=lambda r: s._inflight.discard(r.scope))
        run.escalate.set()  # the client asked for a task: it is one at once (no immediate-result shortcut in v1)
        try:
            task = await s.tasks.wait_or_create(run)
        except BaseException:
            if run.task_id is None:
                run.scope.cancel()
            raise
        assert task is not None
        return {"task": v1_task(task), "_meta": {RELATED_TASK_META: {"taskId": task.task_id}}}

    # -- tasks/* ------------------------------------------------------------------------

    async def _lookup(self, ctx: Any, params: Mapping[str, Any]) -> TaskState:
        task: TaskState = await self.server.tasks.lookup(params.get("taskId"), self.server._principal_for(ctx))
        return task

    async def _get(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        task = await self._lookup(ctx, params)
        run = self.server.tasks.runs.get(task.task_id)
        return v1_task(task, run.progress_message if run is not None and task.status == rec.WORKING else None)

    async def _result(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        task = await self._lookup(ctx, params)
        while not task.terminal:  # blocks until the task ends, as tasks/result does in 2025-11-25
            await anyio.sleep(min(0.05, task.poll_interval_ms / 1000))
            task = await self._lookup(ctx, params)
        related = {RELATED_TASK_META: {"taskId": task.task_id}}
        if task.status == rec.COMPLETED:
            result = (await self.server.tasks.get(task))["result"]
            return {**result, "_meta": {**(result.get("_meta") or {}), **related}}
        error = task.error or {"code": INTERNAL_ERROR, "message": task.message or f"the task ended {task.status}"}
        raise MCPError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message")),
                       data={**(error.get("data") or {}), "taskId": task.task_id, "status": task.status})

    async def _list(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        principal = self.server._principal_for(ctx)
        mine = sorted(await self.server.tasks.store.of_principal(principal), key=lambda t: (t.created_at, t.task_id))
        cursor = params.get("cursor")
        start = 0
        if cursor is not None:
            if not (isinstance(cursor, str) and cursor.isdigit() and int(cursor) <= len(mine)):
                raise MCPError(INVALID_PARAMS, "tasks/list: invalid cursor (use the nextCursor of the previous page)")
            start = int(cursor)
        page = mine[start:start + LIST_PAGE]
        out: dict[str, Any] = {"tasks": [v1_task(t) for t in page]}
        if start + LIST_PAGE < len(mine):
            out["nextCursor"] = str(start + LIST_PAGE)
        return out

    async def _cancel(self, ctx: Any, params: Mapping[str, Any]) -> dict[str, Any]:
        task = await self._lookup(ctx, params)
        if task.terminal:
            raise MCPError(INVALID_PARAMS, f"task {task.task_id} is already {task.status}: it cannot be cancelled",
                           data={"taskId": task.task_id, "status": task.status})
        await self.server.tasks.cancel(task)
        with anyio.move_on_after(5):  # the handler sees the cancellation and the task settles
            while not task.terminal:
                await anyio.sleep(0.02)
                task = await self._lookup(ctx, params)
        return v1_task(task)


__all__ = ["TasksV1", "V1_VERSION", "CAPABILITY", "RELATED_TASK_META", "v1_task"]
