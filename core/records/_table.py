"""A record stream in a shared table: the protocol a database backend satisfies, and the live log over it.

The database side lives with its domain (the PostgreSQL modules; core imports no driver). One
generic table layout serves every stream, parameterised by table name so the tables that exist
today stay readable as they are::

    <table> (
        <key>  text    NOT NULL,     -- the stream's partition: a run space, a journal name
        seq    bigint  NOT NULL,     -- contiguous per key, from 1; the fold's order
        type   text    NOT NULL,     -- the record type (the stream's, or "compacted")
        time   text    NOT NULL,     -- RFC 3339 UTC, stamped by the writer
        data   jsonb   NOT NULL,     -- the record's data, as a file journal line holds it
        PRIMARY KEY (<key>, seq))

A backend opens one key with its writer's lock held (an advisory lock, say) and its rows read;
:class:`RecordTable` is what the live log needs of it. Compaction is one transaction
(:meth:`RecordTable.replace`): the key's rows become the snapshot, so no segment is ever left
over. ``store/_pg_workflows.py``'s ``PgWorkflowLog`` (table ``of_workflow_records``, key
``space``) satisfies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, runtime_checkable

import anyio

from ._stream import Compaction, Pair, RecordStream, S, StreamRecord, marker


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
                 where: str = "") -> None:
        """``rows``: the key's rows as the backend read them when it opened (the replay)."""
        self.stream = stream
        self.table = table
        self.where = where
        self.unknown: list[StreamRecord] = []
        self.state: S = stream.fold(rows, where=where, unknown=self.unknown)

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
