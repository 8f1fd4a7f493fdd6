"""MCP tasks (``io.modelcontextprotocol/tasks``, SEP-2663): durable, principal-scoped, re-run only when idempotent.

A ``tools/call`` of a tool whose capability declares ``task_support``
(``optional`` or ``required``), from a request that declared the extension
(``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``, protocol
2026-07-28), starts executing at once, through the executor like any call.
Task creation is *server-directed*:

- if the call finishes within ``task_after_s`` (default 1 s) its result is
  returned as is (the spec's immediate-result shortcut; an
  ``InputRequiredResult`` of a multi-round-trip tool stays synchronous too);
- otherwise, or as soon as the handler asks for it (:meth:`TaskHandle.escalate`,
  or :meth:`TaskHandle.request_input`), the task is created: its ``task.created``
  record is fsynced in the task journal *before* the ``CreateTaskResult``
  (``resultType: "task"``) is sent, so ``tasks/get`` for that id resolves.

The call keeps running; its end is a ``task.settled`` record: ``completed``
with the ``CallToolResult`` (a tool error is ``completed`` with
``isError: true``), ``failed`` with a JSON-RPC error (the handler raised, or
the receipt could not be persisted), or ``cancelled`` (``tasks/cancel``
cancels the handler's scope; the executor records a ``cancelled`` receipt).

``tasks/get`` answers from the fold of the records (``_task_records.apply``),
``tasks/update`` delivers ``inputResponses`` to a handler parked in
:meth:`TaskHandle.request_input`, ``tasks/cancel`` acknowledges with an empty
result. A task is visible only to the principal that created it: anyone
else's ``tasks/get`` gets exactly the unknown-id error (``-32602``). Requests
that did not declare the extension get ``-32021`` on ``tasks/*``, and a
``required`` tool refuses them the same way. ``tasks/result`` and
``tasks/list`` (the 2025-11-25 methods SEP-2663 removed) are not served:
``-32601``.

After a restart the journal is folded again: finished tasks answer as
before until their TTL; a task that was still running when the process
ended is settled ``failed`` (``recovered: true``), its error carrying
certainty ``unknown`` and the execution receipt recovery wrote for it. It
is not re-run — unless its tool is declared ``idempotent``: then the
``task.created`` record kept the call's arguments and trusted scopes, and
the restarted server (file backend) re-runs the call once under a new
receipt (:meth:`TaskManager.resume`), its ``task.status`` record naming the
uncertain call in ``rerun_of``. A tool no longer registered, or not
idempotent any more, fails the task as before, with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    SubscriptionsListenRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from openfunctions.core import canonical_json, new_id

from . import _task_records as rec
from ._task_listen import TaskListen
from ._task_records import TaskState
from ._tasks_store import FileTaskStore, RerunPlan, TaskStore, fold

log = structlog.get_logger("openfunctions.servers.tasks")

EXTENSION_ID = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
TASK_METADATA_KEY = "openfunctions.task"
"""Deprecated: the :class:`TaskHandle` is ``ctx.task`` (this metadata key is no longer written)."""

DEFAULT_TTL_MS = 24 * 3600 * 1000
#: The shortest TTL a client may ask for: a task forgotten before its first poll would help no one.
MIN_TTL_MS = 1000
DEFAULT_POLL_INTERVAL_MS = 1000
DEFAULT_TASK_AFTER_S = 1.0

REQUIRED_CAPABILITIES: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}}
RESULT_MEDIA_TYPE = "application/json"


def tasks_path(execution_journal: Path) -> Path:
    """The task journal beside an execution journal: ``work.journal`` -> ``work.tasks.journal``."""
    name = execution_journal.name
    stem = name[: -len(".journal")] if name.endswith(".journal") else name
    return execution_journal.with_name(f"{stem}.tasks.journal")


def declared_tasks(ctx: Any) -> bool:
    """Whether this request declared the tasks extension (2026-07-28 per-request capabilities)."""
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    meta = getattr(ctx, "meta", None)
    caps = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
    if isinstance(caps, Mapping):
        ext = caps.get("extensions")
        return isinstance(ext, Mapping) and EXTENSION_ID in ext
    session_caps = getattr(getattr(ctx, "session", None), "client_capabilities", None)
    ext = getattr(session_caps, "extensions", None)
    return isinstance(ext, Mapping) and EXTENSION_ID in ext


def missing_extension(what: str) -> MCPError:
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} needs the client capability extensions[{EXTENSION_ID!r}], which this request did not declare",
        data=dict(REQUIRED_CAPABILITIES),
    )


class TaskHandle:
    """What a handler that may run as a task finds in ``ctx.task`` (a ``core.TaskChannel``; ``None`` otherwise).

    A handler unaware of tasks needs none of it: a call still running after
    ``task_after_s`` becomes a task by itself.
    """

    def __init__(self, run: _Run) -> None:
        self._run = run

    @property
    def task_id(self) -> str | None:
        """The task's id once the call has become a task, else ``None``."""
        return self._run.task_id

    async def escalate(self) -> str:
        """Become a task now; returns the task id once the task is durably created."""
        run = self._run
        run.escalate.set()
        await run.created.wait()
        if run.task_id is None:
            raise RuntimeError("the task could not be created") from run.create_error
        return run.task_id

    async def request_input(self, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Park the task in ``input_required`` until the client answered every request (``tasks/update``).

        ``requests``: key -> ``{"method": "elicitation/create" | "sampling/createMessage" | ..., "params": {...}}``.
        Keys must be unique over the task's life. Returns key -> the client's response.
        """
        await self.escalate()
        return await self._run.manager._ask(self._run, dict(requests))

    async def set_message(self, message: str) -> None:
        """A status message ``tasks/get`` shows while the task works (kept in memory, not journaled)."""
        self._run.progress_message = message


@dataclass(eq=False)
class _Run:
    manager: TaskManager
    tool: str
    principal: str | None
    receipt_id: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    escalate: asyncio.Event = field(default_factory=asyncio.Event)
    created: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task_id: str | None = None
    create_error: BaseException | None = None
    detailed: Any = None
    failure: BaseException | None = None
    cancel_requested: bool = False
    shutdown: bool = False
    v1: bool = False  # a 2025-11-25 task-augmented call (no input requests during the task)
    ttl_ms: int | None = None  # what the client asked for, within bounds (TaskManager.ttl_for); None: the server's
    # an idempotent tool's call keeps these in its task.created record, so recovery can re-run it
    arguments: dict[str, Any] | None = None
    scopes: tuple[str, ...] = ()
    rerun: bool = False  # this run is recovery's re-run of the task's call
    progress_message: str | None = None
    # input_required: outstanding key -> request, answers so far, keys ever used
    pending: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    used_keys: set[str] = field(default_factory=set)
    answered: asyncio.Condition = field(default_factory=asyncio.Condition)


class TaskManager:
    """The tasks of one server: state (the fold), the task journal, and the running calls."""

    def __init__(self, *, ttl_ms: int = DEFAULT_TTL_MS, poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
                 task_after_s: float = DEFAULT_TASK_AFTER_S) -> None:
        self.ttl_ms = int(ttl_ms)
        self.poll_interval_ms = int(poll_interval_ms)
        self.task_after_s = float(task_after_s)
        #: The records and their fold (``_tasks_store.py``): memory only until :meth:`open` or :meth:`use_store`.
        self.store: TaskStore = FileTaskStore()
        self.path: Path | None = None  # the task journal (file backend), or the local anchor (database backend)
        self.runs: dict[str, _Run] = {}
        self.recovered: list[str] = []
        self.reruns: list[TaskState] = []
        self._jobs: set[asyncio.Task[None]] = set()
        self.listen: TaskListen | None = None  # notifications/tasks streams (serve_listen)
        #: Where results past INLINE_RESULT_BYTES go: an ArtifactStoreProtocol; by default the data dir's
        #: ``artifacts/`` store, opened with the first large result (or set one before serving).
        self.artifacts: Any = None
        self._own_artifacts = False

    def serve_listen(self, lowlevel: Any, principal_for: Callable[[Any], str | None], bus: Any = None) -> TaskListen:
        """Serve ``subscriptions/listen`` on ``lowlevel`` (an SDK low-level server): task status notifications.

        ``principal_for(ctx)`` names who asks (the server's rule); ``bus``: the
        server's SDK ``SubscriptionBus`` of core change events (list changes),
        carried on the same streams. Returns the handler (``attach`` more buses).
        """
        self.listen = TaskListen(self, principal_for=principal_for, declared=declared_tasks)
        if bus is not None:
            self.listen.attach(bus)
        lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, self.listen)
        return self.listen

    # -- durable state ---------------------------------------------------------

    async def open(self, path: Path, *, recovered_receipts: Mapping[str, Any], find_receipts: Callable[[set[str]], Awaitable[dict[str, Any]]],
                   write_receipt: Callable[[dict[str, Any]], Any], plan: RerunPlan | None = None) -> None:
        """Use the task journal file at ``path``: fold it, and settle what the last process left running.

        ``recovered_receipts``: receipt id -> the ``unknown`` receipt the
        execution journal's recovery wrote this open; ``find_receipts(ids)``
        looks up receipts already in the execution journal;
        ``write_receipt(start)`` writes a recovered receipt for a call that
        left none (a declared read journals no start). ``plan(task)``: whether
        to re-run a task instead (the server's rule: its tool is idempotent);
        those wait in :attr:`reruns` until :meth:`resume` starts them.
        """
        self.path = path
        store = FileTaskStore(path)
        self.recovered = await store.open(recovered_receipts=recovered_receipts, find_receipts=find_receipts,
                                          write_receipt=write_receipt, plan=plan)
        self.reruns = list(store.reruns)
        self.store = store

    def resume(self, start: Callable[[_Run, TaskState], None]) -> list[str]:
        """Start the re-runs recovery decided (once the executor journals): ``start(run, task)`` runs the call.

        Each run is already a task (its id, its new receipt id), so it settles
        like any task. Returns the task ids re-run.
        """
        ids = []
        for task in self.reruns:
            run = _Run(manager=self, tool=task.tool, principal=task.principal, receipt_id=str(task.receipt_id),
                       task_id=task.task_id, arguments=task.arguments, scopes=task.scopes, rerun=True)
            run.escalate.set()
            run.created.set()
            self.runs[task.task_id] = run
            start(run, task)
            ids.append(task.task_id)
        self.reruns = []
        if ids:
            log.warning("tasks_rerun", count=len(ids), task_ids=ids[:20])
        return ids

    def use_store(self, store: TaskStore, anchor: Path | None = None) -> None:
        """Keep tasks in ``store`` (the database backend: ``DatabaseTaskStore``) instead of the task journal file.

        ``anchor``: a local path whose data dir holds the default artifact
        store for large results (when no ``artifacts`` store was set).
        """
        self.store = store
        self.path = anchor

    async def _record(self, type_: str, data: dict[str, Any]) -> bool:
        """Make a record durable (the store folds it); ``False``: the task was settled already, nothing written."""
        written = await self.store.record(type_, data)
        if not written:
            log.warning("task_record_not_written", task_id=data["task_id"], type=type_,
                        reason="the task was already settled (another replica's recovery took it: its record stands)")
        elif self.listen is not None:
            self.listen.changed(data["task_id"])
        return written

    async def close(self) -> None:
        if self.listen is not None:
            self.listen.close()
        if self._jobs:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await asyncio.gather(*self._jobs, return_exceptions=True)
        self.path = None
        await self.store.close()
        if self._own_artifacts and self.artifacts is not None:
            self.artifacts.close()
            self.artifacts, self._own_artifacts = None, False

    # -- lookups ---------------------------------------------------------------

    async def find(self, task_id: Any) -> TaskState | None:
        """The task if it exists and has not expired (anyone's: callers check the principal)."""
        task = await self.store.get(task_id) if isinstance(task_id, str) else None
        return None if task is None or task.expired() else task

    async def lookup(self, task_id: Any, principal: str | None) -> TaskState:
        """The task, if it exists, has not expired and belongs to ``principal``; else the one unknown-id error."""
        task = await self.find(task_id)
        if task is None or task.principal != principal:
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: unknown task id {str(task_id)[:80]!r}",
                           data={"taskId": task_id if isinstance(task_id, str) else None})
        return task

    async def get(self, task: TaskState) -> dict[str, Any]:
        """:meth:`detailed`, with a result kept as an artifact read back (verified) and inlined."""
        out = self.detailed(task)
        if task.status == rec.COMPLETED and task.result is None:
            out["result"] = await self._stored_result(task)
        return out

    def detailed(self, task: TaskState) -> dict[str, Any]:
        """The ``DetailedTask`` (without ``resultType``); a result kept as an artifact is left to :meth:`get`."""
        out: dict[str, Any] = {
            "taskId": task.task_id,
            "status": task.status,
            "createdAt": task.created_at,
            "lastUpdatedAt": task.last_updated_at,
            "ttlMs": task.ttl_ms,
            "pollIntervalMs": task.poll_interval_ms,
        }
        run = self.runs.get(task.task_id)
        message = task.message
        if task.status == rec.WORKING and run is not None and run.progress_message:
            message = run.progress_message
        if message:
            out["statusMessage"] = message
        if task.status == rec.INPUT_REQUIRED:
            out["inputRequests"] = dict(task.input_requests)
        elif task.status == rec.COMPLETED and task.result is not None:
            out["result"] = task.result
        elif task.status == rec.FAILED:
            out["error"] = task.error or {"code": INTERNAL_ERROR, "message": task.message or "the task failed"}
        if task.receipt_id:
            out["_meta"] = {"dev.openfunctions/task": {"receiptId": task.receipt_id,
                                                       **({"certainty": task.certainty} if task.certainty else {}),
                                                       **({"rerunOf": task.rerun_of} if task.rerun else {})}}
        if task.result_artifact and task.result_sha256:
            out.setdefault("_meta", {}).setdefault("dev.openfunctions/task", {})["resultArtifact"] = {
                "id": task.result_artifact, "sha256": task.result_sha256, "size": task.result_size,
                "mediaType": RESULT_MEDIA_TYPE}
        return out

    async def _stored_result(self, task: TaskState) -> dict[str, Any]:
        """The result kept as an artifact (or, in records older than artifacts, a file beside the journal)."""
        from openfunctions.artifacts import ArtifactError, is_artifact_id

        name = task.result_artifact or ""
        try:
            if is_artifact_id(name):
                store = await self._artifact_store()
                data = await _read_artifact(store, name)
                digest = "sha256:" + await anyio.to_thread.run_sync(lambda: hashlib.sha256(data).hexdigest())  # > 256 KiB
                if digest != task.result_sha256 or len(data) != task.result_size:
                    raise ValueError(f"its content is not the one recorded ({digest}, {len(data)} bytes; the task "
                                     f"recorded {task.result_sha256}, {task.result_size} bytes)")
            elif self.path is not None and name == f"{task.task_id}.json":
                data = await anyio.to_thread.run_sync(self.path.with_name(self.path.name + ".results").joinpath(name).read_bytes)
            else:
                raise ValueError("the task journal names no readable result")
            result = json.loads(data)
        except (OSError, ValueError, ArtifactError) as exc:
            log.error("task_result_unreadable", task_id=task.task_id, artifact=name[:80], error=str(exc)[:300])
            return {"content": [{"type": "text", "text": f"the task completed, but its result ({name[:80]}) cannot be "
                                 f"read back: {str(exc)[:300]}"}], "isError": True}
        return result if isinstance(result, dict) else {"content": [], "isError": True}

    async def _artifact_store(self) -> Any:
        if self.artifacts is None:
            from openfunctions.artifacts import ArtifactStore

            if self.path is None:
                raise OSError("the server is closed")
            # <data-dir>/journal/<profile>.tasks.journal -> <data-dir>/artifacts (the artifacts profile's store)
            self.artifacts = await ArtifactStore(self.path.parent.parent / "artifacts").open()
            self._own_artifacts = True
        return self.artifacts

    # -- running a call that may become a task ---------------------------------

    def ttl_for(self, requested: Any) -> int:
        """The TTL a task gets when its client asks for ``requested`` ms: honoured within
        ``[MIN_TTL_MS, self.ttl_ms]`` (the server's TTL is the most it keeps a task); ``None``: the server's.
        Anything but a non-negative integer is refused (``-32602``) before the call runs."""
        if requested is None:
            return self.ttl_ms
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
            raise MCPError(INVALID_PARAMS, f"task.ttl must be a non-negative integer of milliseconds (or null for the "
                           f"server's {self.ttl_ms}), not {json.dumps(requested)[:60]}")
        return max(MIN_TTL_MS, min(requested, self.ttl_ms))

    def new_run(self, tool: str, principal: str | None, *, arguments: dict[str, Any] | None = None,
                scopes: tuple[str, ...] = ()) -> _Run:
        """``arguments``: only for a tool declared idempotent (kept in the task record so recovery can re-run it)."""
        return _Run(manager=self, tool=tool, principal=principal, receipt_id=new_id("rcpt"),
                    arguments=arguments, scopes=tuple(scopes))

    def start(self, run: _Run, execute: Callable[[], Any], on_exit: Callable[[_Run], None]) -> None:
        """Run ``execute()`` (the executor call) in its own asyncio task: it may outlive the request."""
        job = asyncio.get_running_loop().create_task(self._job(run, execute, on_exit), name=f"tool:{run.tool}")
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _job(self, run: _Run, execute: Callable[[], Any], on_exit: Callable[[_Run], None]) -> None:
        try:
            with run.scope:
                run.detailed = await execute()
        except BaseException as exc:  # the executor settles every outcome; this is a bug or a loop shutdown
            run.failure = exc
        finally:
            run.done.set()
        try:
            if run.task_id is not None or run.escalate.is_set():
                await run.created.wait()
                if run.task_id is not None:
                    with anyio.CancelScope(shield=True):
                        await self._settle(run)
        finally:
            self.runs.pop(run.task_id or "", None)
            on_exit(run)

    async def wait_or_create(self, run: _Run) -> TaskState | None:
        """Wait until the call finishes (``None``: answer synchronously) or becomes a task (its state)."""
        with anyio.move_on_after(self.task_after_s):
            done = asyncio.ensure_future(run.done.wait())
            esc = asyncio.ensure_future(run.escalate.wait())
            try:
                await asyncio.wait({done, esc}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                done.cancel()
                esc.cancel()
        if run.done.is_set() and not run.escalate.is_set():
            return None
        # Decided: it becomes a task. No await between the check above and this line.
        task_id = rec.new_task_id()
        run.task_id = task_id
        run.escalate.set()
        created = rec.created(task_id, principal=run.principal, tool=run.tool, receipt_id=run.receipt_id,
                              ttl_ms=self.ttl_ms if run.ttl_ms is None else run.ttl_ms,
                              poll_interval_ms=self.poll_interval_ms, arguments=run.arguments,
                              scopes=run.scopes if run.arguments is not None else None)
        try:
            await self._record(*created)
        except BaseException as exc:
            run.task_id, run.create_error = None, exc
            run.created.set()
            raise
        self.runs[task_id] = run
        run.created.set()
        return fold([created])[task_id]

    def create_result(self, task: TaskState) -> dict[str, Any]:
        out = self.detailed(task)
        out.pop("_meta", None)
        return {**out, "resultType": "task", "_meta": {"dev.openfunctions/task": {"receiptId": task.receipt_id}}}

    async def _settle(self, run: _Run) -> None:
        assert run.task_id is not None
        task_id, d = run.task_id, run.detailed
        if d is None:
            reason = ("cancelled by tasks/cancel" if run.cancel_requested else
                      "the server shut down before the task finished" if run.shutdown else
                      f"the task's execution ended abnormally: {run.failure!r}")
            if run.cancel_requested:
                await self._record(*rec.settled(task_id, rec.CANCELLED, message=reason, certainty="unknown"))
            else:
                await self._record(*rec.settled(task_id, rec.FAILED, message=reason, certainty="unknown",
                                                error={"code": INTERNAL_ERROR, "message": reason,
                                                       "data": {"receiptId": run.receipt_id, "certainty": "unknown"}}))
            return
        receipt = d.receipt.to_dict()
        if run.rerun and _is_invalid_params(d):
            # The arguments were valid when the task was created; the tool's schema changed since.
            message = f"the re-run after a restart was refused: its recorded arguments no longer validate: {d.error.message}"
            await self._record(*rec.settled(task_id, rec.FAILED, message=message, receipt=receipt,
                                            certainty=receipt["certainty"],
                                            error={"code": INTERNAL_ERROR, "message": message,
                                                   "data": {"code": d.error.code, "certainty": receipt["certainty"],
                                                            "receipt": receipt}}))
            return
        if _is_protocol_error(d):
            error = {"code": INTERNAL_ERROR, "message": d.error.message,
                     "data": {"code": d.error.code, "certainty": receipt["certainty"], "receipt": receipt}}
            await self._record(*rec.settled(task_id, rec.FAILED, message=d.error.message, error=error,
                                            receipt=receipt, certainty=receipt["certainty"]))
            return
        if run.cancel_requested and receipt.get("outcome") == "cancelled":
            await self._record(*rec.settled(task_id, rec.CANCELLED, message="cancelled by tasks/cancel",
                                            receipt=receipt, certainty=receipt["certainty"]))
            return
        result = _wire_result(d)
        data = canonical_json(result).encode("utf-8")
        if len(data) <= rec.INLINE_RESULT_BYTES or (self.path is None and self.artifacts is None):
            await self._record(*rec.settled(task_id, rec.COMPLETED, result=result, receipt=receipt,
                                            certainty=receipt["certainty"]))
            return
        from openfunctions.artifacts import ArtifactError

        try:
            ref = await (await self._artifact_store()).put(data, media_type=RESULT_MEDIA_TYPE, scope=f"task:{task_id}")
        except (ArtifactError, OSError) as exc:
            # The call ran (its receipt says how); only its result cannot be kept: say so, never drop it silently.
            code = getattr(exc, "code", "artifact_store_failed")
            message = (f"the task's call finished ({receipt.get('outcome')}), but its {len(data)}-byte result could not "
                       f"be kept: {getattr(exc, 'message', None) or exc}")
            await self._record(*rec.settled(task_id, rec.FAILED, message=message, receipt=receipt,
                                            certainty=receipt["certainty"],
                                            error={"code": INTERNAL_ERROR, "message": message,
                                                   "data": {"code": code, "certainty": receipt["certainty"],
                                                            "receipt": receipt}}))
            return
        # The artifact is durable (blob and index fsynced) before the record that references it.
        await self._record(*rec.settled(task_id, rec.COMPLETED, result_artifact=ref.id, result_sha256=ref.sha256,
                                        result_size=ref.size, receipt=receipt, certainty=receipt["certainty"]))

    async def _ask(self, run: _Run, requests: dict[str, Any]) -> dict[str, Any]:
        assert run.task_id is not None
        if run.v1:
            raise RuntimeError("input requests during a task need the 2026-07-28 tasks extension "
                               "(io.modelcontextprotocol/tasks); this call is a 2025-11-25 task")
        reused = [k for k in requests if k in run.used_keys]
        if reused:
            raise ValueError(f"input request keys must be unique over a task's life; already used: {reused}")
        run.used_keys.update(requests)
        run.pending.update(requests)
        await self._record(*rec.status(run.task_id, rec.INPUT_REQUIRED, input_requests=run.pending))
        async with run.answered:  # several asks of one handler may wait at once: each wakes on every answer
            await run.answered.wait_for(lambda: not any(k in run.pending for k in requests))
        return {k: run.answers.pop(k) for k in requests}

    # -- the tasks/* methods -----------------------------------------------------

    async def update(self, task: TaskState, responses: Mapping[str, Any]) -> None:
        """Deliver input responses to the task's handler: here, or (a shared store) to the replica running it."""
        if task.task_id not in self.runs and not task.terminal and self.store.shared:
            try:
                await self.store.relay_update(task.task_id, dict(responses))
            except ValueError as exc:
                raise MCPError(INVALID_PARAMS, f"task {task.task_id} runs on another server replica and {exc}",
                               data={"taskId": task.task_id}) from None
            return
        await self.update_here(task.task_id, responses)

    async def update_here(self, task_id: str, responses: Mapping[str, Any]) -> None:
        """Deliver responses to the handler of ``task_id`` if this process runs it (else nothing)."""
        run = self.runs.get(task_id)
        task = await self.find(task_id) if run is not None else None
        if run is None or task is None or task.terminal:
            return
        taken = [k for k in responses if k in run.pending]
        if not taken:
            return  # unknown or already answered keys are ignored (SEP-2663)
        for k in taken:
            run.answers[k] = responses[k]
            del run.pending[k]
        if run.pending:
            await self._record(*rec.status(task.task_id, rec.INPUT_REQUIRED, input_requests=run.pending))
        else:
            await self._record(*rec.status(task.task_id, rec.WORKING))
        async with run.answered:
            run.answered.notify_all()

    async def cancel(self, task: TaskState) -> None:
        """Cancel the task's call: here if this process runs it, else ask the one that does (a shared store)."""
        if task.terminal:
            return  # idempotent on a terminal task
        if task.task_id not in self.runs:
            if self.store.shared:
                await self.store.request_cancel(task.task_id)
            return
        self.cancel_here(task.task_id)

    def cancel_here(self, task_id: str) -> bool:
        """Cancel the call of ``task_id`` if this process runs it (a cancel request from another replica)."""
        run = self.runs.get(task_id)
        if run is None:
            return False
        run.cancel_requested = True
        run.scope.cancel()
        return True

    def shutdown(self) -> None:
        """The server stops admitting: mark running tasks, and end every listen stream gracefully."""
        for run in list(self.runs.values()):
            run.shutdown = True
        if self.listen is not None:
            self.listen.close()


def _is_protocol_error(d: Any) -> bool:
    """A handler that raised (or a receipt that could not be persisted): a JSON-RPC failure, not a tool error."""
    from openfunctions.core.errors import InvalidOutput, JournalError, ReceiptPersistenceFailed, ToolFailed

    return isinstance(d.error, (ToolFailed, InvalidOutput, JournalError, ReceiptPersistenceFailed))


def _is_invalid_params(d: Any) -> bool:
    from openfunctions.core.errors import InvalidParams

    return isinstance(d.error, InvalidParams)


def _wire_result(d: Any) -> dict[str, Any]:
    from ._constants import RECEIPT_META_KEY

    result = d.result
    out: dict[str, Any] = {"content": result.content, "_meta": {RECEIPT_META_KEY: d.receipt.to_dict()}}
    if result.structured is not None and not result.is_error:
        out["structuredContent"] = result.structured
    if result.is_error:
        out["isError"] = True
    return out


async def _read_artifact(store: Any, artifact_id: str) -> bytes:
    """All of an artifact through the store protocol's verified, bounded reads."""
    parts, offset = [], 0
    while True:
        chunk = await store.read(artifact_id, offset)
        parts.append(chunk.data)
        offset += chunk.length
        if chunk.eof:
            return b"".join(parts)


def check_routing_header(ctx: Any, task_id: Any) -> None:
    """SEP-2663 over streamable HTTP: ``Mcp-Name`` must carry ``params.taskId`` (-32020 otherwise)."""
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    if headers is None:
        return  # stdio: no headers to route on
    value = headers.get("mcp-name")
    if value is None or value.strip() != str(task_id):
        raise MCPError(HEADER_MISMATCH, "the Mcp-Name header must equal params.taskId on tasks/* requests",
                       data={"header": "Mcp-Name"})


__all__ = ["EXTENSION_ID", "TASK_METADATA_KEY", "TaskHandle", "TaskManager", "declared_tasks", "tasks_path",
           "missing_extension", "check_routing_header", "DEFAULT_TTL_MS", "MIN_TTL_MS", "DEFAULT_POLL_INTERVAL_MS",
           "DEFAULT_TASK_AFTER_S"]
