"""PostgreSQL-only journal behaviour: schema versions, a cut connection, tampering, a second receipt."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.store import SchemaOutOfDate, SchemaTooNew, open_pg_journal, verify_pg_journal
from openfunctions.store import migrate_database as migrate
from openfunctions.store._migrations import MIGRATIONS
from tests._pg import unique_name

from ._journal_backends import migrated


@pytest.mark.anyio
async def test_serving_refuses_an_unmigrated_database_and_names_the_command(fresh_db) -> None:
    with pytest.raises(SchemaOutOfDate) as err:
        await open_pg_journal(fresh_db, "tools")
    assert f"version 0; this code needs version {len(MIGRATIONS)}" in str(err.value)
    assert "openfunctions-mcp db migrate" in str(err.value)
    assert await migrate(fresh_db) == (0, len(MIGRATIONS))
    assert await migrate(fresh_db) == (len(MIGRATIONS), len(MIGRATIONS))  # idempotent
    j = await open_pg_journal(fresh_db, "tools")
    await j.close()


@pytest.mark.anyio
async def test_serving_refuses_a_newer_schema(fresh_db) -> None:
    await migrate(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("UPDATE of_schema SET version = version + 1 WHERE component = 'journal'")
    with pytest.raises(SchemaTooNew) as err:
        await open_pg_journal(fresh_db, "tools")
    assert f"version {len(MIGRATIONS) + 1}; this code knows up to version {len(MIGRATIONS)}" in str(err.value)


def _kill_backends(dsn: str, keep: set[int]) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        me = conn.info.backend_pid
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> %s AND pid <> ALL(%s) AND backend_type = 'client backend'",
                            (me, list(keep))).fetchall()
    return len(rows)


@pytest.mark.anyio
async def test_a_connection_cut_mid_call_gives_an_unknown_receipt_never_a_success(pg_dsn) -> None:
    dsn = await migrated(pg_dsn)
    journal = await open_pg_journal(dsn, unique_name("j"))
    keep = {journal._lock_conn.info.backend_pid}

    async def partition(params, ctx):
        # The database connection dies between the durable start and the receipt.
        await asyncio.to_thread(_kill_backends, dsn, keep)
        return {"done": True}

    try:
        registry = ToolRegistry([define_tool(name="cut", description="x", handler=partition),
                                 define_tool(name="fine", description="x", handler=lambda p, c: {"ok": 1})],
                                sink=journal)
        out = await registry.execute_detailed("cut", {})
        assert out.receipt.outcome == "unknown" and out.receipt.certainty == "unknown", out.receipt
        assert out.receipt.error.code == "receipt_persistence_failed"
        # The next call reconnects and is durable again.
        ok = await registry.execute_detailed("fine", {})
        assert ok.receipt.outcome == "succeeded", ok.receipt
    finally:
        await journal.close()
    assert verify_pg_journal(dsn, journal.name).ok


@pytest.mark.anyio
async def test_verify_finds_a_tampered_record_and_a_gap(pg_dsn) -> None:
    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    journal = await open_pg_journal(dsn, name)
    try:
        registry = ToolRegistry([define_tool(name="t", description="x", handler=lambda p, c: {"n": p.get("n")})],
                                sink=journal)
        for i in range(3):
            await registry.execute_detailed("t", {"n": i})
    finally:
        await journal.close()
    assert verify_pg_journal(dsn, name).ok
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE of_journal_records SET data = replace(data, 'succeeded', 'failed') "
                     "WHERE journal = %s AND seq = 2", (name,))
    report = verify_pg_journal(dsn, name)
    assert any("seq 2: checksum mismatch" in p for p in report.problems), report.problems
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM of_journal_records WHERE journal = %s AND seq = 4", (name,))
    report = verify_pg_journal(dsn, name)
    assert any("seq 5: expected seq 4" in p for p in report.problems), report.problems


@pytest.mark.anyio
async def test_a_replica_that_lost_its_lock_cannot_settle_a_recovered_call_twice(pg_dsn) -> None:
    """Replica A's lock connection is cut while a call runs; replica B recovers it as unknown;
    A's late receipt is refused (A's client sees unknown), and A registers again for new calls."""
    dsn = await migrated(pg_dsn)
    name = unique_name("j")
    a = await open_pg_journal(dsn, name)
    release = asyncio.Event()
    entered = asyncio.Event()

    async def slow(params, ctx):
        entered.set()
        await release.wait()
        return {"ok": True}

    try:
        registry = ToolRegistry([define_tool(name="slow", description="x", handler=slow)], sink=a)
        call = asyncio.ensure_future(registry.execute_detailed("slow", {}))
        await entered.wait()
        await asyncio.to_thread(_kill_backends, dsn, set())  # a partition: every connection of A dies
        b = await open_pg_journal(dsn, name)
        try:
            assert len(b.recovered) == 1
        finally:
            await b.close()
        release.set()
        out = await call
        assert out.receipt.outcome == "unknown" and out.receipt.certainty == "unknown"
        # A's next start is refused (its pool's connections died, then its registration is gone: rejected,
        # the handler never ran), and A registers again: within a few calls it serves durably again.
        outcomes = []
        for _ in range(3):
            outcomes.append((await registry.execute_detailed("slow", {})).receipt.outcome)
            if outcomes[-1] == "succeeded":
                break
        assert outcomes[-1] == "succeeded" and set(outcomes[:-1]) <= {"rejected"}, outcomes
    finally:
        await a.close()
    report = verify_pg_journal(dsn, name)
    assert report.ok, report.problems


@pytest.mark.anyio
async def test_a_second_receipt_for_one_call_is_refused_and_the_batch_goes_on(pg_dsn) -> None:
    from openfunctions.core import new_id, utc_timestamp
    from openfunctions.core.journal import recovered_receipt
    from openfunctions.store import DuplicateReceipt

    dsn = await migrated(pg_dsn)
    journal = await open_pg_journal(dsn, unique_name("j"))
    try:
        first, other = (recovered_receipt({"receipt_id": new_id("rcpt"), "tool": "t", "started_at": utc_timestamp()})
                        for _ in range(2))
        await journal.on_settled(first)
        # In one group-commit batch: the duplicate is refused alone, its neighbour commits.
        results = await asyncio.gather(journal.on_settled(first), journal.on_settled(other), return_exceptions=True)
        assert isinstance(results[0], DuplicateReceipt) and results[0].certainty == "unknown"
        assert results[1] is None
    finally:
        await journal.close()
    report = verify_pg_journal(dsn, journal.name)
    assert report.ok and report.receipts == 2, report


@pytest.mark.anyio
async def test_a_running_replica_sweeps_up_a_dead_ones_calls(pg_dsn) -> None:
    from ._journal_backends import PgBackend

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
        assert await survivor.sweep() == []  # alive: its lock is held, nothing is touched
        await backend.crash(dying)
        survivor.start_sweeping(0.05)
        for _ in range(200):
            if survivor.recovered:
                break
            await asyncio.sleep(0.05)
        (receipt,) = survivor.recovered
        assert receipt.outcome == "unknown" and receipt.error.code == "recovered_unknown"
    finally:
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        await survivor.close()
    report = verify_pg_journal(dsn, backend.journal)
    assert report.ok and report.unsettled == 0, report


@pytest.mark.anyio
async def test_settled_receipts_are_read_by_id_across_journals_without_registering(pg_dsn) -> None:
    """``settled_pg_receipts`` (work recovery's reader): receipts by id, from a URL or a pool, one journal or all;
    a start without a receipt is absent; it writes and registers nothing."""
    from openfunctions.store import StoreUnavailable, open_pool, settled_pg_receipts

    dsn = await migrated(pg_dsn)
    names = unique_name("ja"), unique_name("jb")
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(params, ctx):
        entered.set()
        await release.wait()
        return {"ok": True}

    journals = [await open_pg_journal(dsn, n) for n in names]
    try:
        regs = [ToolRegistry([define_tool(name="t", description="x", handler=lambda p, c: {"n": p.get("n")}),
                              define_tool(name="slow", description="x", handler=slow)], sink=j) for j in journals]
        a = (await regs[0].execute_detailed("t", {"n": 1})).receipt
        b = (await regs[1].execute_detailed("t", {"n": 2})).receipt
        open_call = asyncio.ensure_future(regs[0].execute_detailed("slow", {}))
        await entered.wait()
        (start_id,) = [r for t, r in _types_and_ids(dsn, names[0]) if t == "start" and r not in (a.receipt_id,)]
        instances_before = _count(dsn, "of_journal_instances")
        records_before = _count(dsn, "of_journal_records")

        wanted = {a.receipt_id, b.receipt_id, start_id, "rcpt_unknown"}
        found = await settled_pg_receipts(dsn, wanted)
        assert set(found) == {a.receipt_id, b.receipt_id}  # the open call's start is no evidence
        assert found[a.receipt_id] == a.to_dict() and found[b.receipt_id]["outcome"] == "succeeded"
        assert found[a.receipt_id]["certainty"] == "known"
        assert set(await settled_pg_receipts(dsn, wanted, journal=names[1])) == {b.receipt_id}
        pool = await open_pool(dsn, max_size=1)
        try:
            assert set(await settled_pg_receipts(pool, wanted, journal=names[0])) == {a.receipt_id}
            assert await settled_pg_receipts(pool, []) == {}
        finally:
            await pool.close()
        assert (_count(dsn, "of_journal_instances"), _count(dsn, "of_journal_records")) == (instances_before,
                                                                                         records_before)
        release.set()
        settled = (await open_call).receipt
        assert set(await settled_pg_receipts(dsn, {start_id})) == {settled.receipt_id} == {start_id}
    finally:
        release.set()
        for j in journals:
            await j.close()
    with pytest.raises(StoreUnavailable, match="cannot read the execution journal at .*password=\\*\\*\\*") as err:
        await settled_pg_receipts("postgresql://u:secret@127.0.0.1:1/x?password=secret", {"r"}, timeout=2)
    assert "secret" not in str(err.value)


@pytest.mark.anyio
async def test_settled_receipts_refuse_an_unmigrated_database(fresh_db) -> None:
    from openfunctions.store import settled_pg_receipts

    with pytest.raises(SchemaOutOfDate, match="openfunctions-mcp db migrate"):
        await settled_pg_receipts(fresh_db, {"rcpt_x"})


def _types_and_ids(dsn: str, journal: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT type, receipt_id FROM of_journal_records WHERE journal = %s ORDER BY seq",
                            (journal,)).fetchall()


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 (a test's fixed names)


@pytest.mark.anyio
async def test_migration_2_keeps_a_version_1_journal_whole_and_appends_continue_its_chain(fresh_db) -> None:
    """A journal written by schema 1 (its PL/pgSQL function) is refused until ``db migrate``; after migrations 2
    and 3 its records are the legacy stream, new appends go to the server's own stream, and verify passes."""
    from openfunctions.core import canonical_json, new_id, utc_timestamp
    from openfunctions.store import apply_migrations
    from openfunctions.store._pg_journal import link

    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        assert await apply_migrations(conn, "journal", MIGRATIONS[:1]) == 0
        header = canonical_json({"format": "openfunctions.journal", "version": 2, "journal_id": new_id("jnl"),
                                 "kind": "execution", "created": utc_timestamp(), "meta": {}, "salt": "00"})
        await conn.execute("INSERT INTO of_journals (name, header, last_seq, last_link) VALUES ('tools', %s, 0, %s)",
                           (header, link(header)))
        rid = new_id("rcpt")
        datas = [canonical_json({"receipt_id": rid, "tool": "t", "n": i}) for i in range(2)]
        await conn.execute("SELECT * FROM of_journal_append('tools', NULL, %s, %s, %s, %s)",
                           (["start", "receipt"], [utc_timestamp()] * 2, datas, [rid, rid]))
    with pytest.raises(SchemaOutOfDate, match=f"version 1; this code needs version {len(MIGRATIONS)}"):
        await open_pg_journal(fresh_db, "tools")
    assert (await migrate(fresh_db)) == (1, len(MIGRATIONS))
    report = verify_pg_journal(fresh_db, "tools")
    assert report.ok and report.records == 2, report
    journal = await open_pg_journal(fresh_db, "tools")
    try:
        registry = ToolRegistry([define_tool(name="t", description="x", handler=lambda p, c: {"n": 1})], sink=journal)
        await registry.execute_detailed("t", {})
        await asyncio.gather(*(registry.execute_detailed("t", {}) for _ in range(5)))
    finally:
        await journal.close()
    report = verify_pg_journal(fresh_db, "tools")
    assert report.ok and report.records == 2 + 12 and report.unsettled == 0, report
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT to_regproc('of_journal_append')").fetchone()[0] is None  # version 1's function


@pytest.mark.anyio
async def test_a_receipt_committed_while_an_append_waits_is_a_duplicate_and_its_batch_neighbour_commits(pg_dsn):
    """The append statement's duplicate check sees its own snapshot; a receipt for the same call committed by
    the transaction it waited for trips the unique index: the batch rolls back whole and is appended one record
    at a time: the duplicate refused (``unknown``), its neighbour written, the chain whole."""
    from openfunctions.core import new_id, utc_timestamp
    from openfunctions.core.journal import recovered_receipt
    from openfunctions.store import DuplicateReceipt
    from openfunctions.store._pg_journal_schema import APPEND

    dsn = await migrated(pg_dsn)
    journal = await open_pg_journal(dsn, unique_name("j"))
    racing, neighbour = (recovered_receipt({"receipt_id": new_id("rcpt"), "tool": "t", "started_at": utc_timestamp()})
                         for _ in range(2))
    try:
        await journal.on_settled(recovered_receipt({"receipt_id": new_id("rcpt"), "tool": "t",
                                                   "started_at": utc_timestamp()}))  # the append connection exists
        # another replica, mid-transaction, settling a call of this stream (a recovered receipt goes to the
        # stream of the start it settles)
        other = await psycopg.AsyncConnection.connect(dsn)
        try:
            cur = await other.execute(APPEND, {"journal": journal.name, "stream": journal.stream, "instance": None,
                                               "type": "receipt",
                                               "time": utc_timestamp(), "data": canonical_json_of(racing),
                                               "receipt_id": racing.receipt_id})
            assert (await cur.fetchone())[0] == 2
            # both queue before the flusher runs: one batch (as in the second-receipt test above)
            both = asyncio.gather(journal.on_settled(racing), journal.on_settled(neighbour), return_exceptions=True)
            pid = journal._conn.info.backend_pid
            for _ in range(400):  # until our batch waits for the other transaction's stream head row lock
                with psycopg.connect(dsn) as conn:
                    if conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                    (pid,)).fetchone()[0] == "Lock":
                        break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the batch never waited for the head row")
            await other.commit()
            results = await both
        finally:
            await other.close()
        assert isinstance(results[0], DuplicateReceipt) and results[0].certainty == "unknown", results
        assert results[1] is None
    finally:
        await journal.close()
    report = verify_pg_journal(dsn, journal.name)
    assert report.ok and report.receipts == 3, report


def canonical_json_of(receipt) -> str:
    from openfunctions.core import canonical_json

    return canonical_json(receipt.to_dict())
