"""The local store's own guarantees: paths, modes, ownership, crash safety, compaction."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openfunctions.store import StoreLocked, StoreUnsafe, open_local_store

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


async def test_default_data_dir_is_cwd_dot_data_resolved_at_creation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = await open_local_store("notes")
    try:
        assert s.directory == tmp_path.resolve() / ".data" / "store" / "notes"
        await s.put("k", 1)
        monkeypatch.chdir("/")  # a later cwd change does not move an open store
        await s.put("k2", 2)
    finally:
        await s.aclose()
    assert (tmp_path / ".data" / "store" / "notes" / "store.journal").exists()


async def test_explicit_data_dir_keeps_old_data(tmp_path, monkeypatch):
    old = tmp_path / "previous" / ".data"
    s = await open_local_store("notes", old)
    await s.put("k", "old value")
    await s.aclose()
    monkeypatch.chdir(tmp_path)
    fresh = await open_local_store("notes")  # a different cwd -> a different, empty store; nothing copied
    assert await fresh.get("k") is None
    await fresh.aclose()
    again = await open_local_store("notes", data_dir=str(old))
    assert (await again.get("k")).value == "old value"
    await again.aclose()


async def test_file_modes_are_private(tmp_path):
    s = await open_local_store("m", tmp_path / "d")
    await s.put("k", 1)
    await s.aclose()
    d = tmp_path / "d" / "store" / "m"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for name in ("store.journal", "LOCK"):
        assert stat.S_IMODE(os.stat(d / name).st_mode) == 0o600, name


async def test_group_accessible_dir_refused(tmp_path):
    d = tmp_path / "d" / "store" / "m"
    d.mkdir(parents=True)
    os.chmod(d, 0o755)
    with pytest.raises(StoreUnsafe) as info:
        await open_local_store("m", tmp_path / "d")
    assert "0755" in info.value.message


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "a/b", "", "x" * 65, "-dash"])
async def test_bad_store_names_refused(tmp_path, bad):
    with pytest.raises(StoreUnsafe):
        await open_local_store(bad, tmp_path)


async def test_second_opener_is_refused_naming_the_holder(tmp_path):
    s = await open_local_store("one", tmp_path)
    try:
        with pytest.raises(StoreLocked) as info:
            await open_local_store("one", tmp_path)
        assert str(os.getpid()) in info.value.message
    finally:
        await s.aclose()
    again = await open_local_store("one", tmp_path)  # released on close
    await again.aclose()


async def test_compaction_at_open_keeps_live_entries_and_versions(tmp_path):
    s = await open_local_store("c", tmp_path, compact_min_records=1_000_000)  # no compaction while running
    for i in range(200):
        await s.put(f"k{i % 5}", i)
    await s.put("gone", 1)
    await s.delete("gone")
    last = await s.get("k4")
    await s.aclose()
    path = tmp_path / "store" / "c" / "store.journal"
    before = path.stat().st_size
    s = await open_local_store("c", tmp_path, compact_min_records=50)
    try:
        assert path.stat().st_size < before / 5
        assert [(e.key, e.value) for e in await s.list()] == [(f"k{i}", 195 + i) for i in range(5)]
        assert (await s.get("k4")).version == last.version
        assert (await s.get("k4")).updated_at == last.updated_at
        newer = await s.put("new", 0)
        assert newer.version > last.version + 1  # the deleted key's version is not reused
        assert not (tmp_path / "store" / "c" / "store.journal.compact").exists()
    finally:
        await s.aclose()


CHILD = textwrap.dedent("""
    import asyncio, sys
    from openfunctions.store import open_local_store

    async def main():
        s = await open_local_store("crash", sys.argv[1])
        i = 0
        while True:
            async with s.transaction() as tx:
                await tx.put(f"k{i:06d}", {"i": i, "pad": "x" * 200})
                await tx.put("last", i)
            await s.put(f"single{i:06d}", i)
            print(i, flush=True)   # acknowledged: both writes returned
            i += 1

    asyncio.run(main())
""")


@pytest.mark.slow
async def test_sigkill_loses_no_acknowledged_write(tmp_path):
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=REPO)
        acked = -1
        try:
            for line in proc.stdout:
                acked = int(line)
                if acked >= 40 * (round_ + 1):
                    break
            else:
                pytest.fail(f"child ended early: {proc.stderr.read()}")
            proc.send_signal(signal.SIGKILL)  # mid-stream: more writes are in flight
        finally:
            proc.kill()
            proc.wait(timeout=10)
        s = await open_local_store("crash", tmp_path)
        try:
            for i in range(acked + 1):
                e = await s.get(f"k{i:06d}")
                assert e is not None and e.value["i"] == i, f"acknowledged key k{i:06d} lost in round {round_}"
                assert (await s.get(f"single{i:06d}")).value == i
            last = (await s.get("last")).value
            assert last >= acked
            # a transaction is all or nothing: 'last' never points past a missing key
            assert await s.get(f"k{last:06d}") is not None
        finally:
            await s.aclose()


async def test_compaction_while_running_keeps_every_write_and_serves_calls_meanwhile(tmp_path):
    s = await open_local_store("live", tmp_path, compact_min_records=300, compact_ratio=2.0)
    path = tmp_path / "store" / "live" / "store.journal"
    writers, rounds = 16, 60
    try:
        async def writer(w: int) -> None:
            for i in range(rounds):
                await s.put(f"hot{w:02d}", i)           # overwrites: garbage for compaction
                if i % 10 == 0:
                    await s.put(f"cold{w:02d}-{i:03d}", {"w": w, "i": i})
                got = await s.get(f"hot{w:02d}")     # reads during compaction see the latest write
                assert got is not None and got.value == i

        import anyio

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)
        stats = s.stats()
        assert stats["compactions"] >= 1, stats
        await s.compact()  # on demand too
        assert s.stats()["records"] == s.stats()["keys"]
        expected = {e.key: (e.value, e.version) for e in await s.list(limit=10_000)}
        assert len(expected) == writers + writers * (rounds // 10)
        assert all(expected[f"hot{w:02d}"][0] == rounds - 1 for w in range(writers))
        size_compacted = path.stat().st_size
    finally:
        await s.aclose()
    assert not (path.parent / "store.journal.compact").exists()
    s = await open_local_store("live", tmp_path)
    try:
        assert {e.key: (e.value, e.version) for e in await s.list(limit=10_000)} == expected
        assert path.stat().st_size == size_compacted
    finally:
        await s.aclose()


async def test_compaction_settings_are_checked(tmp_path):
    from openfunctions.store import StoreUnsafe as Unsafe

    with pytest.raises(Unsafe, match="compact_ratio"):
        await open_local_store("x", tmp_path, compact_ratio=0.5)
    with pytest.raises(Unsafe, match="compact_min_records"):
        await open_local_store("x", tmp_path, compact_min_records=-1)


COMPACTING_CHILD = textwrap.dedent("""
    import asyncio, sys
    from openfunctions.store import open_local_store

    async def main():
        s = await open_local_store("crash", sys.argv[1], compact_min_records=200, compact_ratio=2.0)
        i = 0
        while True:
            async with s.transaction() as tx:
                await tx.put(f"k{i:06d}", {"i": i, "pad": "x" * 200})
                await tx.put("last", i)
            for h in range(4):
                await s.put(f"hot{h}", i)
            st = s.stats()
            print(i, int(st["compacting"]), st["compactions"], flush=True)   # acknowledged: every write returned
            i += 1

    asyncio.run(main())
""")


@pytest.mark.slow
async def test_sigkill_during_compaction_loses_no_acknowledged_write(tmp_path):
    killed_mid_compaction = 0
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", COMPACTING_CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=REPO)
        acked, compactions = -1, 0
        try:
            for line in proc.stdout:
                i, compacting, compactions = (int(x) for x in line.split())
                acked = i
                # kill while a compaction runs (writes go on during it), once this round wrote enough
                if i >= 150 * (round_ + 1) and (compacting or i >= 150 * (round_ + 1) + 2_000):
                    killed_mid_compaction += compacting
                    break
            else:
                pytest.fail(f"child ended early: {proc.stderr.read()}")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=10)
        assert compactions >= 1, "the child never compacted: the test would prove nothing"
        s = await open_local_store("crash", tmp_path, compact_min_records=10**9)
        try:
            for i in range(acked + 1):
                e = await s.get(f"k{i:06d}")
                assert e is not None and e.value["i"] == i, f"acknowledged key k{i:06d} lost in round {round_}"
            assert (await s.get("last")).value >= acked
            for h in range(4):
                assert (await s.get(f"hot{h}")).value >= acked
        finally:
            await s.aclose()
        assert not (tmp_path / "store" / "crash" / "store.journal.compact").exists()
    assert killed_mid_compaction >= 1, "no kill landed during a compaction"
