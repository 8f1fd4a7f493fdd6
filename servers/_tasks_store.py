"""Where a server's MCP tasks live: the task store interface and its two backends.

A :class:`TaskStore` takes the records ``_task_records`` builds and answers
lookups with their fold (``_task_records.apply``, the one fold, live and at
recovery):

- :class:`FileTaskStore` (the default): the task journal file beside the
  execution journal, folded into memory when it opens; one process owns it
  (the journal's kernel lock), so its memory *is* the state.
- :class:`DatabaseTaskStore` (``serve --database``): the records as rows in
  PostgreSQL (``servers/_pg_tasks.py``'s ``PgTaskLog``; schema at the top of
  that module), shared by every replica on the database: each task a replica
  writes is folded live by a ``TableRecordLog`` over its rows, as the file's
  stream is, and each lookup folds the task's rows again, so ``tasks/get``
  through replica B sees what replica A wrote. Its sweep settles ``failed`` the tasks of a replica
  that died (after the execution journal's sweep settled its calls
  ``unknown``); nothing is re-run.

Recovery is the same for both (:func:`recovery_records`): a task still
working when its process ended is settled ``failed`` with ``recovered: true``
and the execution receipt recovery found or wrote for its call. The file
backend makes one exception: a task whose tool is declared ``idempotent``
(and whose ``task.created`` kept its arguments) is re-run once instead
(:func:`rerun_records`; the server starts the call). The database backend
does not re-run yet.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import structlog
from mcp_types import INTERNAL_ERROR

from openfunctions.core import new_id, run_every, stop_task
from openfunctions.core.records import Entry, FileRecordLog, TableRecordLog, entries

from . import _task_records as rec
from ._task_records import TaskState

log = structlog.get_logger("openfunctions.servers.tasks")

Record = tuple[str, dict[str, Any]]
#: Past this size at startup the task journal is compacted (live tasks re-written into a new segment).
ROTATE_BYTES = 16 * 2**20


class TaskStore(Protocol):
    """The durable records of a server's tasks, and their fold."""

    #: Other processes write these tasks too: never answer from memory alone.
    shared: bool

    async def record(self, type_: str, data: dict[str, Any]) -> bool:
        """Make one record durable; ``False``: not written (the task is already settled, or unknown)."""
        ...

    async def get(self, task_id: str) -> TaskState | None:
        """The task's current state (expired or not), or ``None``."""
        ...

    async def of_principal(self, principal: str | None) -> list[TaskState]:
        """The principal's tasks that have not expired."""
        ...

    async def request_cancel(self, task_id: str) -> bool:
        """Ask the process running ``task_id``'s call to cancel it; ``False``: no other process can run it."""
        ...

    async def relay_update(self, task_id: str, responses: dict[str, Any]) -> None:
        """Hand ``tasks/update`` responses to the process running the task (``ValueError``: cannot)."""
        ...

    async def close(self) -> None: ...


def fold(records: list[Record]) -> dict[str, TaskState]:
    """``(type, data)`` records (a database's rows, a record not stored yet) folded by the task stream."""
    return rec.TASKS.fold(entries(records))


#: ``plan(task)`` at recovery: ``(True, None)`` re-run it; ``(False, why)`` settle it failed, ``why`` (or ``None``:
#: nothing to add, the tool is not idempotent) appended to the message.
RerunPlan = Callable[[TaskState], tuple[bool, str | None]]


async def rerun_records(
    tasks: list[TaskState],
    recovered: Mapping[str, Any],
    find: Callable[[set[str]], Awaitable[dict[str, Any]]],
) -> list[Record]:
    """The ``task.status`` (working, ``rerun_of``) record of each task recovery re-runs, under a new receipt id.

    ``rerun_of`` is the uncertain call's receipt id when the execution journal
    holds a receipt for it (its recovered ``unknown`` one, or one that settled
    before the result was recorded), else ``None`` (a declared read journals no start).
    """
    ids = {t.receipt_id for t in tasks if t.receipt_id and t.receipt_id not in recovered}
    found = await find(ids) if ids else {}
    out = []
    for t in tasks:
        journaled = bool(t.receipt_id) and (t.receipt_id in recovered or t.receipt_id in found)
        out.append(rec.status(t.task_id, rec.WORKING, message="the server restarted while this task ran; its tool "
                              "is idempotent, so the call is being re-run", rerun_of=t.receipt_id if journaled else None,
                              receipt_id=new_id("rcpt")))
    return out


async def recovery_records(
    unsettled: list[TaskState],
    recovered: Mapping[str, Any],
    find: Callable[[set[str]], Awaitable[dict[str, Any]]],
    write_receipt: Callable[[dict[str, Any]], Awaitable[Any]],
    notes: Mapping[str, str] | None = None,
) -> list[Record]:
    """The ``task.settled`` (failed, ``recovered: true``) record of each task whose process ended while it ran.

    ``recovered``: receipt id -> the ``unknown`` receipt the execution journal's
    recovery wrote; ``find(ids)`` looks up receipts already in the execution
    journal; ``write_receipt(start)`` writes a recovered receipt for a call
    that left none (a declared read journals no start). Evidence only.
    ``notes``: task id -> why a task that might have been re-run was not.
    """
    ids = {t.receipt_id for t in unsettled if t.receipt_id and t.receipt_id not in recovered}
    found = await find(ids) if ids else {}
    records = []
    for t in unsettled:
        receipt = recovered.get(t.receipt_id or "") or found.get(t.receipt_id or "")
        if receipt is None:
            receipt = await write_receipt({"receipt_id": t.receipt_id or new_id("rcpt"), "tool": t.tool,
                                           "started_at": t.created_at, "principal": t.principal})
        receipt = receipt if isinstance(receipt, dict) else receipt.to_dict()
        certainty = "unknown" if receipt.get("recovered") else receipt.get("certainty", "unknown")
        message = ("the server ended while this task was running; whether its effect happened is unknown, "
                   "and it was not re-run" if receipt.get("recovered") else
                   f"the server ended after the call settled ({receipt.get('outcome')}) and before its result was "
                   "recorded; the result is lost, and the call was not re-run")
        if notes and notes.get(t.task_id):
            message += f" ({notes[t.task_id]})"
        records.append(rec.settled(
            t.task_id, rec.FAILED, message=message,
            error={"code": INTERNAL_ERROR, "message": message,
                   "data": {"certainty": certainty, "recovered": True, "receipt": receipt}},
            receipt=receipt, certainty=certainty, recovered=True,
        ))
    return records


class FileTaskStore:
    """The task journal file (``None``: memory only, a server without a journal).

    The file is the core record stream :data:`~._task_records.TASKS` (``core.records.FileRecordLog``):
    one process owns it, its live fold is :attr:`tasks`, and a compaction re-writes the live tasks.
    """

    shared = False

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.log: FileRecordLog[dict[str, TaskState]] | None = None  # opened with the first record (or at open)
        self._memory: dict[str, TaskState] = {}  # the fold while no file is open
        self._opening = asyncio.Lock()
        #: Tasks recovery decided to re-run (their ``rerun_of`` record is written): the server starts their calls.
        self.reruns: list[TaskState] = []

    @property
    def tasks(self) -> dict[str, TaskState]:
        """Task id -> state: the live fold of the records (less the expired tasks forgotten since)."""
        return self.log.state if self.log is not None else self._memory

    async def open(self, *, recovered_receipts: Mapping[str, Any],
                   find_receipts: Callable[[set[str]], Awaitable[dict[str, Any]]],
                   write_receipt: Callable[[dict[str, Any]], Awaitable[Any]],
                   plan: RerunPlan | None = None) -> list[str]:
        """Fold the file and settle what the last process left running; the ids of the tasks recovered.

        ``plan``: which of them to re-run instead (:data:`RerunPlan`); those
        end in :attr:`reruns`, working, with their ``rerun_of`` record written.

        A server that never created a task has no task journal: the file is
        created with the first task (:meth:`record`).
        """
        if self.path is None or not os.path.lexists(self.path):
            return []
        await self._open_log()
        assert self.log is not None
        try:
            self._prune()
            unsettled = [t for t in self.tasks.values() if not t.terminal]
            decided = {t.task_id: plan(t) if plan is not None else (False, None) for t in unsettled}
            rerun = [t for t in unsettled if decided[t.task_id][0]]
            failed = [t for t in unsettled if not decided[t.task_id][0]]
            notes = {k: why for k, (_, why) in decided.items() if why}
            if unsettled:
                records = await recovery_records(failed, recovered_receipts, find_receipts, write_receipt, notes)
                records += await rerun_records(rerun, recovered_receipts, find_receipts)
                await self.log.append_many(records)
                log.warning("tasks_recovered", failed=len(failed), rerun=len(rerun), path=str(self.path))
            if self.log.size > ROTATE_BYTES:
                # the live tasks only: what expired is left to the segment (retention)
                await self.log.compact(kept=len(self.tasks))
            self.reruns = [self.tasks[t.task_id] for t in rerun]
        except BaseException:
            await self.log.close()
            self.log = None
            raise
        return [t.task_id for t in unsettled]

    async def _open_log(self) -> None:
        assert self.path is not None
        self.log = await FileRecordLog.open(rec.TASKS, self.path)

    async def record(self, type_: str, data: dict[str, Any]) -> bool:
        if type_ == rec.CREATED and len(self.tasks) % 256 == 255:
            self._prune()
        if self.log is None and self.path is not None:
            async with self._opening:
                if self.log is None and self.path is not None:
                    await self._open_log()  # the first task of a data dir that had none
        if self.log is not None:
            await self.log.append(type_, data)  # durable, then folded
        else:
            rec.TASKS.apply(self._memory, Entry(type_, data))
        return True

    def _prune(self) -> None:
        """Forget tasks past their TTL (their records stay in the journal until compaction)."""
        now = rec.now_ms()
        tasks = self.tasks
        for task_id in [k for k, t in tasks.items() if t.expired(now)]:
            del tasks[task_id]

    async def get(self, task_id: str) -> TaskState | None:
        return self.tasks.get(task_id)

    async def of_principal(self, principal: str | None) -> list[TaskState]:
        now = rec.now_ms()
        return [t for t in self.tasks.values() if t.principal == principal and not t.expired(now)]

    async def request_cancel(self, task_id: str) -> bool:
        return False  # one process owns the file: a task it does not run is not running

    async def relay_update(self, task_id: str, responses: dict[str, Any]) -> None:
        raise ValueError("no other process runs tasks of this task journal")

    async def close(self) -> None:
        self.path = None  # nothing is recorded after close (a late record stays in memory)
        if self.log is not None:
            log_, self.log = self.log, None
            self._memory = log_.state
            await log_.close()


class DatabaseTaskStore:
    """Task records in PostgreSQL, shared by replicas (``serve --database``).

    The same shape as :class:`FileTaskStore`: the stream's live fold through
    ``core.records``. A task's records are written by the replica that runs
    its call, and by a survivor's sweep once that replica is gone: one writer
    at a time. So each task this replica creates is a ``TableRecordLog`` over
    its rows (:attr:`live`, opened empty with its ``task.created``, closed
    with its ``task.settled``); the sweep opens a dead replica's task the
    same way, its rows replayed, and appends the settle. Lookups replay the
    rows (:meth:`get`): another replica's sweep may have settled a task this
    one still runs, which only the rows show (its live fold then refuses:
    ``record`` returns ``False``, the recovery's record stands).
    """

    shared = True

    def __init__(self, task_log: Any, journal: Any) -> None:
        self.task_log = task_log  # servers/_pg_tasks.py's PgTaskLog
        self.journal = journal  # openfunctions.store.PgExecutionJournal: liveness, receipts
        self._sweeper: asyncio.Task[None] | None = None
        self._sweeping = asyncio.Lock()
        self._on_cancel: Callable[[str], object] = lambda task_id: None
        self._running: Callable[[], Iterable[str]] = tuple
        self._on_input: Callable[[str, dict[str, Any]], Awaitable[object]] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        #: Task ids this store's sweeps settled as orphans.
        self.recovered: list[str] = []
        #: The live fold of each task this replica writes (created here, not settled yet).
        self.live: dict[str, TableRecordLog[dict[str, TaskState]]] = {}

    async def _replay(self, task_id: str) -> TableRecordLog[dict[str, TaskState]]:
        """A task's live log over its rows as they are now (a task this replica did not create, or reopens)."""
        table = await self.task_log.table(task_id)
        return TableRecordLog(rec.TASKS, table, table.records, where=table.where)

    async def record(self, type_: str, data: dict[str, Any]) -> bool:
        task_id = data["task_id"]
        if type_ == rec.CREATED:
            # The instance whose death makes this task an orphan: this process's, as its journal registered it.
            instance = await self.journal.ensure_registered()
            table = await self.task_log.table(task_id, create=self.task_log.new_task(
                task_id, principal=data.get("principal"), instance=instance, expires_at_ms=int(data["expires_at_ms"])))
            live = self.live[task_id] = TableRecordLog(rec.TASKS, table, [], where=table.where)
        else:
            live = self.live.get(task_id) or await self._replay(task_id)
            self.live[task_id] = live
        try:
            await live.append(type_, data)
        except Exception as exc:
            refused = isinstance(exc, self.task_log.refused) and not live.failed
            if refused or live.failed:  # settled elsewhere (nothing written), or an unknown outcome: read again
                await self._drop(task_id)
            if refused:
                return False
            raise
        if type_ == rec.SETTLED:
            await self._drop(task_id)  # it takes no more records
        return True

    async def _drop(self, task_id: str) -> None:
        live = self.live.pop(task_id, None)
        if live is not None:
            await live.close()

    async def get(self, task_id: str) -> TaskState | None:
        return rec.TASKS.fold(await self.task_log.rows(task_id)).get(task_id)

    async def of_principal(self, principal: str | None) -> list[TaskState]:
        rows = await self.task_log.records_of(principal, rec.now_ms())
        return list(fold([r for _, r in rows]).values())

    async def request_cancel(self, task_id: str) -> bool:
        await self.task_log.request_cancel(task_id)
        return True

    async def relay_update(self, task_id: str, responses: dict[str, Any]) -> None:
        await self.task_log.relay_input(task_id, responses)

    def listen(self, on_cancel: Callable[[str], object],
               on_input: Callable[[str, dict[str, Any]], Awaitable[object]],
               running: Callable[[], Iterable[str]] = tuple) -> None:
        """Requests from every replica for the calls this one runs (``running()``): cancels, ``tasks/update`` responses.

        Each sweep also acts on cancel marks and waiting responses whose notification this replica missed.
        """
        self._on_cancel, self._on_input, self._running = on_cancel, on_input, running

        def input_ready(task_id: str) -> None:
            if task_id in set(running()):
                job = asyncio.get_running_loop().create_task(self._deliver_inputs([task_id]))
                self._deliveries.add(job)
                job.add_done_callback(self._deliveries.discard)

        self.task_log.listen(on_cancel, input_ready)

    async def _deliver_inputs(self, task_ids: list[str]) -> None:
        """Take the responses waiting for ``task_ids`` and hand them to the handlers (once each)."""
        if self._on_input is None:
            return
        try:
            for task_id, responses in await self.task_log.take_inputs(task_ids):
                await self._on_input(task_id, responses)
        except Exception as exc:  # noqa: BLE001 - logged; a sweep or the next notification tries again
            log.warning("task_input_delivery_failed", error=f"{type(exc).__name__}: {exc}"[:300])

    async def sweep(self) -> list[str]:
        """Settle ``failed`` the tasks of processes that are gone; forget expired tasks. The ids settled."""
        async with self._sweeping:
            running = sorted(self._running())
            for task_id in await self.task_log.cancels_for(running):
                self._on_cancel(task_id)  # a cancel whose NOTIFY this replica missed (its listener was reconnecting)
            await self._deliver_inputs(running)  # and responses whose NOTIFY it missed
            await self.journal.sweep()  # first the execution journal's: dead instances' calls settled, rows gone
            await self.task_log.prune(rec.now_ms())
            orphans = [await self._replay(i) for i in await self.task_log.orphans()]
            dead = {i: o for o in orphans for i, s in o.state.items() if not s.terminal}
            for o in orphans:
                if o not in dead.values():
                    await o.close()  # settled since it was listed
            states = [o.state[i] for i, o in dead.items()]
            if not states:
                return []
            from openfunctions.core.journal import recovered_receipt

            async def write_receipt(start: dict[str, Any]) -> dict[str, Any]:
                receipt = recovered_receipt(start)
                try:
                    await self.journal.on_settled(receipt)
                except Exception as exc:  # the call's receipt appeared meanwhile (another sweep): use it
                    found = await self.journal.find_receipts({receipt.receipt_id})
                    if receipt.receipt_id not in found:
                        raise
                    log.info("task_receipt_found_on_retry", receipt_id=receipt.receipt_id, error=str(exc)[:200])
                    return dict(found[receipt.receipt_id].to_dict())
                return dict(receipt.to_dict())

            records = await recovery_records(states, {}, self.journal.find_receipts, write_receipt)
            settled = [r[1]["task_id"] for r in records if await self._settle(dead[r[1]["task_id"]], r)]
            self.recovered.extend(settled)
            if settled:
                log.warning("tasks_recovered_dead_replica", count=len(settled), journal=self.task_log.journal,
                            hint="tasks of a server that died were settled failed (not re-run)")
            return settled

    async def _settle(self, orphan: TableRecordLog[dict[str, TaskState]], record: Record) -> bool:
        """An orphan's recovery settle through its log; ``False``: settled meanwhile (another sweep, its runner)."""
        try:
            await orphan.append(*record)
        except self.task_log.refused:
            if orphan.failed:
                raise
            return False
        finally:
            await orphan.close()
        return True

    def start_sweeping(self, interval: float) -> None:
        # a failed sweep is retried next round: the database may be away
        self._sweeper = run_every(interval, self.sweep, name="task-sweep", on_error=lambda exc: log.warning(
            "task_sweep_failed", error=f"{type(exc).__name__}: {exc}"[:300]))

    async def close(self) -> None:
        await stop_task(self._sweeper)
        self._sweeper = None
        for task_id in list(self.live):
            await self._drop(task_id)
        await self.task_log.close()


__all__ = ["DatabaseTaskStore", "FileTaskStore", "RerunPlan", "TaskStore", "fold", "recovery_records", "rerun_records"]
