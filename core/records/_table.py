"""A record stream in a shared table: the protocol a database backend satisfies, and the live log over it.

The database side is ``core/_pg_records.py`` (PostgreSQL; the driver is imported only by the
domain that opens a connection, never by core at import time). One table layout serves every
stream, parameterised by table name and key column so the tables that exist stay readable as
they are::

    <table> (
        <key>  text    NOT NULL,     -- the stream's partition: a run space, a run, a task, a work space
        seq    bigint  NOT NULL,     -- the fold's order within a key: contiguous from 1 where one writer
                                     -- holds the key, else the database's sequence (increasing, gaps)
        type   text    NOT NULL,     -- the record type (the stream's, or "compacted")
        time   text    NOT NULL,     -- RFC 3339 UTC, stamped by the writer ("": written before the column)
        data   text    NOT NULL,     -- canonical JSON: the record's data, as a file journal line holds it
        ...)                         -- columns of the table's own (a fence's generation)

A backend opens one key and reads its rows; :class:`RecordTable` is what the live log needs of it
(``core.postgres.PgKeyTable`` satisfies it). Compaction is one transaction
(:meth:`RecordTable.replace`): the key's rows become the snapshot, so no segment is ever left over.
On it: workflow runs (``of_workflow_records``, key ``space``), agent runs (``of_run_records``, key
``run_id``), MCP tasks (``of_task_records``, key ``task_id``), the work resolution inbox
(``of_work_resolutions``, key ``space``). ``core/_pg_records.py`` says which tables are not, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, runtime_checkable

import anyio

from ._stream import Compaction, Pair, RecordStream, RecordStreamError, S, StreamRecord, marker


@runtime_checkable
class RecordTable(Protocol):
    """One key's rows of a shared table, opened by its one writer (what :class:`TableRecordLog` needs)."""

    #: a write failed (its outcome may be unknown): refuse further writes; the owner reopens the key
    @property
    def failed(self) -> bool: ...

    async def append_many(self, records: Sequence[Pair]) -> Sequence[StreamRecord]:
        """Commit ``records`` as one statement (seq continuing); the records as written."""
        ...

    async def replace(self, records: Sequence[Pair]) -> Sequence[StreamRecord]:
        """Compaction: the key's rows become ``records`` (seq continuing), in one transaction."""
        ...

    async def close(self) -> None:
        """Release the key (and its writer's lock)."""
        ...


class TableRecordLog(Generic[S]):
    """The live fold of one key of a :class:`RecordTable`: the same interface as ``FileRecordLog``."""

    def __init__(self, stream: RecordStream[S], table: RecordTable, rows: Sequence[StreamRecord], *,
                 where: str = "", state: S | None = None) -> None:
        """``rows``: the key's rows as the backend read them when it opened (the replay). ``state``: fold into
        this one instead of a new one: a keyed state (run id -> run) that the logs of several keys share, each
        folding its own key's records (the owner drops a key's entry before it opens that key again); such a
        log is not compacted (the compaction's fold would be a new state)."""
        self.stream = stream
        self.table = table
        self.where = where
        self.unknown: list[StreamRecord] = []
        self._shared = state is not None
        self.state: S = stream.fold(rows, state, where=where, unknown=self.unknown)

    async def append(self, type_: str, data: dict[str, object]) -> StreamRecord:
        return (await self.append_many([(type_, dict(data))]))[0]

    async def append_many(self, records: Sequence[Pair]) -> Sequence[StreamRecord]:
        """Commit ``records``, then fold each (a failed commit raises and folds nothing)."""
        with anyio.CancelScope(shield=True):
            written = await self.table.append_many(records)
        for rec in written:
            if not self.stream.apply(self.state, rec, self.where):
                self.unknown.append(rec)
        return written

    async def compact(self, records: Sequence[Pair] | None = None, **info: object) -> Compaction:
        """As ``FileRecordLog.compact``, in one transaction: the rows become the snapshot, the kept
        unknown records and a ``compacted`` record (no segments)."""
        if self._shared:
            raise RecordStreamError(f"{self.where}: a log folding into a shared state is not compacted")
        kept = list(self.stream.snapshot(self.state) if records is None else records)
        kept += [(r.type, r.data) for r in self.unknown]
        batch = [*kept, marker([], dict(info))]
        with anyio.CancelScope(shield=True):
            written = await self.table.replace(batch)
        unknown: list[StreamRecord] = []
        self.state = self.stream.fold(written, where=self.where, unknown=unknown)
        self.unknown = unknown
        return Compaction(len(batch), (), dict(info))

    @property
    def failed(self) -> bool:
        return self.table.failed

    async def close(self) -> None:
        await self.table.close()


__all__ = ["RecordTable", "TableRecordLog"]
