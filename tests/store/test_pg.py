"""The PostgreSQL store's own guarantees: schema versions, a database going away, bad DSNs."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

from openfunctions.store import SchemaTooNew, StoreUnavailable, open_pg_store
from tests._pg import unique_name

pytestmark = pytest.mark.anyio


def _with_schema(dsn: str, schema: str) -> str:
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options={urllib.parse.quote(f'-csearch_path={schema}')}"


async def _sql(dsn: str, sql: str, params=()):
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall() if cur.description else None


async def test_schema_created_versioned_and_newer_refused(pg_dsn):
    schema = unique_name("sch")
    await _sql(pg_dsn, f'CREATE SCHEMA "{schema}"')
    dsn = _with_schema(pg_dsn, schema)
    s = await open_pg_store("v", dsn)
    await s.put("k", 1)
    await s.aclose()
    rows = await _sql(pg_dsn, f'SELECT component, version FROM "{schema}".of_schema')
    assert rows == [("store", 1)]
    s = await open_pg_store("v", dsn)  # a second open migrates nothing and keeps the data
    assert (await s.get("k")).value == 1
    await s.aclose()
    await _sql(pg_dsn, f'UPDATE "{schema}".of_schema SET version = 99 WHERE component = %s', ("store",))
    with pytest.raises(SchemaTooNew) as info:
        await open_pg_store("v", dsn)
    assert "99" in info.value.message and info.value.code == "store_schema_too_new"


async def test_concurrent_first_opens_migrate_once(pg_dsn):
    schema = unique_name("sch")
    await _sql(pg_dsn, f'CREATE SCHEMA "{schema}"')
    dsn = _with_schema(pg_dsn, schema)
    stores = await asyncio.gather(*(open_pg_store(f"s{i}", dsn) for i in range(4)))
    for s in stores:
        await s.put("k", s.name)
        await s.aclose()
    assert await _sql(pg_dsn, f'SELECT version FROM "{schema}".of_schema') == [(1,)]


async def test_unreachable_database_is_a_clear_error_without_the_password():
    with pytest.raises(StoreUnavailable) as info:
        await open_pg_store("x", "postgresql://user:s3cret-pw@127.0.0.1:1/db?connect_timeout=2", timeout=3)
    assert "s3cret-pw" not in info.value.message
    assert "127.0.0.1" in info.value.message


async def test_database_gone_mid_write_is_unknown_then_reconnects(pg_dsn):
    """A write blocked in the database when its backend is terminated: an error with unknown certainty,
    and the next call works on a fresh connection."""
    import psycopg

    s = await open_pg_store(unique_name("gone"), pg_dsn)
    try:
        await s.put("k", "before")
        blocker = await psycopg.AsyncConnection.connect(pg_dsn)
        try:
            await blocker.execute("SELECT 1 FROM of_store_entries WHERE store = %s AND key = %s FOR UPDATE",
                                  (s.name, "k"))
            write = asyncio.ensure_future(s.put("k", "during"))
            victim = None
            for _ in range(500):  # until the write is seen waiting on the row lock (bounded)
                rows = await _sql(pg_dsn, "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                          "AND query LIKE 'INSERT INTO of_store_entries%%'")
                if rows:
                    victim = rows[0][0]
                    break
                await asyncio.sleep(0.01)
            assert victim is not None, "the write never blocked on the row lock"
            await _sql(pg_dsn, "SELECT pg_terminate_backend(%s)", (victim,))
            with pytest.raises(StoreUnavailable) as info:
                await write
            assert info.value.certainty == "unknown"
            assert "next call reconnects" in info.value.message
        finally:
            await blocker.rollback()
            await blocker.close()
        assert (await s.get("k")).value == "before"  # reconnected; the write did not commit
        await s.put("k", "after")
        assert (await s.get("k")).value == "after"
    finally:
        await s.aclose()


async def test_two_pools_share_one_store(pg_dsn):
    name = unique_name("shared")
    a = await open_pg_store(name, pg_dsn)
    b = await open_pg_store(name, pg_dsn)
    try:
        e = await a.put("k", 1)
        got = await b.get("k")
        assert got.value == 1 and got.version == e.version
    finally:
        await a.aclose()
        await b.aclose()
