"""Durable workflow runs in PostgreSQL: the records of a run space, one writer per space.

The table, its columns and the promises are written once, at the top of
``workflows/_pg_schema.py``; the records themselves (and the one fold over
them) are ``workflows/_runlog.py``'s. This module stores them as rows; the
shared PostgreSQL plumbing (schema check, error reading) is
``openfunctions.core.postgres``'s, the errors the store package's.

- :func:`open_pg_workflow_log`: the space's writer. It holds a session
  advisory lock on its own connection and writes only on that connection (a
  writer whose connection died cannot write any more); a second writer gets
  :class:`~openfunctions.store.StoreLocked`. ``records`` are the space's rows read at open. Its
  connection's ``application_name`` is ``openfunctions-workflows:<space>`` (``pg_stat_activity``).
- :meth:`PgWorkflowLog.append_many`: one committed multi-row ``INSERT``.
  A failed write leaves the log failed (its seq may or may not have moved):
  it refuses every later call until reopened, which re-reads the rows.
- :meth:`PgWorkflowLog.replace`: compaction, one transaction.
- :func:`read_pg_workflow_records`: a reader (synchronous, no lock, no write).
- :func:`verify_pg_workflows` / :func:`list_pg_workflow_spaces`: the audit of a space's rows (seq
  contiguous, ``time`` and ``data`` well-formed, and, given a fold, every row folding);
  :func:`verify_pg_workflow_spaces`: ``db verify``'s (every space, with the workflows' own fold).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from openfunctions.core import redact_dsn
from openfunctions.core.postgres import (
    PgKeyTable,
    RecordTableSpec,
    TableRow,
    advisory_key,
    check_schema,
    database_error,
    decode_rows,
    distinct_spaces,
    schema_problem,
    schema_version_sync,
)
from openfunctions.core.postgres import load_psycopg as _psycopg
from openfunctions.core.records import RecordMalformed
from openfunctions.store import StoreError, StoreFailed, StoreLocked, StoreUnavailable

from ._pg_schema import COMPONENT

#: The workflows' table: the one record-table layout (``core._pg_records``), one writer per space assigning seq.
TABLE = RecordTableSpec("of_workflow_records", "space", seq="key")
_SELECT = TABLE.select()

#: One row (``seq``, ``type``, ``time``, ``data``): what a file journal's record holds.
PgWorkflowRecord = TableRow


def space_lock_key(space: str) -> int:
    """The session advisory lock key of a space's writer (see the schema module)."""
    return advisory_key(f"openfunctions.workflows:{space}")  # the same key every release has used


def _rows(where: str, rows: Sequence[tuple[Any, ...]]) -> list[PgWorkflowRecord]:
    try:
        return decode_rows(rows, where)
    except RecordMalformed as exc:
        raise StoreError(f"workflow run {exc.message}", details=exc.details) from None


class PgWorkflowLog(PgKeyTable):
    """The writer of one run space (``core._pg_records.PgKeyTable`` on its own connection, whose session advisory
    lock is the space's); open with :func:`open_pg_workflow_log`."""

    def __init__(self, dsn: str, space: str, conn: Any, records: list[PgWorkflowRecord]) -> None:
        self.space = space
        self._conn: Any = conn
        super().__init__(TABLE, space, records, where=f"{redact_dsn(dsn)} (space {space!r})",
                         connection=self._lend, refused=StoreFailed, unavailable=StoreUnavailable,
                         on_close=self._close_conn)

    @contextlib.asynccontextmanager
    async def _lend(self) -> AsyncIterator[Any]:
        yield self._conn  # every write on the lock's connection: a writer whose connection died cannot write

    async def _close_conn(self) -> None:
        """Close the connection: the space's lock goes with it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # already gone: so is its lock
                pass


#: How long opening waits for a space held by another session (seconds): long enough for the database to
#: see a SIGKILLed holder's connection close and drop its lock, short enough to say "busy" promptly.
LOCK_WAIT = 2.0


async def open_pg_workflow_log(dsn: str, space: str = "default", *, timeout: float = 10.0,
                               lock_wait: float = LOCK_WAIT) -> PgWorkflowLog:
    """The writer of ``space`` at ``dsn``, its rows read; :class:`StoreLocked` if another writer still holds
    it after ``lock_wait`` seconds, ``SchemaOutOfDate``/``SchemaTooNew`` for a schema not this code's,
    :class:`StoreUnavailable` otherwise."""
    psycopg, _ = _psycopg()
    where = f"{redact_dsn(dsn)} (space {space!r})"
    try:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=max(1, int(timeout)),
                                                     application_name=f"openfunctions-workflows:{space}"[:63])
    except psycopg.Error as exc:
        raise database_error(exc, StoreUnavailable, f"cannot connect to PostgreSQL at {redact_dsn(dsn)}",
                             write=False) from None
    try:
        await check_schema(conn, COMPONENT, where=redact_dsn(dsn))
        deadline = time.monotonic() + lock_wait
        while not (await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (space_lock_key(space),))).fetchone())[0]:
            if time.monotonic() >= deadline:
                raise StoreLocked(f"the workflow runs of {where} are held by another writer (a session advisory lock, "
                                  f"still held after {lock_wait:g} s)", details={"space": space})
            await asyncio.sleep(0.05)
        cur = await conn.execute(_SELECT, (space,))
        records = _rows(where, await cur.fetchall())
    except psycopg.Error as exc:
        await conn.close()
        raise database_error(exc, StoreUnavailable, f"workflow runs in {where}", write=False) from None
    except BaseException:
        await conn.close()
        raise
    return PgWorkflowLog(dsn, space, conn, records)


def read_pg_workflow_records(dsn: str, space: str = "default", *, timeout: float = 10.0) -> list[PgWorkflowRecord]:
    """The rows of ``space`` in seq order, read without a lock (one snapshot: one statement)."""
    psycopg, _ = _psycopg()
    where = f"{redact_dsn(dsn)} (space {space!r})"
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(timeout)))
    except psycopg.Error as exc:
        raise database_error(exc, StoreUnavailable, f"cannot connect to PostgreSQL at {redact_dsn(dsn)}",
                             write=False) from None
    try:
        with conn:
            problem = schema_problem(COMPONENT, schema_version_sync(conn, COMPONENT), where=redact_dsn(dsn))
            if problem is not None:
                raise problem
            return _rows(where, conn.execute(_SELECT, (space,)).fetchall())
    except psycopg.Error as exc:
        raise database_error(exc, StoreUnavailable, f"cannot read workflow runs in {where}", write=False) from None


#: Record types a compaction writes at the head of a space (its seq then continues from the rows it replaced).
_COMPACTION_TYPES = ("run_snapshot", "compacted")


def verify_pg_workflows(dsn: str, space: str, *,
                        fold: Callable[[str, list[PgWorkflowRecord]], None] | None = None) -> list[str]:
    """``db verify``'s audit of one run space; the problems found (empty: valid), each naming its seq.

    Checks what the store promises (schema module): seq contiguous (from 1, or from a compaction's
    ``run_snapshot``/``compacted`` head: a compaction continues the seq), ``time`` an RFC 3339 UTC stamp,
    ``data`` a JSON object. ``fold(where, records)``: the workflows' own fold (``workflows.cli.check_run_records``,
    what :func:`verify_pg_workflow_spaces` passes), raising an error whose message names the bad record;
    run only when the rows are well-formed. Raises ``psycopg.Error`` if the database cannot be read."""
    psycopg, _ = _psycopg()
    where = f"{redact_dsn(dsn)} (space {space!r})"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(_SELECT, (space,)).fetchall()
    problems: list[str] = []
    records: list[PgWorkflowRecord] = []
    expect = None
    for seq, type_, stamp, data in rows:
        if expect is None and seq != 1 and type_ not in _COMPACTION_TYPES:
            problems.append(f"seq {seq}: the first row is a {type_!r} record, not seq 1 nor a compaction's head "
                            "(rows before it are missing)")
        elif expect is not None and seq != expect:
            problems.append(f"seq {seq}: expected seq {expect} (rows missing)")
        expect = seq + 1
        try:
            datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
        except (TypeError, ValueError):
            problems.append(f"seq {seq}: time {str(stamp)[:40]!r} is not an RFC 3339 UTC stamp")
        try:
            value = json.loads(data)
        except ValueError as exc:
            problems.append(f"seq {seq}: data is not JSON ({exc})")
            continue
        if not isinstance(value, dict):
            problems.append(f"seq {seq}: data is a JSON {type(value).__name__}, not an object")
            continue
        records.append(PgWorkflowRecord(int(seq), type_, stamp, value))
    if fold is not None and not problems:
        try:
            fold(where, records)
        except Exception as exc:
            problems.append(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
    return problems


def list_pg_workflow_spaces(dsn: str) -> list[str]:
    """The run spaces that hold rows (none if the workflows schema is not there)."""
    return distinct_spaces(dsn, "of_workflow_records", "DISTINCT space")


def verify_pg_workflow_spaces(dsn: str) -> list[tuple[str, list[str], str]]:
    """``db verify``'s audit of the workflows component (its entry in ``core.postgres.COMPONENTS``): every run
    space, its rows folded with the workflows' own fold."""
    from .cli import check_run_records

    return [(f"workflow space {space}", verify_pg_workflows(dsn, space, fold=check_run_records),
             "seq contiguous, time and data well-formed, every row folds into its run")
            for space in list_pg_workflow_spaces(dsn)]


__all__ = ["PgWorkflowLog", "PgWorkflowRecord", "list_pg_workflow_spaces", "open_pg_workflow_log",
           "read_pg_workflow_records", "space_lock_key", "verify_pg_workflow_spaces", "verify_pg_workflows"]
