"""PostgreSQL-only work backend behaviour: schema versions, a cut connection mid-append, verify."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from openfunctions.store import SchemaOutOfDate, SchemaTooNew, settled_pg_receipts
from openfunctions.work import BackendUnavailable
from openfunctions.work import records as R
from openfunctions.work._pg import migrate_work, open_pg_work, verify_pg_work
from openfunctions.work._pg_schema import MIGRATIONS
from tests._pg import unique_name

from ._journal_backends import private_database


@pytest.mark.anyio
async def test_serving_refuses_an_older_or_newer_work_schema_and_names_the_command(fresh_db) -> None:
    with pytest.raises(SchemaOutOfDate) as err:
        await open_pg_work(fresh_db)
    assert "the work schema in" in str(err.value)  # names the component
    assert f"version 0; this code needs version {len(MIGRATIONS)}" in str(err.value)
    assert "openfunctions-mcp db migrate" in str(err.value)
    assert await migrate_work(fresh_db) == (0, len(MIGRATIONS))
    assert await migrate_work(fresh_db) == (len(MIGRATIONS), len(MIGRATIONS))  # idempotent
    b = await open_pg_work(fresh_db)
    await b.aclose()
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("UPDATE of_schema SET version = version + 1 WHERE component = 'work'")
    with pytest.raises(SchemaTooNew) as err2:
        await open_pg_work(fresh_db)
    assert f"version {len(MIGRATIONS) + 1}; this code knows up to version {len(MIGRATIONS)}" in str(err2.value)


@pytest.mark.anyio
async def test_a_connection_cut_mid_append_is_an_unknown_error_and_the_next_read_folds_what_committed(pg_dsn) -> None:
    await migrate_work(pg_dsn)
    b = await open_pg_work(pg_dsn, unique_name("w"), max_connections=1)
    try:
        lease = await b.leases.acquire()
        t, d = R.lease_acquired(owner=lease.owner, generation=lease.generation, pid=1, catalog_digest="c")
        await b.attempts.append(lease, t, {**d, "lease_generation": lease.generation})
        async with b.leases.pg.connection() as mine:  # the pool's one connection
            pid = mine.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a partition: the database drops it
            assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        with pytest.raises(BackendUnavailable) as err:
            await b.attempts.append(lease, t, {**d, "lease_generation": lease.generation})
        assert err.value.details["certainty"] == "unknown" and "may or may not have committed" in err.value.message
        # the pool reconnects: the next read folds what committed (here: the first record only), the next append lands
        assert [r.seq for r in await b.attempts.read(0)] == [1]
        await b.attempts.append(lease, t, {**d, "lease_generation": lease.generation})
        assert [r.seq for r in await b.attempts.read(0)] == [1, 2]
    finally:
        await b.aclose()


@pytest.mark.anyio
async def test_a_dead_holders_live_lease_is_taken_over_at_once_a_live_ones_only_after_expiry(pg_dsn) -> None:
    """The holder's process keeps a session advisory lock; when its session ends (the process died) the next
    acquire takes the live lease over at once with generation + 1, and the dead holder's writes are refused."""
    from openfunctions.work import LeaseHeld, LeaseLost

    await migrate_work(pg_dsn)
    space = unique_name("w")
    a, b = await open_pg_work(pg_dsn, space, ttl=300), await open_pg_work(pg_dsn, space, ttl=300)
    try:
        la = await a.leases.acquire()
        with pytest.raises(LeaseHeld):  # alive (its liveness session is there): 300 s to wait
            await b.leases.acquire()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # a holder of an older release (no liveness lock) is never taken for dead
            conn.execute("UPDATE of_work_leases SET alive_key = NULL WHERE space = %s", (space,))
            assert conn.execute("SELECT pg_terminate_backend(%s)", (a.leases.pg.alive[la.owner].info.backend_pid,)).fetchone()[0]
        with pytest.raises(LeaseHeld):
            await b.leases.acquire()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the row names its key again: now it is dead
            conn.execute("UPDATE of_work_leases SET alive_key = %s WHERE space = %s", (a.leases.pg.alive_key(la.owner), space))
        lb = await b.leases.acquire()  # at once, long before expiry
        assert lb.generation == la.generation + 1 and lb.owner != la.owner
        with pytest.raises(LeaseLost, match="stale"):
            await a.attempts.append(la, "lease_acquired", {"owner": la.owner, "generation": la.generation, "pid": 1,
                                                           "catalog_digest": "c", "lease_generation": la.generation})
        assert await b.attempts.read(0) == []
        with pytest.raises(LeaseHeld):  # b lives
            await a.leases.acquire()
        await b.leases.release(lb)
        la2 = await a.leases.acquire()  # a, alive after all (only its session was cut), locks itself again
        with pytest.raises(LeaseHeld):
            await b.leases.acquire()
        assert la2.generation == lb.generation + 1
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.anyio
async def test_verify_finds_a_gap_and_a_record_of_a_stale_generation(pg_dsn) -> None:
    await migrate_work(pg_dsn)
    space = unique_name("w")
    b = await open_pg_work(pg_dsn, space)
    try:
        lease = await b.leases.acquire()
        for _ in range(3):
            t, d = R.lease_acquired(owner=lease.owner, generation=lease.generation, pid=1, catalog_digest="c")
            await b.attempts.append(lease, t, {**d, "lease_generation": lease.generation})
        assert verify_pg_work(pg_dsn, space) == []
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE of_work_records SET generation = 7 WHERE space = %s AND seq = 2", (space,))
            conn.execute("DELETE FROM of_work_records WHERE space = %s AND seq = 3", (space,))
        problems = verify_pg_work(pg_dsn, space)
        assert any("generation 7 is newer than the lease's 1" in p for p in problems), problems
        assert any("last_seq is 3 but the last record is seq 2" in p for p in problems), problems
    finally:
        await b.aclose()


def test_the_grant_cli_issues_lists_and_revokes_grants_in_the_database(pg_dsn, tmp_path) -> None:
    def cli(*argv: str) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.pop("OPENFUNCTIONS_DATABASE_URL", None)
        return subprocess.run([sys.executable, "-m", "openfunctions.servers", "grant", *argv], capture_output=True,
                              text=True, timeout=60, env=env)

    with private_database(pg_dsn) as dsn:
        asyncio.run(migrate_work(dsn))
        out = cli("issue", "--principal", "agent", "--steps", "test", "--ttl", "1h", "--database", dsn,
                  "--data-dir", str(tmp_path))
        assert out.returncode == 0, out.stderr
        gid = out.stdout.split()[0]
        listed = cli("list", "--database", dsn, "--json")
        assert [g["grant_id"] for g in json.loads(listed.stdout)] == [gid]
        # work's own command line opens work's own backend: nothing has to be injected by the server CLI
        alone = subprocess.run([sys.executable, "-m", "openfunctions.work.cli", "grant", "list", "--database", dsn,
                                "--json"], capture_output=True, text=True, timeout=60,
                               env={k: v for k, v in os.environ.items() if k != "OPENFUNCTIONS_DATABASE_URL"})
        assert alone.returncode == 0, alone.stderr
        assert [g["grant_id"] for g in json.loads(alone.stdout)] == [gid]
        assert cli("list", "--data-dir", str(tmp_path)).stdout.startswith("no grants in"), "not in the data directory"
        assert cli("revoke", gid, "--by", "op", "--database", dsn).returncode == 0

        async def seen() -> Any:
            b = await open_pg_work(dsn, "work")
            try:
                return await b.grants.get(gid)
            finally:
                await b.aclose()

        g = asyncio.run(seen())
        assert g.revoked() and g.revoked_by == "op"
        bad = cli("revoke", "grant_nope", "--database", dsn)
        assert bad.returncode == 2 and "no grant 'grant_nope'" in bad.stderr


@pytest.mark.anyio
async def test_the_settled_receipts_lookup_takes_one_connection_of_the_pool(pg_dsn) -> None:
    """Recovery's receipt lookup borrows one pooled connection, not two: with a pool of one it answers (it used
    to hold a connection idle while the reader waited for another, so it failed after the pool's timeout)."""
    await migrate_work(pg_dsn)  # every component: the journal's too
    b = await open_pg_work(pg_dsn, unique_name("w"), max_connections=1, timeout=2, receipts=settled_pg_receipts)
    try:
        async with asyncio.timeout(30):
            assert await b.settled_receipts({"rcpt_nothing_here"}) == {}
    finally:
        await b.aclose()


@pytest.mark.anyio
async def test_a_liveness_lock_still_held_by_an_old_session_fails_the_acquire_in_bounded_time(pg_dsn) -> None:
    """A replica whose old liveness session lingers on the server (a partition the server has not noticed yet)
    cannot lock itself again: its acquire fails with a clear BackendUnavailable after the backend's timeout,
    instead of waiting on pg_advisory_lock for as long as that session lives; once it is gone, the acquire works."""
    await migrate_work(pg_dsn)
    b = await open_pg_work(pg_dsn, unique_name("w"), timeout=2)
    try:
        key = b.leases.pg.alive_key(b.leases.owner)
        with psycopg.connect(pg_dsn, autocommit=True) as zombie:  # the old session, still holding our key
            zombie.execute("SELECT pg_advisory_lock(%s)", (key,))
            async with asyncio.timeout(30):
                with pytest.raises(BackendUnavailable, match="cannot take the work lease") as err:
                    await b.leases.acquire()
            assert err.value.details["certainty"] == "known"
        lease = await b.leases.acquire()  # the old session ended: we lock ourselves and take the lease
        assert lease.generation >= 1
    finally:
        await b.aclose()
