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
