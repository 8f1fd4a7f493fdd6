"""The record stream on a shared table (core/records/_table.py), on a real PostgreSQL.

The table is the workflows' (``of_workflow_records``, key ``space``), whose writer satisfies
``RecordTable``; the stream on it here is the toy counters stream of test_record_stream.py.
"""

from __future__ import annotations

import asyncio

import pytest

from openfunctions.core.records import COMPACTED, Entry, RecordTable, TableRecordLog
from tests._pg import pg_dsn, unique_name  # noqa: F401  (pg_dsn is a fixture)

from .test_record_stream import counters

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(pg_dsn):  # noqa: F811
    from openfunctions.store import migrate_database

    asyncio.run(migrate_database(pg_dsn))
    return pg_dsn


async def test_a_table_backed_stream_folds_live_as_its_rows_replay_and_compacts_in_one_transaction(db):
    from openfunctions.workflows._pg import open_pg_workflow_log, read_pg_workflow_records

    space = unique_name("rs")
    table = await open_pg_workflow_log(db, space)
    assert isinstance(table, RecordTable)  # the protocol, structurally
    live = TableRecordLog(counters(), table, table.records, where=space)
    await live.append_many([("set", {"k": "a", "v": 1}), ("set", {"k": "b", "v": 2}), ("future", {"k": "a"})])
    await live.append("add", {"k": "a", "v": 4})
    assert live.state == {"a": 5, "b": 2} == counters().fold(read_pg_workflow_records(db, space))
    done = await live.compact([("set", {"k": "a", "v": 5})], kept=1, pruned=1)
    rows = read_pg_workflow_records(db, space)
    assert [r.type for r in rows] == ["set", "future", COMPACTED] and done.segments == ()
    assert rows[-1].data == {"kept": 1, "pruned": 1, "segments": []}
    kept: list[Entry] = []
    assert live.state == {"a": 5} == counters().fold(rows, unknown=kept)
    assert [r.type for r in kept] == ["future"] == [r.type for r in live.unknown]  # carried, not dropped
    await live.close()
    # the next writer replays the rows to the same state
    table = await open_pg_workflow_log(db, space)
    again = TableRecordLog(counters(), table, table.records, where=space)
    assert again.state == {"a": 5}
    await again.close()
