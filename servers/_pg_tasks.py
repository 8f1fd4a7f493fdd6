"""MCP task records in PostgreSQL: the task journal that server replicas share.

The records are the task journal's (``servers/_task_records.py`` builds them
and its ``apply`` folds them; docs/formats/tasks.md): this module stores them
as rows, in order, and knows only which record creates a task, which settles
it, and the columns it indexes. Schema (component ``"tasks"`` in ``of_schema``;
:data:`MIGRATIONS`, applied only by ``openfunctions-mcp db migrate``; it needs
the ``journal`` component's ``of_journal_instances``)::

    of_tasks(                            -- one row per task
        task_id   text COLLATE "C" PRIMARY KEY,  -- "task_" + 32 hex (unguessable, from the server)
        journal   text COLLATE "C",      -- the server profile it belongs to ("tools", "work", ...)
        principal text,                  -- who created it (NULL: a server without principals)
        instance  text,                  -- of_journal_instances.instance of the process running its call
        expires_at_ms bigint,            -- Unix ms; past it the task is unknown and may be deleted
        settled   boolean,               -- its task.settled record is in (only the first one counts)
        cancel_requested boolean)        -- tasks/cancel reached some replica (the running one acts on it)
    of_task_records(                     -- the records: the one record-table layout (core/_pg_records.py),
        task_id text REFERENCES of_tasks ON DELETE CASCADE,  -- key task_id, seq "serial"
        seq     bigserial PRIMARY KEY,   -- one order over every task; a task's records fold in seq order
        type    text,                    -- "task.created" | "task.status" | "task.settled"
        time    text,                    -- v2: RFC 3339 UTC, stamped by the writer ("": written before v2)
        data    text)                    -- canonical JSON: the record's data, as in a task journal line
    of_task_inputs(                      -- tasks/update responses received by a replica not running the task,
        seq bigserial PRIMARY KEY,       -- waiting for the running replica to take them (taking deletes them)
        task_id text REFERENCES of_tasks ON DELETE CASCADE,
        responses text)                  -- canonical JSON: params.inputResponses

Promises:

- **Every write is one committed statement** (autocommit), through the
  task's table (``PgKeyedRows.table``/``write``, the one guarded insert;
  ``DatabaseTaskStore`` folds it live with a ``TableRecordLog``): ``task.created``
  inserts the task's row and its first record together; a status record is
  inserted only while the task is not settled; ``task.settled`` flips
  ``settled`` and inserts its record in one statement, and only the first
  settle of a task does (a replica whose result arrives after another
  replica's recovery settled the task gets ``False``: the recovery's record
  stands, as the fold's "a terminal status is final" says).
- **Liveness is the execution journal's**: a task carries the instance of
  the process running its call (``of_journal_instances``, whose session
  advisory lock dies with the process). The journal's sweep deletes a dead
  instance's row after settling its calls ``unknown``; from then on that
  instance's unsettled tasks are *orphans* (:meth:`PgTaskLog.orphans`),
  which the tasks' own sweep settles ``failed``. Nothing here decides that
  a process is dead, and nothing is re-run.
- **Cancel and input across replicas** are notifications:
  :meth:`PgTaskLog.request_cancel` marks the task ``cancel_requested`` and sends
  ``NOTIFY of_task_cancel, '<task id>'`` in one statement (a replica that missed
  the notification finds the mark at its next sweep: :meth:`PgTaskLog.cancels_for`),
  and :meth:`PgTaskLog.relay_input` stores the responses as a row of
  ``of_task_inputs`` and sends ``NOTIFY of_task_input, '<task id>'``, in one
  statement. Every replica listens (:meth:`PgTaskLog.listen`); the one running
  the call takes the rows (:meth:`PgTaskLog.take_inputs` deletes what it
  returns, so each answer is delivered once) and records the status change as
  a local ``tasks/update`` does. A replica that missed a notification finds the
  mark or the rows at its next sweep.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from openfunctions.core import canonical_json, stop_task
from openfunctions.core.postgres import (
    Guard,
    PgKeyedRows,
    RecordTableSpec,
    open_checked,
)
from openfunctions.store import StoreFailed, StoreUnavailable

log = structlog.get_logger("openfunctions.store.tasks")

COMPONENT = "tasks"
CANCEL_CHANNEL = "of_task_cancel"
INPUT_CHANNEL = "of_task_input"

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: tasks and their records
        """CREATE TABLE of_tasks (
            task_id text COLLATE "C" PRIMARY KEY,
            journal text COLLATE "C" NOT NULL,
            principal text,
            instance text,
            expires_at_ms bigint NOT NULL,
            settled boolean NOT NULL DEFAULT false,
            cancel_requested boolean NOT NULL DEFAULT false)""",
        "CREATE INDEX of_tasks_open ON of_tasks (journal, instance) WHERE NOT settled",
        "CREATE INDEX of_tasks_principal ON of_tasks (journal, principal, expires_at_ms)",
        """CREATE TABLE of_task_records (
            seq bigserial PRIMARY KEY,
            task_id text COLLATE "C" NOT NULL REFERENCES of_tasks (task_id) ON DELETE CASCADE,
            type text NOT NULL,
            data text NOT NULL)""",
        "CREATE INDEX of_task_records_task ON of_task_records (task_id, seq)",
        """CREATE TABLE of_task_inputs (
            seq bigserial PRIMARY KEY,
            task_id text COLLATE "C" NOT NULL REFERENCES of_tasks (task_id) ON DELETE CASCADE,
            responses text NOT NULL)""",
        "CREATE INDEX of_task_inputs_task ON of_task_inputs (task_id, seq)",
    ),
    (  # 2: the one record-table layout (core/_pg_records.py): each record's time ("" for the rows before)
        "ALTER TABLE of_task_records ADD COLUMN time text NOT NULL DEFAULT ''",
        "ALTER TABLE of_task_records ALTER COLUMN time SET DEFAULT "
        "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    ),
]

#: The records' table: key ``task_id``; seq from the database's sequence (replicas write one task's rows).
TABLE = RecordTableSpec("of_task_records", "task_id", seq="serial")

Record = tuple[str, dict[str, Any]]


class PgTaskLog(PgKeyedRows):
    """The task records of one journal (a server profile) in PostgreSQL; open with :func:`open_pg_task_log`.

    ``rows``/``records(task_id)``: a task's rows in order (``[]``: no such task in this journal);
    ``table(task_id)``: its ``RecordTable`` (appends while it is not settled)."""

    what = "tasks"
    error = StoreUnavailable
    spec = TABLE
    head = ("of_tasks", "journal", "settled")
    refused = StoreFailed
    refusal = "the task is settled (or not this journal's)"
    last = "task.settled"  # only the first settle of a task is written, and sets ``settled``

    def __init__(self, dsn: str, journal: str, pool: Any, owns_pool: bool) -> None:
        super().__init__(dsn, pool, owns_pool)
        self.journal = self.partition = journal
        self._listener: asyncio.Task[None] | None = None

    # -- writing: every record through a task's table (``table``/``write``: its one guarded statement) --------

    def new_task(self, task_id: str, *, principal: str | None, instance: str | None, expires_at_ms: int) -> Guard:
        """The guard of a task's first record (``table(task_id, create=...)``): its row, in the same statement."""
        return ("INSERT INTO of_tasks (task_id, journal, principal, instance, expires_at_ms) VALUES (%s, %s, %s, %s, %s) "
                "RETURNING task_id", (task_id, self.journal, principal, instance, int(expires_at_ms)))

    async def create(self, task_id: str, *, principal: str | None, instance: str | None, expires_at_ms: int,
                     record: Record) -> None:
        """The task's row and its ``task.created`` record, in one statement."""
        await self.write(task_id, record, create=self.new_task(task_id, principal=principal, instance=instance,
                                                                expires_at_ms=expires_at_ms))

    async def append(self, task_id: str, record: Record) -> bool:
        """A record of a task that is not settled yet; ``False`` if it is (or does not exist): nothing written.
        A ``task.settled`` record is the task's one settle: ``False`` if another one got there first."""
        return await self.write(task_id, record)

    settle = append

    async def prune(self, now_ms: int) -> int:
        """Delete the tasks (and their records) past their expiry; how many."""
        n = await self._run("DELETE FROM of_tasks WHERE journal = %s AND expires_at_ms <= %s",
                            (self.journal, int(now_ms)))
        return int(n or 0)

    # -- reading -----------------------------------------------------------------------
    async def records_of(self, principal: str | None, now_ms: int) -> list[tuple[str, Record]]:
        """``(task id, record)`` of every unexpired task of ``principal``, in record order."""
        rows = await self._run(
            "SELECT r.task_id, r.type, r.data FROM of_task_records r JOIN of_tasks t USING (task_id) "
            "WHERE t.journal = %s AND t.principal IS NOT DISTINCT FROM %s AND t.expires_at_ms > %s ORDER BY r.seq",
            (self.journal, principal, int(now_ms)), fetch=True, write=False)
        return [(i, (t, json.loads(d))) for i, t, d in rows]

    async def orphans(self) -> list[str]:
        """Unsettled tasks whose process is gone (its instance recovered or closed): they need settling."""
        rows = await self._run(
            "SELECT t.task_id FROM of_tasks t WHERE t.journal = %s AND NOT t.settled AND NOT EXISTS "
            "(SELECT 1 FROM of_journal_instances i WHERE i.instance = t.instance) ORDER BY t.task_id",
            (self.journal,), fetch=True, write=False)
        return [r[0] for r in rows]

    # -- cancel across replicas ------------------------------------------------------
    async def request_cancel(self, task_id: str) -> None:
        """Mark ``task_id`` to be cancelled and tell every replica listening (the one running it acts)."""
        await self._run(
            "WITH u AS (UPDATE of_tasks SET cancel_requested = true WHERE task_id = %s AND journal = %s "
            "AND NOT settled RETURNING task_id) SELECT pg_notify(%s, task_id) FROM u",
            (task_id, self.journal, CANCEL_CHANNEL), fetch=True)

    async def cancels_for(self, task_ids: Sequence[str]) -> list[str]:
        """Those of ``task_ids`` (calls this replica runs) marked to be cancelled: a missed notification's catch-up."""
        if not task_ids:
            return []
        rows = await self._run("SELECT task_id FROM of_tasks WHERE task_id = ANY(%s) AND journal = %s "
                               "AND cancel_requested AND NOT settled", (list(task_ids), self.journal),
                               fetch=True, write=False)
        return [r[0] for r in rows]

    async def relay_input(self, task_id: str, responses: dict[str, Any]) -> bool:
        """Keep ``tasks/update`` responses for the replica running ``task_id`` and tell it; ``False``: task settled."""
        rows = await self._run(
            "WITH i AS (INSERT INTO of_task_inputs (task_id, responses) SELECT task_id, %s FROM of_tasks "
            "WHERE task_id = %s AND journal = %s AND NOT settled RETURNING task_id) SELECT pg_notify(%s, task_id) FROM i",
            (canonical_json(responses), task_id, self.journal, INPUT_CHANNEL), fetch=True)
        return bool(rows)

    async def take_inputs(self, task_ids: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """Remove and return the responses waiting for ``task_ids`` (calls this replica runs), oldest first."""
        if not task_ids:
            return []
        rows = await self._run("DELETE FROM of_task_inputs WHERE task_id = ANY(%s) RETURNING seq, task_id, responses",
                               (list(task_ids),), fetch=True)
        return [(t, json.loads(r)) for _, t, r in sorted(rows)]

    def listen(self, on_cancel: Callable[[str], object], on_input: Callable[[str], object], *,
               retry_s: float = 1.0) -> None:
        """``on_cancel(task_id)`` per cancel request, ``on_input(task_id)`` when responses wait for a task."""
        async def loop() -> None:
            while True:
                try:
                    async with await self._psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
                        await conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                        await conn.execute(f"LISTEN {INPUT_CHANNEL}")
                        async for note in conn.notifies():
                            (on_cancel if note.channel == CANCEL_CHANNEL else on_input)(note.payload)
                except (self._psycopg.OperationalError, self._psycopg.InterfaceError) as exc:
                    log.warning("task_cancel_listener_lost", error=str(exc)[:200], retry_s=retry_s)
                await asyncio.sleep(retry_s)

        self._listener = asyncio.get_running_loop().create_task(loop(), name=f"task-cancels-{self.journal}")

    async def close(self) -> None:
        await stop_task(self._listener)
        self._listener = None
        await self._close_pool()


async def open_pg_task_log(dsn: str, journal: str, *, pool: Any = None, max_connections: int = 4,
                           timeout: float = 10.0) -> PgTaskLog:
    """Task records of ``journal`` (a server profile) at ``dsn``; refuses a ``tasks`` schema not this code's."""
    return await open_checked(dsn, COMPONENT, lambda p, owns: PgTaskLog(dsn, journal, p, owns), pool=pool,
                              max_connections=max_connections, timeout=timeout, close=PgTaskLog.close,
                              unavailable=StoreUnavailable)


__all__ = ["CANCEL_CHANNEL", "INPUT_CHANNEL", "MIGRATIONS", "PgTaskLog", "open_pg_task_log"]
