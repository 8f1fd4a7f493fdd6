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
import datetime
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from openfunctions.core import canonical_json, redact_dsn, utc_timestamp
from openfunctions.core.postgres import (
    advisory_key,
    check_schema,
    classify,
    database_error,
    distinct_spaces,
    schema_problem,
    schema_version_sync,
)
from openfunctions.core.postgres import load_psycopg as _psycopg
from openfunctions.store import StoreError, StoreFailed, StoreLocked, StoreUnavailable

from ._pg_schema import COMPONENT

_SELECT = "SELECT seq, type, time, data FROM of_workflow_records WHERE space = %s ORDER BY seq"


class PgWorkflowRecord(NamedTuple):
    """One row: what a file journal's record holds (``seq``, ``type``, ``time``, ``data``)."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]


def space_lock_key(space: str) -> int:
    """The session advisory lock key of a space's writer (see the schema module)."""
    return advisory_key(f"openfunctions.workflows:{space}")  # the same key every release has used


def _rows(where: str, rows: Sequence[tuple[Any, ...]]) -> list[PgWorkflowRecord]:
    out = []
    for seq, type_, stamp, data in rows:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise StoreError(f"workflow run record seq {seq} in {where} is not JSON: {exc}",
                             details={"seq": seq}) from None
        out.append(PgWorkflowRecord(int(seq), type_, stamp, value))
    return out


class PgWorkflowLog:
    """The writer of one run space; open with :func:`open_pg_workflow_log`."""

    def __init__(self, dsn: str, space: str, conn: Any, records: list[PgWorkflowRecord]) -> None:
        self.space = space
        self.where = f"{redact_dsn(dsn)} (space {space!r})"
        self.records = records
        self.last_seq = records[-1].seq if records else 0
        self._conn = conn
        self._failed: str | None = None
        self._psycopg, _ = _psycopg()
        # seq is assigned before the statement runs: concurrent appends (runs, parallel branches) take turns
        self._turn = asyncio.Lock()

    @property
    def failed(self) -> bool:
        """A write failed: this writer refuses further calls; close it and open the space again."""
        return self._failed is not None

    def _check(self) -> Any:
        if self._failed is not None:
            raise StoreFailed(f"workflow runs in {self.where}: an earlier write failed ({self._failed}); "
                              "reopen to read what was committed", certainty="known")
        if self._conn is None:
            raise StoreFailed(f"workflow runs in {self.where} are closed", certainty="known")
        return self._conn

    def _fail(self, exc: Exception) -> StoreError:
        """The writer refuses further writes until reopened; a write that may have committed is ``StoreUnavailable``
        (``certainty: unknown``), one the database refused before writing is ``StoreFailed``."""
        failure = classify(exc, write=True)
        self._failed = failure.reason if failure is not None else f"{type(exc).__name__}: {_first_line(exc)}"
        into = StoreUnavailable if failure is None or failure.certainty == "unknown" else StoreFailed
        return database_error(exc, into, f"workflow runs in {self.where}: a write failed, and this writer "
                              "refuses further writes until reopened", write=True)

    def _stamp(self, records: Sequence[tuple[str, dict[str, Any]]]) -> list[PgWorkflowRecord]:
        stamp = utc_timestamp()
        return [PgWorkflowRecord(self.last_seq + i, t, stamp, d) for i, (t, d) in enumerate(records, 1)]

    async def append_many(self, records: Sequence[tuple[str, dict[str, Any]]]) -> list[PgWorkflowRecord]:
        """Append ``(type, data)`` records as one committed statement; the records as written."""
        if not records:
            self._check()
            return []
        async with self._turn:
            return await self._append(records)

    async def _append(self, records: Sequence[tuple[str, dict[str, Any]]]) -> list[PgWorkflowRecord]:
        conn = self._check()
        out = self._stamp(records)
        values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(out))
        params: list[Any] = []
        for r in out:
            params += [self.space, r.seq, r.type, r.time, canonical_json(r.data)]
        try:
            await conn.execute(f"INSERT INTO of_workflow_records (space, seq, type, time, data) VALUES {values}", params)
        except self._psycopg.Error as exc:
            raise self._fail(exc) from None
        self.last_seq = out[-1].seq
        return out

    async def replace(self, records: Sequence[tuple[str, dict[str, Any]]]) -> list[PgWorkflowRecord]:
        """Compaction: the space's rows become ``records`` (seq continuing), in one transaction."""
        async with self._turn:
            return await self._replace(records)

    async def _replace(self, records: Sequence[tuple[str, dict[str, Any]]]) -> list[PgWorkflowRecord]:
        conn = self._check()
        out = self._stamp(records)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM of_workflow_records WHERE space = %s", (self.space,))
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO of_workflow_records (space, seq, type, time, data) VALUES (%s, %s, %s, %s, %s)",
                        [(self.space, r.seq, r.type, r.time, canonical_json(r.data)) for r in out])
        except self._psycopg.Error as exc:
            raise self._fail(exc) from None
        if out:
            self.last_seq = out[-1].seq
        return out

    async def close(self) -> None:
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


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["PgWorkflowLog", "PgWorkflowRecord", "list_pg_workflow_spaces", "open_pg_workflow_log",
           "read_pg_workflow_records", "space_lock_key", "verify_pg_workflow_spaces", "verify_pg_workflows"]
