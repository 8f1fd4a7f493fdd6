"""The store interface, run on both backends (``store`` is parametrized: local and PostgreSQL)."""

from __future__ import annotations

import asyncio
import math
import re

import pytest

from openfunctions.store import (
    MAX_KEY_BYTES,
    Conflict,
    InvalidKey,
    InvalidValue,
    ValueTooLarge,
)

pytestmark = pytest.mark.anyio

HOSTILE_KEYS = [
    "'; DROP TABLE of_store_entries; --",
    "a' OR '1'='1",
    "../../etc/passwd",
    "%",
    "_",
    "a%b",
    "a_b",
    "\\",
    'quote"double',
    "line\nbreak",
    "tab\tand space ",
    "ünïcødé/键/🔑",
    "$1",
    "%s",
    "%(x)s",
    "{0}",
]


async def test_put_get_roundtrip_and_versions(store):
    assert await store.get("missing") is None
    e1 = await store.put("k", {"a": [1, 2.5, "x", None, True]})
    assert e1.version > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e1.updated_at)
    got = await store.get("k")
    assert got is not None and got.value == {"a": [1, 2.5, "x", None, True]} and got.version == e1.version
    e2 = await store.put("k", "second")
    assert e2.version > e1.version
    assert (await store.get("k")).value == "second"


async def test_values_with_nul_and_unicode_survive(store):
    value = {"text": "nul\u0000inside", "emoji": "🔑", "nested": {"z": 1, "a": 2}}
    await store.put("odd", value)
    assert (await store.get("odd")).value == value


async def test_delete(store):
    await store.put("k", 1)
    assert await store.delete("k") is True
    assert await store.get("k") is None
    assert await store.delete("k") is False


async def test_list_prefix_order_paging_and_reverse(store):
    for k in ["b/2", "b/1", "a/1", "b/3", "c", "b/10", "b"]:
        await store.put(k, k)
    assert [e.key for e in await store.list("b/")] == ["b/1", "b/10", "b/2", "b/3"]
    assert [e.key for e in await store.list()] == ["a/1", "b", "b/1", "b/10", "b/2", "b/3", "c"]
    page1 = await store.list("b/", limit=2)
    page2 = await store.list("b/", limit=2, after=page1[-1].key)
    assert [e.key for e in page1 + page2] == ["b/1", "b/10", "b/2", "b/3"]
    assert await store.list("b/", after="b/3") == []
    rev = await store.list("b/", reverse=True, limit=3)
    assert [e.key for e in rev] == ["b/3", "b/2", "b/10"]
    assert [e.key for e in await store.list("b/", reverse=True, after="b/10")] == ["b/1"]
    assert await store.list("zzz") == []


async def test_list_prefix_wildcards_are_literal(store):
    for k in ["a%b", "axb", "a_c", "abc", "a%"]:
        await store.put(k, k)
    assert [e.key for e in await store.list("a%")] == ["a%", "a%b"]
    assert [e.key for e in await store.list("a_")] == ["a_c"]


async def test_hostile_keys_are_data(store):
    for i, k in enumerate(HOSTILE_KEYS):
        await store.put(k, {"i": i, "k": k})
    for i, k in enumerate(HOSTILE_KEYS):
        e = await store.get(k)
        assert e is not None and e.value == {"i": i, "k": k}, k
    listed = [e.key for e in await store.list(limit=1000)]
    assert listed == sorted(HOSTILE_KEYS)
    # the table survived the DROP TABLE key, and prefixes are matched literally
    assert [e.key for e in await store.list("'; DROP")] == ["'; DROP TABLE of_store_entries; --"]
    assert await store.delete("a' OR '1'='1") is True
    assert len(await store.list(limit=1000)) == len(HOSTILE_KEYS) - 1


async def test_compare_and_set(store):
    created = await store.compare_and_set("c", 0, "v1")
    with pytest.raises(Conflict) as info:
        await store.compare_and_set("c", 0, "again")
    assert info.value.code == "store_conflict" and info.value.certainty == "known"
    assert info.value.details["version"] == created.version
    with pytest.raises(Conflict):
        await store.compare_and_set("c", created.version + 1000, "wrong")
    updated = await store.compare_and_set("c", created.version, "v2")
    assert updated.version > created.version
    assert (await store.get("c")).value == "v2"


async def test_no_aba_after_delete_and_recreate(store):
    first = await store.put("x", 1)
    await store.delete("x")
    again = await store.put("x", 1)
    assert again.version > first.version
    with pytest.raises(Conflict):
        await store.compare_and_set("x", first.version, 2)


async def test_compare_and_delete(store):
    e = await store.put("d", 1)
    with pytest.raises(Conflict):
        await store.compare_and_delete("d", e.version + 1)
    with pytest.raises(Conflict):
        await store.compare_and_delete("absent", 1)
    await store.compare_and_delete("d", e.version)
    assert await store.get("d") is None


async def test_transaction_commits_all(store):
    await store.put("t/a", 1)
    async with store.transaction() as tx:
        a = await tx.get("t/a")
        await tx.put("t/a", a.value + 1)
        await tx.put("t/b", "new")
        await tx.delete("t/missing")
    assert (await store.get("t/a")).value == 2
    assert (await store.get("t/b")).value == "new"


async def test_transaction_rolls_back_on_error(store):
    await store.put("r", "before")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with store.transaction() as tx:
            await tx.put("r", "during")
            await tx.put("r2", "during")
            raise Boom()
    assert (await store.get("r")).value == "before"
    assert await store.get("r2") is None


async def test_transaction_conflict_writes_nothing(store):
    await store.put("acct", 10)
    with pytest.raises(Conflict):
        async with store.transaction() as tx:
            bal = (await tx.get("acct")).value
            await store.put("acct", 100)  # a concurrent writer gets in between
            await tx.put("acct", bal - 1)
            await tx.put("side", "effect")
    assert (await store.get("acct")).value == 100
    assert await store.get("side") is None


async def test_oversized_value_refused_before_write(store):
    await store.put("big", "small")
    with pytest.raises(ValueTooLarge) as info:
        await store.put("big", "x" * 5000)
    assert info.value.code == "store_value_too_large" and "4096" in info.value.message
    assert info.value.certainty == "known"
    with pytest.raises(ValueTooLarge):
        await store.compare_and_set("big", 1, "y" * 5000)
    with pytest.raises(ValueTooLarge):
        async with store.transaction() as tx:
            await tx.put("big2", "z" * 5000)
    assert (await store.get("big")).value == "small"
    assert await store.get("big2") is None


@pytest.mark.parametrize("bad", ["", "nul\x00key", "lone\ud800surrogate", "k" * (MAX_KEY_BYTES + 1), 42, None, b"bytes"])
async def test_bad_keys_refused(store, bad):
    with pytest.raises(InvalidKey):
        await store.put(bad, 1)
    with pytest.raises(InvalidKey):
        await store.get(bad)


@pytest.mark.parametrize("bad", [math.nan, math.inf, b"bytes", object(), {1: "int key"}, "lone\udc00"])
async def test_bad_values_refused(store, bad):
    with pytest.raises(InvalidValue):
        await store.put("k", bad)
    assert await store.get("k") is None


async def test_persists_across_reopen(store, reopen):
    await store.put("p/1", {"v": 1})
    e = await store.put("p/2", [1, 2])
    await store.delete("p/1")
    async with store.transaction() as tx:
        await tx.put("p/3", "t")
    await store.flush()
    again = await reopen(store)
    try:
        assert await again.get("p/1") is None
        got = await again.get("p/2")
        assert got.value == [1, 2] and got.version == e.version
        assert (await again.get("p/3")).value == "t"
        newer = await again.put("p/4", 0)
        assert newer.version > e.version
    finally:
        await again.aclose()


async def test_many_concurrent_writers(store):
    async def writer(w: int) -> None:
        for i in range(20):
            await store.put(f"w/{w:02d}/{i:02d}", {"w": w, "i": i})

    await asyncio.gather(*(writer(w) for w in range(25)))
    entries = []
    after = None
    while True:
        page = await store.list("w/", after=after, limit=200)
        if not page:
            break
        entries += page
        after = page[-1].key
    assert len(entries) == 500
    assert all(e.value == {"w": int(e.key[2:4]), "i": int(e.key[5:7])} for e in entries)
    assert len({e.version for e in entries}) == 500  # every write got its own version


async def test_compare_and_set_race_loses_no_increment(store):
    await store.put("counter", 0)
    conflicts = 0

    async def incrementer() -> None:
        nonlocal conflicts
        for _ in range(10):
            while True:
                cur = await store.get("counter")
                try:
                    await store.compare_and_set("counter", cur.version, cur.value + 1)
                    break
                except Conflict:
                    conflicts += 1

    await asyncio.gather(*(incrementer() for _ in range(10)))
    assert (await store.get("counter")).value == 100


async def test_compare_and_set_create_race_has_one_winner(store):
    start = asyncio.Event()

    async def claim(i: int):
        await start.wait()
        try:
            await store.compare_and_set("leader", 0, i)
            return i
        except Conflict:
            return None

    tasks = [asyncio.ensure_future(claim(i)) for i in range(20)]
    await asyncio.sleep(0)
    start.set()
    winners = [r for r in await asyncio.gather(*tasks) if r is not None]
    assert len(winners) == 1
    assert (await store.get("leader")).value == winners[0]


async def test_concurrent_transactions_are_serializable(store):
    await store.put("bal", 0)

    async def add_one() -> None:
        while True:
            try:
                async with store.transaction() as tx:
                    cur = await tx.get("bal")
                    await asyncio.sleep(0)  # let the others interleave
                    await tx.put("bal", cur.value + 1)
                return
            except Conflict:
                continue

    await asyncio.gather(*(add_one() for _ in range(8)))
    assert (await store.get("bal")).value == 8
