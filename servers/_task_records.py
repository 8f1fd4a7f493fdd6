"""Task records: the one module that builds them, and the one fold that applies them.

A server's MCP tasks (the ``io.modelcontextprotocol/tasks`` extension,
SEP-2663) are durable: every change of a task is a record in the *task
journal*, a core :class:`~openfunctions.core.journal.JournalLog` of kind
``"tasks"`` beside the execution journal (``<data-dir>/journal/<profile>.tasks.journal``,
the same slot number as the execution journal). The byte format of a line is
the core journal's (``core/journal/_encoder.py``, docs/formats/journal.md);
this module defines the ``type`` and ``data`` of each record.

Task record format, version 1 (``data.v == 1``; docs/formats/tasks.md):

- ``"task.created"``: ``v``, ``task_id`` (``task_`` + 32 lowercase hex, 128
  bits from the OS CSPRNG: the id is unguessable), ``principal`` (who created
  it, from the trusted context; ``null`` when the server has none), ``tool``,
  ``receipt_id`` (the execution's receipt in the execution journal, assigned
  before the handler runs), ``created_at`` (RFC 3339 UTC), ``ttl_ms`` (integer
  milliseconds the task is kept after creation), ``expires_at_ms`` (Unix
  milliseconds, ``created`` + ``ttl_ms``), ``poll_interval_ms``. Appended and
  fsynced *before* the ``CreateTaskResult`` is sent, so a ``tasks/get`` for an
  id a client holds always resolves (until it expires). Optional, only for a
  tool declared ``idempotent`` (what a restarted server needs to re-run its
  call): ``arguments`` (the call's arguments as received) and ``scopes`` (the
  trusted scopes it ran under, a list of strings; with ``principal`` its whole
  authority). Never a credential. Readers that predate them ignore them.
- ``"task.status"``: ``task_id``, ``status`` (``working`` or
  ``input_required``), ``at``, optional ``message``, and for
  ``input_required`` the outstanding ``input_requests`` (key -> request).
  Optional ``rerun_of`` (present, possibly ``null``) with ``receipt_id``:
  recovery re-runs the call of an idempotent tool under a new receipt
  ``receipt_id``; ``rerun_of`` is the receipt id of the uncertain call it
  replaces (``null`` when the execution journal held none for it). Written
  before the re-run starts; a task is re-run at most once.
- ``"task.settled"``: ``task_id``, ``status`` (``completed``, ``failed`` or
  ``cancelled``), ``at``, optional ``message``; for ``completed`` the
  ``CallToolResult`` as sent on the wire in ``result`` (or, past
  :data:`INLINE_RESULT_BYTES`, ``result_artifact``: the id of the artifact
  that holds its canonical JSON in the data dir's artifact store, with
  ``result_sha256`` and ``result_size``, the digest and length the artifact
  must still have when it is read back; a record written before these
  fields existed names a file ``<task_id>.json`` in ``<tasks journal>.results/``
  instead, still read); for ``failed`` the JSON-RPC ``error`` (``code``, ``message``,
  ``data``); ``receipt`` (the execution receipt, when known) and
  ``certainty`` (``known``/``unknown``, the receipt's). ``recovered: true``
  marks the record recovery wrote for a task whose server ended while it ran.

- ``"compacted"``: the last record of a compaction (core record stream:
  ``segments``, the files it superseded); belongs to no task.

A task's state is the fold of its records in journal order (:func:`apply`),
used both live (each record is applied right after its append returns) and
at recovery (the scan of the file). Nothing else changes a task. The stream
is :data:`TASKS` (``openfunctions.core.records``): a record type this
version does not know (a newer server's) is kept, not folded, and carried
through compaction (``UnknownRecords.KEEP``; older versions skipped it
silently). Compaction writes :func:`snapshot` of the live tasks; the
segments it supersedes stay beside the file as history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from openfunctions.core import new_id, utc_timestamp
from openfunctions.core.records import RecordStream, StreamRecord, UnknownRecords

KIND = "tasks"
VERSION = 1

CREATED = "task.created"
STATUS = "task.status"
SETTLED = "task.settled"

WORKING = "working"
INPUT_REQUIRED = "input_required"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})

#: A settled result larger than this (canonical JSON bytes) is stored as an artifact, not inline in the journal.
INLINE_RESULT_BYTES = 256 * 1024


def new_task_id() -> str:
    """``task_`` + 32 lowercase hex characters (128 bits from the OS CSPRNG)."""
    return new_id("task")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class TaskState:
    """One task as the fold of its records (what ``tasks/get`` answers from)."""

    task_id: str
    principal: str | None
    tool: str
    receipt_id: str | None
    created_at: str
    ttl_ms: int
    expires_at_ms: int
    poll_interval_ms: int
    status: str = WORKING
    last_updated_at: str = ""
    message: str | None = None
    input_requests: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    result_artifact: str | None = None
    result_sha256: str | None = None
    result_size: int | None = None
    error: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None
    certainty: str | None = None
    recovered: bool = False
    arguments: dict[str, Any] | None = None
    scopes: tuple[str, ...] = ()
    rerun: bool = False  # recovery re-ran the call (``rerun_of`` names the uncertain call it replaced)
    rerun_of: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def expired(self, at_ms: int | None = None) -> bool:
        return (now_ms() if at_ms is None else at_ms) >= self.expires_at_ms


# -- builders: every record a task ever gets is made here ---------------------------


def created(
    task_id: str, *, principal: str | None, tool: str, receipt_id: str | None, ttl_ms: int, poll_interval_ms: int,
    arguments: dict[str, Any] | None = None, scopes: tuple[str, ...] | list[str] | None = None,
    created_at: str | None = None, expires_at_ms: int | None = None,
) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {
        "v": VERSION,
        "task_id": task_id,
        "principal": principal,
        "tool": tool,
        "receipt_id": receipt_id,
        "created_at": created_at or utc_timestamp(),
        "ttl_ms": int(ttl_ms),
        "expires_at_ms": now_ms() + int(ttl_ms) if expires_at_ms is None else int(expires_at_ms),
        "poll_interval_ms": int(poll_interval_ms),
    }
    if arguments is not None:  # only an idempotent tool's: recovery may re-run it
        data["arguments"] = arguments
        data["scopes"] = [str(s) for s in scopes or ()]
    return CREATED, data


_UNSET: Any = object()


def status(task_id: str, new_status: str, *, message: str | None = None,
           input_requests: dict[str, Any] | None = None, rerun_of: str | None = _UNSET,
           receipt_id: str | None = None) -> tuple[str, dict[str, Any]]:
    if new_status not in (WORKING, INPUT_REQUIRED):
        raise ValueError(f"a task.status record takes working or input_required, not {new_status!r}")
    data: dict[str, Any] = {"task_id": task_id, "status": new_status, "at": utc_timestamp()}
    if message is not None:
        data["message"] = message
    if new_status == INPUT_REQUIRED:
        data["input_requests"] = dict(input_requests or {})
    if rerun_of is not _UNSET:  # recovery re-runs the call: under this new receipt, in place of that one
        data["rerun_of"] = rerun_of
        data["receipt_id"] = receipt_id
    return STATUS, data


def settled(
    task_id: str,
    new_status: str,
    *,
    message: str | None = None,
    result: dict[str, Any] | None = None,
    result_artifact: str | None = None,
    result_sha256: str | None = None,
    result_size: int | None = None,
    error: dict[str, Any] | None = None,
    receipt: dict[str, Any] | None = None,
    certainty: str | None = None,
    recovered: bool = False,
) -> tuple[str, dict[str, Any]]:
    if new_status not in TERMINAL:
        raise ValueError(f"a task.settled record takes a terminal status, not {new_status!r}")
    data: dict[str, Any] = {"task_id": task_id, "status": new_status, "at": utc_timestamp()}
    if message is not None:
        data["message"] = message
    if result is not None:
        data["result"] = result
    if result_artifact is not None:
        data["result_artifact"] = result_artifact
    if result_sha256 is not None:
        data["result_sha256"] = result_sha256
    if result_size is not None:
        data["result_size"] = int(result_size)
    if error is not None:
        data["error"] = error
    if receipt is not None:
        data["receipt"] = receipt
    if certainty is not None:
        data["certainty"] = certainty
    if recovered:
        data["recovered"] = True
    return SETTLED, data


# -- the fold ------------------------------------------------------------------------


def apply(tasks: dict[str, TaskState], type: str, data: dict[str, Any]) -> None:
    """Apply one record to ``tasks`` (task id -> state). Live and at recovery.

    Records for an unknown task (its ``created`` was in a pruned segment) and
    changes to a settled task are ignored: a terminal status is final.
    """
    task_id = data.get("task_id")
    if not isinstance(task_id, str):
        return
    if type == CREATED:
        tasks[task_id] = TaskState(
            task_id=task_id,
            principal=data.get("principal"),
            tool=str(data.get("tool")),
            receipt_id=data.get("receipt_id"),
            created_at=str(data.get("created_at")),
            ttl_ms=int(data.get("ttl_ms") or 0),
            expires_at_ms=int(data.get("expires_at_ms") or 0),
            poll_interval_ms=int(data.get("poll_interval_ms") or 1000),
            last_updated_at=str(data.get("created_at")),
            arguments=data["arguments"] if isinstance(data.get("arguments"), dict) else None,
            scopes=tuple(str(s) for s in data.get("scopes") or () if isinstance(s, str)),
        )
        return
    task = tasks.get(task_id)
    if task is None or task.terminal:
        return
    task.last_updated_at = str(data.get("at") or task.last_updated_at)
    task.message = data.get("message")
    if type == STATUS:
        task.status = str(data.get("status"))
        task.input_requests = dict(data.get("input_requests") or {})
        if "rerun_of" in data:
            task.rerun, task.rerun_of = True, data.get("rerun_of")
            task.receipt_id = data.get("receipt_id") or task.receipt_id
    elif type == SETTLED:
        task.status = str(data.get("status"))
        task.input_requests = {}
        task.result = data.get("result")
        task.result_artifact = data.get("result_artifact")
        task.result_sha256 = data.get("result_sha256")
        task.result_size = data.get("result_size")
        task.error = data.get("error")
        task.receipt = data.get("receipt")
        task.certainty = data.get("certainty")
        task.recovered = bool(data.get("recovered"))


def snapshot(tasks: dict[str, TaskState]) -> list[tuple[str, dict[str, Any]]]:
    """The records that re-create ``tasks`` (what a compaction writes): each task's ``created``, its re-run
    (so it is not re-run a second time, and names the call it replaced), the status of a task still
    running, and the settlement of one that ended. Only the records' ``at`` times are new."""
    records: list[tuple[str, dict[str, Any]]] = []
    for t in tasks.values():
        records.append(created(
            t.task_id, principal=t.principal, tool=t.tool, receipt_id=t.receipt_id, ttl_ms=t.ttl_ms,
            poll_interval_ms=t.poll_interval_ms, arguments=t.arguments, scopes=t.scopes,
            created_at=t.created_at, expires_at_ms=t.expires_at_ms))
        rerun: dict[str, Any] = {"rerun_of": t.rerun_of, "receipt_id": t.receipt_id} if t.rerun else {}
        if not t.terminal and (rerun or t.status != WORKING or t.message is not None):
            records.append(status(t.task_id, t.status, message=t.message, input_requests=t.input_requests, **rerun))
        elif rerun:
            records.append(status(t.task_id, WORKING, message=t.message, **rerun))
        if t.terminal:
            records.append(settled(t.task_id, t.status, message=t.message, result=t.result,
                                   result_artifact=t.result_artifact, result_sha256=t.result_sha256,
                                   result_size=t.result_size, error=t.error, receipt=t.receipt,
                                   certainty=t.certainty, recovered=t.recovered))
    return records


def _apply_record(tasks: dict[str, TaskState], r: StreamRecord) -> None:
    apply(tasks, r.type, r.data)


#: The task journal as a core record stream: the one fold, live, at recovery and in the database's rows.
TASKS: RecordStream[dict[str, TaskState]] = RecordStream(
    "tasks", kind=KIND, types={CREATED, STATUS, SETTLED}, new_state=dict, apply=_apply_record,
    unknown=UnknownRecords.KEEP, snapshot=snapshot, keep_segments=True)


__all__ = [
    "TASKS", "snapshot",
    "KIND", "VERSION", "CREATED", "STATUS", "SETTLED", "WORKING", "INPUT_REQUIRED", "COMPLETED", "FAILED",
    "CANCELLED", "TERMINAL", "INLINE_RESULT_BYTES", "TaskState", "apply", "created", "status", "settled",
    "new_task_id", "now_ms",
]
