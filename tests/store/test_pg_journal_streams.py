"""The PostgreSQL execution journal's per-instance streams (schema 3).

Each server process appends to its own stream, so replicas never wait for one
row lock; a release-2 journal (one head row) migrates into the legacy stream
and still verifies; recovery settles a dead instance's starts into the stream
of each start; one receipt per call holds across streams; readers merge the
streams by time.
"""

from __future__ import annotations

import asyncio
import json
import os

import psycopg
import pytest

from openfunctions.core import ToolRegistry, canonical_json, define_tool, new_id, utc_timestamp
from openfunctions.core.journal import recovered_receipt
from openfunctions.store import DuplicateReceipt, apply_migrations, open_pg_journal, verify_pg_journal
from openfunctions.store import migrate_database as migrate
from openfunctions.store._migrations import MIGRATIONS
from openfunctions.store._pg_journal import link
from openfunctions.store._pg_journal_read import read_records
from openfunctions.store._pg_journal_schema import APPEND, APPEND_V2
from tests._pg import unique_name

from ._journal_backends import PgBackend, migrated


def _rows(dsn: str, sql: str, *params) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _start(rid: str) -> dict:
    return {"receipt_id": rid, "tool": "t", "started_at": utc_timestamp()}


@pytest.mark.anyio
async def test_a_journal_written_by_release_2_opens_verifies_and_recovers_after_migration_3(fresh_db) -> None:
    """The release-2 layout (one head row per journal), written by release 2's own append statement, with a
    server of that release dead mid-call: after `db migrate` the records are the legacy stream and verify; a
    release-3 server settles the dead call into that stream and appends its own calls to a stream of its own."""
    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        assert await apply_migrations(conn, "journal", MIGRATIONS[:2]) == 0
        header = canonical_json({"format": "openfunctions.journal", "version": 2, "journal_id": new_id("jnl"),
                                 "kind": "execution", "created": utc_timestamp(),
                                 "meta": {"backend": "postgresql", "journal": "tools"}, "salt": os.urandom(16).hex()})
        await conn.execute("INSERT INTO of_journals (name, header, last_seq, last_link) VALUES ('tools', %s, 0, %s)",
                           (header, link(header)))
        # a release-2 server that died: its row stays, nobody holds its advisory lock
        dead = new_id("inst")
        await conn.execute("INSERT INTO of_journal_instances (instance, journal, lock_key, host, pid) "
                           "VALUES (%s, 'tools', %s, 'old-host', 1)", (dead, 4242))
        done, open_call = new_id("rcpt"), new_id("rcpt")
        done_start = _start(done)
        for type, data in (("start", done_start), ("receipt", recovered_receipt(done_start).to_dict()),
                           ("start", _start(open_call))):
            cur = await conn.execute(APPEND_V2, {"journal": "tools", "instance": dead, "type": type,
                                                 "time": utc_timestamp(), "data": canonical_json(data),
                                                 "receipt_id": data["receipt_id"]})
            assert (await cur.fetchone()) is not None
    assert await migrate(fresh_db) == (2, len(MIGRATIONS))
    report = verify_pg_journal(fresh_db, "tools")
    assert report.ok and (report.records, report.streams, report.unsettled) == (3, 1, 1), report
    # a release-2 server still running after the upgrade cannot append (the head it updated is gone)
    with psycopg.connect(fresh_db, autocommit=True) as conn, pytest.raises(psycopg.errors.UndefinedColumn):
        conn.execute(APPEND_V2, {"journal": "tools", "instance": None, "type": "start", "time": utc_timestamp(),
                                 "data": "{}", "receipt_id": None})

    journal = await open_pg_journal(fresh_db, "tools")
    try:
        assert [r.receipt_id for r in journal.recovered] == [open_call]
        assert journal.stream == journal.instance and journal.stream.startswith("inst_")
        registry = ToolRegistry([define_tool(name="t", description="x", handler=lambda p, c: {"n": 1})], sink=journal)
        await registry.execute_detailed("t", {})
        await asyncio.gather(*(registry.execute_detailed("t", {}) for _ in range(5)))
    finally:
        await journal.close()
    legacy = _rows(fresh_db, "SELECT seq, type, receipt_id, instance FROM of_journal_records "
                             "WHERE journal = 'tools' AND stream = '' ORDER BY seq")
    assert [r[:3] for r in legacy] == [(1, "start", done), (2, "receipt", done), (3, "start", open_call),
                                       (4, "receipt", open_call)]
    assert legacy[3][3] == journal.instance  # written by the recovering server, into the start's stream
    report = verify_pg_journal(fresh_db, "tools")
    assert report.ok and (report.records, report.streams, report.unsettled) == (4 + 12, 2, 0), report
    merged = list(read_records(fresh_db, "tools"))
    assert [(r.stream, r.seq) for r in merged if r.stream == ""] == [("", i) for i in range(1, 5)]
    assert [r.time for r in merged] == sorted(r.time for r in merged) and len(merged) == 16


@pytest.mark.anyio
async def test_an_append_of_one_instance_commits_while_another_instances_append_holds_its_stream(pg_dsn) -> None:
    """By construction, not by throughput: instance A's append transaction is held open (its stream head row
    locked); instance B's appends commit meanwhile, while a second append to A's stream waits for the lock.
    Under release 2 (one head row per journal) B would have waited too."""
    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    b = await open_pg_journal(dsn, name)
    held = await psycopg.AsyncConnection.connect(dsn)  # A's appender, mid-transaction
    try:
        assert a.stream != b.stream and {a.stream, b.stream} == {a.instance, b.instance}
        rid = new_id("rcpt")
        cur = await held.execute(APPEND, {"journal": name, "stream": a.stream, "instance": a.instance,
                                          "type": "start", "time": utc_timestamp(),
                                          "data": canonical_json(_start(rid)), "receipt_id": rid})
        assert (await cur.fetchone())[0] == 1  # not committed: A's head row stays locked
        blocked = asyncio.ensure_future(a.on_settled(recovered_receipt(_start(new_id("rcpt")))))
        pid = a._conn.info.backend_pid if a._conn else None
        for _ in range(500):  # A's own next append waits for the lock on A's head...
            pid = a._conn.info.backend_pid if a._conn else None
            if pid and _rows(dsn, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid)[0][0] == "Lock":
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the second append to A's stream never waited for A's head row")
        # ...while B's appends commit: a start and a receipt, and a batch of five.
        await asyncio.wait_for(b.on_settled(recovered_receipt(_start(new_id("rcpt")))), timeout=30)
        await asyncio.wait_for(asyncio.gather(*(b.on_settled(recovered_receipt(_start(new_id("rcpt"))))
                                                for _ in range(5))), timeout=30)
        assert _rows(dsn, "SELECT count(*) FROM of_journal_records WHERE journal = %s AND stream = %s",
                     name, b.stream)[0][0] == 6
        assert not blocked.done()
        waiting = _rows(dsn, "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND datname = current_database()")
        assert waiting == [(pid,)]  # only A's own second append waits, on A's own stream
        await held.commit()
        await asyncio.wait_for(blocked, timeout=30)
    finally:
        await held.close()
        await a.close()
        await b.close()
    report = verify_pg_journal(dsn, name)
    assert report.ok and report.streams == 2 and report.records == 8, report


@pytest.mark.anyio
async def test_concurrent_appends_of_two_instances_never_wait_for_a_lock(pg_dsn) -> None:
    """Two instances append 2 x 300 records concurrently on separate connections; a sampler polling
    pg_stat_activity throughout never sees either appender waiting for a row lock (``transactionid``/``tuple``:
    what an append waiting for the other replica's head row shows under schema 2). The table's relation
    extension lock (``extend``: a new page for the shared table, held for the length of a page allocation) is
    the one lock the two streams still share, and is allowed."""
    import threading

    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    b = await open_pg_journal(dsn, name)
    stop = threading.Event()
    seen: list[tuple] = []
    samples = [0]

    def sample(pids: list[int]) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                seen.extend(conn.execute("SELECT pid, wait_event FROM pg_stat_activity WHERE pid = ANY(%s) "
                                         "AND wait_event_type = 'Lock' AND wait_event <> 'extend'",
                                         (pids,)).fetchall())
                samples[0] += 1

    try:
        for j in (a, b):  # open both append connections first, so the sampler knows their pids
            await j.on_settled(recovered_receipt(_start(new_id("rcpt"))))
        sampler = threading.Thread(target=sample, args=([a._conn.info.backend_pid, b._conn.info.backend_pid],))
        sampler.start()
        try:
            async def one(j) -> None:
                for _ in range(30):
                    await asyncio.gather(*(j.on_settled(recovered_receipt(_start(new_id("rcpt"))))
                                           for _ in range(10)))

            await asyncio.gather(one(a), one(b))
        finally:
            stop.set()
            sampler.join()
    finally:
        await a.close()
        await b.close()
    assert samples[0] > 0 and seen == [], seen
    report = verify_pg_journal(dsn, name)
    assert report.ok and report.receipts == 2 + 600 and report.streams == 2, report


@pytest.mark.anyio
async def test_a_dead_instances_call_is_settled_into_its_own_stream_and_a_second_receipt_is_refused(pg_dsn) -> None:
    dsn = await migrated(pg_dsn)
    backend = PgBackend(dsn, unique_name("j"))
    survivor = await backend.open()
    dying = await backend.open()
    entered = asyncio.Event()

    async def slow(params, ctx):
        entered.set()
        await asyncio.sleep(3600)

    registry = ToolRegistry([define_tool(name="slow", description="x", handler=slow)], sink=dying)
    call = asyncio.ensure_future(registry.execute_detailed("slow", {}))
    try:
        await entered.wait()
        dead_stream = dying.stream
        await backend.crash(dying)
        (receipt,) = await survivor.sweep()
        assert receipt.error.code == "recovered_unknown"
        rows = _rows(dsn, "SELECT stream, seq, type, instance FROM of_journal_records WHERE journal = %s "
                          "AND receipt_id = %s ORDER BY seq", backend.journal, receipt.receipt_id)
        assert rows == [(dead_stream, 1, "start", dying.instance), (dead_stream, 2, "receipt", survivor.instance)]
        # the unique receipt holds across streams: the survivor cannot settle it again in its own stream
        with pytest.raises(DuplicateReceipt):
            await survivor.on_settled(receipt)
    finally:
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        await survivor.close()
    report = verify_pg_journal(dsn, backend.journal)
    assert report.ok and report.unsettled == 0 and report.streams == 2, report


@pytest.mark.anyio
async def test_verify_names_the_stream_of_a_gap_and_a_tampered_head(pg_dsn) -> None:
    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    b = await open_pg_journal(dsn, name)
    try:
        for j in (a, b):
            for _ in range(3):
                await j.on_settled(recovered_receipt(_start(new_id("rcpt"))))
    finally:
        await a.close()
        await b.close()
    assert verify_pg_journal(dsn, name).ok
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM of_journal_records WHERE journal = %s AND stream = %s AND seq = 2", (name, b.stream))
        conn.execute("UPDATE of_journal_streams SET last_seq = 7 WHERE journal = %s AND stream = %s", (name, a.stream))
    problems = verify_pg_journal(dsn, name).problems
    assert any(f"stream {b.stream} seq 3: expected seq 2" in p for p in problems), problems
    assert any(f"stream {a.stream!r}: head says seq 7" in p for p in problems), problems
    assert not any(f"stream {a.stream} seq" in p for p in problems), problems  # A's records themselves are whole


@pytest.mark.anyio
async def test_a_follow_sees_new_records_of_every_stream_and_a_new_stream(pg_dsn) -> None:
    """What ``journal tail -f --database`` polls: records after each stream's last seen seq, new streams too."""
    from openfunctions.store._pg_journal_read import last_records, newer_records

    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    try:
        await a.on_settled(recovered_receipt(_start(new_id("rcpt"))))
        with psycopg.connect(dsn, autocommit=True) as conn:
            last, seen = last_records(conn, name, 5)
            assert [(r.stream, r.seq) for r in last] == [(a.stream, 1)]
            assert newer_records(conn, name, seen) == []
            b = await open_pg_journal(dsn, name)  # a replica that starts meanwhile
            try:
                await b.on_settled(recovered_receipt(_start(new_id("rcpt"))))
                await a.on_settled(recovered_receipt(_start(new_id("rcpt"))))
            finally:
                await b.close()
            fresh = newer_records(conn, name, seen)
            assert sorted((r.stream, r.seq) for r in fresh) == sorted([(b.stream, 1), (a.stream, 2)])
            assert [r.time for r in fresh] == sorted(r.time for r in fresh)
            assert newer_records(conn, name, seen) == []
    finally:
        await a.close()


@pytest.mark.anyio
async def test_journal_tail_show_and_verify_read_the_database_streams(pg_dsn, capsys) -> None:
    """`journal tail|show|verify --database URL`: the streams of every replica merged by time."""
    from openfunctions.store.journal_cli import main

    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    b = await open_pg_journal(dsn, name)
    ids = []
    try:
        for i in range(6):
            r = recovered_receipt(_start(new_id("rcpt")))
            ids.append(r.receipt_id)
            await (a if i % 2 == 0 else b).on_settled(r)
    finally:
        await a.close()
        await b.close()
    capsys.readouterr()
    assert main(["tail", "--database", dsn, "--journal", name, "-n", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["data"]["receipt_id"] for r in out["records"]] == ids[2:]  # both streams, in time order
    assert {r["stream"] for r in out["records"]} == {a.stream, b.stream}
    assert main(["tail", "--database", dsn, "--journal", name, "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].split("\t")[1] == f"{name}/{b.stream}:3"
    assert main(["show", ids[3], "--database", dsn]) == 0
    assert f"receipt ({name}/{b.stream}:2" in capsys.readouterr().out
    assert main(["show", "rcpt_nothing", "--database", dsn]) == 2
    assert "no record of receipt 'rcpt_nothing'" in capsys.readouterr().err
    assert main(["verify", "--database", dsn, "--journal", name]) == 0
    assert "6 records in 2 stream(s)" in capsys.readouterr().out
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE of_journal_records SET data = replace(data, 'unknown', 'succeeded') "
                     "WHERE journal = %s AND stream = %s AND seq = 1", (name, a.stream))
    assert main(["verify", "--database", dsn, "--journal", name]) == 1
    assert f"stream {a.stream} seq 1: checksum mismatch" in capsys.readouterr().out
    assert main(["verify"]) == 2 and "give a journal file or --database URL" in capsys.readouterr().err
    assert main(["verify", "somefile.journal", "--database", dsn]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["tail", "--database", "postgresql://u:secret@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and "secret" not in err
