"""A record stream's rows in PostgreSQL: the one table layout, its statements, and one key's writer.

Every record stream kept in PostgreSQL stores its rows in a table of one shape
(what a row means: ``core/records/_table.py``), parameterised by table and key
column so that the tables that exist keep their names and their rows::

    <table>(
        <key> text COLLATE "C",   -- the stream's partition: a run space, a run, a task, a work space
        seq   bigint,             -- the fold's order within a key (two ways to assign it: below)
        type  text,               -- the record type (the stream's own, or "compacted")
        time  text,               -- RFC 3339 UTC with microseconds, stamped by the writer
                                  -- ("": written before the table had the column)
        data  text,               -- canonical JSON: the record's data, as a file journal's line holds it
        ...)                      -- columns of the table's own (a fence's generation, a global order)

``seq`` is assigned one of three ways (:attr:`RecordTableSpec.seq`):

- ``"key"``: by the key's one writer, which holds a lock: contiguous per key
  from 1, a compaction's rows continuing it; ``PRIMARY KEY (<key>, seq)``.
  Workflow runs (``of_workflow_records``, key ``space``).
- ``"fence"``: by the guard that admits the write, in the same statement:
  contiguous per key from 1. Work attempts (``of_work_records``, key
  ``space``, plus ``generation``): the lease row's ``UPDATE`` that checks the
  writer's generation moves its ``last_seq``, and the row takes it
  (``work/_pg.py``).
- ``"serial"``: by the database's sequence at insert: one order over every
  key, so increasing per key with gaps. For keys that several replicas write
  without a lock between them (agent runs, MCP tasks, the work resolution
  inbox), whose global order is read too (``runs tail`` follows it; a
  controller names the resolution seq it copied).

:meth:`RecordTableSpec.insert` is the one append statement: one multi-row
``INSERT`` (one transaction), optionally *guarded* by a common table
expression that must return a row for anything to be written (a task not yet
settled; a run's row created in the same statement). :meth:`RecordTableSpec.select`
is the one read. :class:`PgKeyTable` is one key's
:class:`~openfunctions.core.records.RecordTable` (``append_many``, ``replace``
as one transaction) for a :class:`~openfunctions.core.records.TableRecordLog`.

Statements are built from the spec's code constants only; every value is a
parameter. psycopg is never imported here: the caller lends the connection.

Not on this layout: the execution journal (``of_journal_records``,
``store/_pg_journal.py``). Its rows look alike (``type``, ``time``, ``data``)
but its key is two columns (journal, per-process stream), and its one append
statement computes each row's hash-chain link (``prev``, ``chk``) in SQL from
the stream head's, skips a receipt already written, and checks the writer's
instance, for a batch of rows of different receipts: a chained, deduplicated
group commit, not a key's rows appended; forcing it through this insert would
move the chain out of the statement that makes it atomic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ._canonical import canonical_json
from ._stamps import utc_timestamp
from .errors import OpenFunctionsError, PersistenceError
from .records import Pair, RecordMalformed

#: A guard: a CTE body (SQL, code constants) and its parameters; the rows are written only if it returns a row.
Guard = tuple[str, Sequence[Any]]


class TableRow(NamedTuple):
    """One row: what a file journal's record holds (a :class:`~openfunctions.core.records.StreamRecord`)."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]


@dataclass(frozen=True)
class RecordTableSpec:
    """A table of the one layout: its name, its key column, how its seq is assigned (module docstring), and the
    columns of its own after ``data`` (:attr:`extra`: one value each per statement, the same for every row)."""

    table: str
    key: str
    seq: Literal["key", "serial", "fence"] = "key"
    extra: tuple[str, ...] = ()

    def select(self, scope: str = "") -> str:
        """A key's rows in seq order (params: the key, then ``scope``'s: a further ``AND ...`` condition)."""
        return f"SELECT seq, type, time, data FROM {self.table} WHERE {self.key} = %s {scope} ORDER BY seq"

    def insert(self, key: str, rows: Sequence[TableRow], guard: Guard | None = None,
               extra: Sequence[Any] = ()) -> tuple[str, list[Any]]:
        """``(sql, params)``: the rows of ``key`` as one statement, ``RETURNING seq`` (in the rows' order).

        ``"key"``: the rows' ``seq`` is written. ``"serial"``: the sequence
        assigns it, in the rows' order (one ``VALUES`` list is scanned in
        order). ``"fence"``: the guard assigns it (it returns the new seq as
        ``seq``; one row per statement). With a ``guard``, nothing is written
        unless it returns a row (a data-modifying guard runs once whatever it
        returns). ``extra``: the values of :attr:`extra`."""
        if len(extra) != len(self.extra) or (self.seq == "fence" and (guard is None or len(rows) != 1)):
            raise ValueError(f"{self.table}: {len(self.extra)} extra value(s), and a fenced insert is one row "
                             "with its guard")
        own = ["%s::bigint"] if self.seq == "key" else []
        one = "(" + ", ".join(["%s", *own, "%s", "%s", "%s", *["%s"] * len(extra)]) + ")"
        values = ", ".join([one] * len(rows))
        params: list[Any] = list(guard[1]) if guard else []
        for r in rows:
            params += [key, *([r.seq] if own else []), r.type, r.time, canonical_json(r.data), *extra]
        cols = ", ".join([self.key, *([] if self.seq == "serial" else ["seq"]), "type", "time", "data", *self.extra])
        if guard is None:
            return f"INSERT INTO {self.table} ({cols}) VALUES {values} RETURNING seq", params
        names = ", ".join(["k", *(["seq"] if own else []), "type", "time", "data", *self.extra])
        picked = ", ".join(["v.k", *(["guard.seq"] if self.seq == "fence" else ["v.seq"] if own else []),
                            "v.type", "v.time", "v.data", *[f"v.{c}" for c in self.extra]])
        admitted = ", guard" if self.seq == "fence" else " WHERE EXISTS (SELECT 1 FROM guard)"
        return (f"WITH guard AS ({guard[0]}) INSERT INTO {self.table} ({cols}) SELECT {picked} "
                f"FROM (VALUES {values}) AS v({names}){admitted} RETURNING seq", params)

    def delete(self) -> str:
        return f"DELETE FROM {self.table} WHERE {self.key} = %s"


def stamp(records: Sequence[Pair], after: int = 0) -> list[TableRow]:
    """``records`` as rows stamped now, seq ``after + 1 ...`` (a ``"serial"`` table's insert replaces the seq)."""
    now = utc_timestamp()
    return [TableRow(after + i, t, now, d) for i, (t, d) in enumerate(records, 1)]


def decode_rows(rows: Sequence[Sequence[Any]], where: str) -> list[TableRow]:
    """Rows ``(seq, type, time, data)`` as read; a ``data`` that is not a JSON object raises
    :class:`~openfunctions.core.records.RecordMalformed` naming the row (nothing of ours writes one)."""
    out = []
    for seq, type_, time, data in rows:
        try:
            value = json.loads(data)
        except ValueError as exc:
            value = exc
        if not isinstance(value, dict):
            why = f"is not JSON ({value})" if isinstance(value, ValueError) else "is not a JSON object"
            raise RecordMalformed(f"record seq {seq} ({type_!r}) in {where}: its data {why}",
                                  details={"where": where, "seq": int(seq), "type": type_})
        out.append(TableRow(int(seq), type_, time or "", value))
    return out


async def read_rows(conn: Any, spec: RecordTableSpec, key: str, where: str,
                    scope: Guard | None = None) -> list[TableRow]:
    """``key``'s rows in seq order, on ``conn`` (an async psycopg connection)."""
    cur = await conn.execute(spec.select(scope[0] if scope else ""), (key, *(scope[1] if scope else ())))
    return decode_rows(await cur.fetchall(), where)


class PgKeyTable:
    """One key's rows, written by this process (a :class:`~openfunctions.core.records.RecordTable`).

    ``connection()`` lends a connection for one call: the writer's own (a
    ``"key"`` table, whose lock lives on it) or a pooled one. Appends carry
    ``guard`` (a task not settled, say; or a function of the batch's rows
    choosing one, as a key's first record inserts its head row and its last
    one sets the head's "ended" flag): records it refuses are refused with
    ``refused`` naming :attr:`refusal` (nothing written; the table stays
    usable). A failed write leaves the table failed (its outcome may be
    unknown, so its seq and the live fold may be behind the rows): every
    later call is refused until the owner reopens the key, which reads the
    rows again. Errors are the caller's classes: ``unavailable`` when a
    write may have committed, ``refused`` when nothing was written (and for
    a failed or closed table). ``replace`` needs a ``"key"`` or ``"serial"``
    table (a fenced one is compacted by its own domain, if ever).
    """

    def __init__(self, spec: RecordTableSpec, key: str, rows: Sequence[TableRow], *, where: str,
                 connection: Callable[[], AbstractAsyncContextManager[Any]],
                 refused: type[OpenFunctionsError], unavailable: type[OpenFunctionsError],
                 guard: Guard | Callable[[Sequence[TableRow]], Guard | None] | None = None, refusal: str = "its guard refused the write",
                 on_close: Callable[[], Any] | None = None) -> None:
        self.spec = spec
        self.key = key
        self.where = where
        #: the rows read when the key was opened (the replay); the owner may take and clear them
        self.records: list[TableRow] = list(rows)
        self.last_seq = rows[-1].seq if rows else 0
        self.guard = guard
        self.refusal = refusal  # what a guard that returned no row means (the error's message)
        self._connection = connection
        self._refused = refused
        self._unavailable = unavailable
        self._on_close = on_close
        self._failed: str | None = None
        self._closed = False
        self._turn = asyncio.Lock()  # seq is counted before the statement runs: concurrent appends take turns

    @property
    def failed(self) -> bool:
        """A write failed: this table refuses further calls; close it and open the key again."""
        return self._failed is not None

    def _check(self) -> None:
        if self._failed is not None or self._closed:
            why = f"an earlier write failed ({self._failed})" if self._failed is not None else "it is closed"
            raise self._refusal(f"{why}; reopen to read what was committed")

    def _refusal(self, why: str) -> OpenFunctionsError:
        """The caller's ``refused`` error: nothing was written (``certainty: known``, as ``database_error`` sets it)."""
        err = self._refused(f"{self.spec.table} of {self.where}: {why}", details={"key": self.key, "certainty": "known"})
        if isinstance(err, PersistenceError):
            err.certainty = "known"
        return err

    def _fail(self, exc: BaseException) -> OpenFunctionsError:
        from .postgres import classify, database_error  # postgres imports this module

        failure = classify(exc, write=True)
        self._failed = failure.reason if failure is not None else f"{type(exc).__name__}: {str(exc)[:200]}"
        into = self._unavailable if failure is None or failure.certainty == "unknown" else self._refused
        return database_error(exc, into, f"{self.spec.table} of {self.where}: a write failed, and this writer refuses "
                              "further writes until reopened", write=True)

    async def _write(self, rows: list[TableRow], *, replace: bool) -> list[TableRow]:
        guard = None if replace else self.guard(rows) if callable(self.guard) else self.guard
        sql, params = self.spec.insert(self.key, rows, guard)
        seqs: list[int] = []
        try:
            async with self._connection() as conn:
                if replace:
                    async with conn.transaction():
                        await conn.execute(self.spec.delete(), (self.key,))
                        if rows:
                            seqs = [r[0] for r in await (await conn.execute(sql, params)).fetchall()]
                else:
                    seqs = [r[0] for r in await (await conn.execute(sql, params)).fetchall()]
        except Exception as exc:
            from .postgres import classify

            if isinstance(exc, OpenFunctionsError) or classify(exc, write=True) is None:
                raise
            raise self._fail(exc) from None
        if rows and not seqs:  # only a guard writes nothing without an error
            raise self._refusal(f"{self.refusal}; nothing was written")
        written = [r._replace(seq=int(s)) for r, s in zip(rows, seqs, strict=True)]
        if written:
            self.last_seq = written[-1].seq
        return written

    async def append_many(self, records: Sequence[Pair]) -> list[TableRow]:
        """Commit ``records`` as one statement (seq continuing); the records as written."""
        async with self._turn:
            self._check()
            return await self._write(stamp(records, self.last_seq), replace=False) if records else []

    async def replace(self, records: Sequence[Pair]) -> list[TableRow]:
        """Compaction: the key's rows become ``records`` (seq continuing), in one transaction."""
        async with self._turn:
            self._check()
            return await self._write(stamp(records, self.last_seq), replace=True)

    async def close(self) -> None:
        self._closed = True
        if self._on_close is not None:
            await self._on_close()


__all__ = ["Guard", "PgKeyTable", "RecordTableSpec", "TableRow", "decode_rows", "read_rows", "stamp"]
