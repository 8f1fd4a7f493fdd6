"""``PgKeyLocks``: conflict keys held across processes with PostgreSQL advisory locks.

Two ``PgKeyLocks`` are two replicas' worth of sessions (each its own pool of
connections). Waiting is observed in ``pg_stat_activity`` (an ``advisory``
lock wait), never by timing. Replicas as real processes are in
``test_pg_keylocks_replicas.py``.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.store import PgKeyLocks
from openfunctions.store._pg_keylocks import lock_ids
from tests._pg import unique_name


def _advisory_waiters(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND wait_event = 'advisory' AND datname = current_database()").fetchone()[0]


def _held(dsn: str, namespace: str) -> int:
    """Advisory locks of the two-int4 form held in ``namespace``'s classid."""
    classid, _ = lock_ids(namespace, ())
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
                            "AND classid = (%s::bigint & 4294967295)::oid AND granted",
                            (classid,)).fetchone()[0]


async def _until_waiting(dsn: str, n: int) -> None:
    for _ in range(1000):
        if await asyncio.to_thread(_advisory_waiters, dsn) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never saw {n} advisory lock waiter(s)")


@pytest.fixture
async def two(pg_dsn):
    ns = unique_name("ns")
    a = await PgKeyLocks.open(pg_dsn, namespace=ns, max_connections=4)
    b = await PgKeyLocks.open(pg_dsn, namespace=ns, max_connections=4)
    try:
        yield a, b, ns
    finally:
        await a.close()
        await b.close()


@pytest.mark.anyio
async def test_a_write_key_waits_for_the_other_replicas_holder_and_runs_after_its_release(two, pg_dsn) -> None:
    a, b, ns = two
    release_a = await a.acquire(frozenset({"repo:x"}), shared=False)
    waiting = asyncio.ensure_future(b.acquire(frozenset({"repo:x"}), shared=False))
    await _until_waiting(pg_dsn, 1)
    assert not waiting.done()
    # a disjoint key is granted at once meanwhile
    other = await asyncio.wait_for(b.acquire(frozenset({"repo:y"}), shared=False), timeout=30)
    other()
    release_a()
    release_a()  # idempotent
    release_b = await asyncio.wait_for(waiting, timeout=30)
    assert _held(pg_dsn, ns) == 1
    release_b()
    await asyncio.gather(*list(b._releases))
    assert _held(pg_dsn, ns) == 0


@pytest.mark.anyio
async def test_reads_share_a_key_and_a_write_waits_for_them(two, pg_dsn) -> None:
    a, b, ns = two
    r1 = await a.acquire(frozenset({"doc"}), shared=True)
    r2 = await asyncio.wait_for(b.acquire(frozenset({"doc"}), shared=True), timeout=30)  # granted beside r1
    writer = asyncio.ensure_future(b.acquire(frozenset({"doc"}), shared=False))
    await _until_waiting(pg_dsn, 1)
    r1()
    await asyncio.gather(*list(a._releases))  # the first reader's transaction has ended
    assert _advisory_waiters(pg_dsn) == 1 and not writer.done()  # still one reader: the writer waits
    r2()
    w = await asyncio.wait_for(writer, timeout=30)
    w()


@pytest.mark.anyio
async def test_overlapping_key_sets_in_opposite_orders_never_deadlock(two) -> None:
    a, b, _ = two
    keys = [f"k{i}" for i in range(6)]
    running: set[str] = set()
    overlaps = []

    async def worker(locks: PgKeyLocks, mine: list[str], n: int) -> None:
        for _ in range(n):
            release = await locks.acquire(frozenset(mine), shared=False)
            if running & set(mine):
                overlaps.append(sorted(running & set(mine)))
            running.update(mine)
            await asyncio.sleep(0)
            running.difference_update(mine)
            release()

    await asyncio.wait_for(asyncio.gather(worker(a, keys[:4], 30), worker(b, list(reversed(keys[2:])), 30)),
                           timeout=120)
    assert overlaps == []


@pytest.mark.anyio
async def test_a_cancelled_wait_leaves_no_lock_and_no_connection_behind(two, pg_dsn) -> None:
    a, b, ns = two
    release_a = await a.acquire(frozenset({"x", "y"}), shared=False)
    waiting = asyncio.ensure_future(b.acquire(frozenset({"x", "z"}), shared=False))
    await _until_waiting(pg_dsn, 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release_a()
    # b may hold nothing now: the other replica takes every key, including one b had already locked
    c = await asyncio.wait_for(a.acquire(frozenset({"x", "y", "z"}), shared=False), timeout=30)
    assert _held(pg_dsn, ns) == len(lock_ids(ns, {"x", "y", "z"})[1])
    c()
    # and b still works (its pool replaced the discarded connection)
    d = await asyncio.wait_for(b.acquire(frozenset({"x"}), shared=False), timeout=30)
    d()


@pytest.mark.anyio
async def test_the_executor_holds_a_calls_keys_across_two_registries(pg_dsn) -> None:
    """Through the core's hook: two registries (two replicas' executors) with PgKeyLocks as ``key_locks``;
    a keyed write on one waits, in the database, for the same key's write on the other."""
    ns = unique_name("ns")
    entered = {"a": asyncio.Event(), "b": asyncio.Event()}
    go = asyncio.Event()
    inside: list[str] = []
    overlap = []

    def tool(tag: str):
        async def handler(params, ctx):
            if inside:
                overlap.append((tag, list(inside)))
            inside.append(tag)
            entered[tag].set()
            await go.wait()
            inside.remove(tag)
            return {"tag": tag}

        return define_tool(name="put", description="a keyed write", handler=handler,
                           input_schema={"type": "object", "properties": {"key": {"type": "string"}}},
                           capability={"effect": "write", "conflict_keys": ["/key"]})

    locks = [await PgKeyLocks.open(pg_dsn, namespace=ns) for _ in range(2)]
    regs = [ToolRegistry([tool(t)]) for t in ("a", "b")]
    for reg, lk in zip(regs, locks, strict=True):
        reg.executor.key_locks = lk
    try:
        first = asyncio.ensure_future(regs[0].execute_detailed("put", {"key": "k1"}))
        await entered["a"].wait()
        second = asyncio.ensure_future(regs[1].execute_detailed("put", {"key": "k1"}))
        await _until_waiting(pg_dsn, 1)
        assert not entered["b"].is_set()
        go.set()
        outs = await asyncio.wait_for(asyncio.gather(first, second), timeout=30)
        assert [o.receipt.outcome for o in outs] == ["succeeded", "succeeded"]
        assert entered["b"].is_set() and overlap == []
    finally:
        go.set()
        for lk in locks:
            await lk.close()


@pytest.mark.anyio
async def test_no_free_connection_in_time_refuses_the_call_known_and_frees_its_slot(pg_dsn) -> None:
    """More keyed calls than the pool's connections: the extra one waits ``connection_timeout``, then is
    refused ``key_locks_failed`` (known: nothing ran); its local slot is free again and later calls run."""
    ns = unique_name("ns")
    go = asyncio.Event()
    entered = asyncio.Event()
    ran = []

    async def handler(params, ctx):
        ran.append(params["key"])
        entered.set()
        await go.wait()
        return {}

    locks = await PgKeyLocks.open(pg_dsn, namespace=ns, max_connections=1, connection_timeout=0.3)
    reg = ToolRegistry([define_tool(name="put", description="a keyed write", handler=handler,
                                    input_schema={"type": "object", "properties": {"key": {"type": "string"}}},
                                    capability={"effect": "write", "conflict_keys": ["/key"]})])
    reg.executor.key_locks = locks
    try:
        first = asyncio.ensure_future(reg.execute_detailed("put", {"key": "a"}))
        await entered.wait()
        refused = await asyncio.wait_for(reg.execute_detailed("put", {"key": "b"}), timeout=30)
        assert refused.receipt.outcome == "rejected" and refused.receipt.certainty == "known", refused.receipt
        assert refused.receipt.error.code == "key_locks_failed" and ran == ["a"]
        go.set()
        assert (await first).receipt.outcome == "succeeded"
        again = await asyncio.wait_for(reg.execute_detailed("put", {"key": "b"}), timeout=30)
        assert again.receipt.outcome == "succeeded" and ran == ["a", "b"]
    finally:
        go.set()
        await locks.close()
