"""The local store compacts through the core record stream's background compaction: a write during it is
not blocked until the switch, and a SIGKILL at any of its steps loses no acknowledged write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core.journal import JournalLog, read_records
from openfunctions.store import open_local_store

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


async def test_a_put_during_a_compaction_is_not_blocked_until_the_switch(tmp_path, monkeypatch):
    s = await open_local_store("c", tmp_path, compact_min_records=10**9)
    path = tmp_path / "store" / "c" / "store.journal"
    for i in range(20):
        await s.put("hot", i)
    await s.put("cold", "x")
    snapshot_writing, release = anyio.Event(), anyio.Event()
    seen: dict[str, Any] = {}
    real_append_many, real_close = JournalLog.append_many, JournalLog.close

    async def append_many(self: JournalLog, records: Any) -> Any:
        if self.path.name.endswith(".compact") and not snapshot_writing.is_set():
            snapshot_writing.set()
            await release.wait()
        return await real_append_many(self, records)

    async def close(self: JournalLog) -> None:
        if self.path.name.endswith(".compact"):  # the switch: the old journal is closed, writes wait
            tg_.start_soon(switch_put)  # gated: put into the closed old journal, it would fail the store
        await real_close(self)

    async def switch_put() -> None:
        seen["entry"] = await s.put("during-switch", 1)

    monkeypatch.setattr(JournalLog, "append_many", append_many)
    monkeypatch.setattr(JournalLog, "close", close)
    try:
        async with anyio.create_task_group() as tg_:
            tg_.start_soon(s.compact)
            await snapshot_writing.wait()
            # the snapshot is being written: a put returns (durable in the old journal), so do a read and a CAS
            e = await s.put("hot", 100)
            assert (await s.get("hot")).version == e.version
            await s.compare_and_set("cold", (await s.get("cold")).version, "y")
            assert not release.is_set()
            release.set()
        assert seen["entry"].version == e.version + 2
        st = s.stats()
        assert st["compactions"] == 1 and st["keys"] == 3
        # the new file: the snapshot (two puts at the snapshot's revision floor), the tail, the switch's put
        header = json.loads(path.read_text().splitlines()[0])["meta"]
        assert header["rev"] == 21 and header["store"] == "c" and header["format"] == 1
        recs = [(r.type, r.data["k"], r.data["ver"]) for r in read_records(path)]
        assert recs == [("put", "hot", 20), ("put", "cold", 21), ("put", "hot", 22), ("put", "cold", 23),
                        ("put", "during-switch", 24)]
        assert st["records"] == 2 + 3
    finally:
        await s.aclose()
    again = await open_local_store("c", tmp_path)
    try:
        assert {e.key: (e.value, e.version) for e in await again.list()} == {
            "cold": ("y", 23), "during-switch": (1, 24), "hot": (100, 22)}
    finally:
        await again.aclose()


CRASHING_CHILD = textwrap.dedent("""
    import asyncio, sys
    from openfunctions.store import open_local_store
    from tests._harness.kill_points import die, kill_compaction_at

    kill_compaction_at(sys.argv[2])

    async def main():
        s = await open_local_store("crash", sys.argv[1], compact_min_records=10**9)
        for i in range(200):
            await s.put(f"k{i % 20}", i)
            print("acked", i, flush=True)
        async def writes():
            i = 200
            while True:
                await s.put(f"k{i % 20}", i)
                await s.put(f"new{i}", i)
                print("acked", i, flush=True)
                i += 1
        w = asyncio.ensure_future(writes())
        await asyncio.sleep(0.02)
        await s.compact()
        print("compacted", flush=True)
        await asyncio.sleep(0.02)
        die()

    asyncio.run(main())
""")


@pytest.mark.parametrize("step", ["before_rename", "after_rename", "before_reopen", "after_switch"])
async def test_sigkill_at_each_step_of_a_store_compaction_loses_no_acknowledged_write(tmp_path, step):
    proc = subprocess.run([sys.executable, "-c", CRASHING_CHILD, str(tmp_path), step], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    words = proc.stdout.split()
    assert ("compacted" in words) == (step == "after_switch")
    acked = max(int(w) for w in words if w.isdigit())
    assert acked > 200, "no write was acknowledged beside the compaction: the test would prove nothing"
    directory = tmp_path / "store" / "crash"
    assert (directory / "store.journal.compact").exists() == (step == "before_rename")
    s = await open_local_store("crash", tmp_path, compact_min_records=10**9)
    try:
        for k in range(20):  # each key's last acknowledged value (or a later, unacknowledged one)
            last = max(i for i in range(acked + 1) if i % 20 == k)
            assert (await s.get(f"k{k}")).value >= last, f"k{k} lost its acknowledged value at step {step}"
        for i in range(200, acked + 1):
            assert (await s.get(f"new{i}")) is not None, f"acknowledged new{i} lost at step {step}"
        assert not (directory / "store.journal.compact").exists()
        assert not os.path.exists(directory / "store.journal.compact.lock")
    finally:
        await s.aclose()


async def test_the_revision_floor_survives_a_compaction_that_drops_the_newest_version(tmp_path):
    s = await open_local_store("f", tmp_path, compact_min_records=10**9)
    await s.put("a", 1)
    await s.put("b", 2)
    await s.delete("b")  # consumes revision 3; no live entry keeps it
    await s.compact()
    await s.aclose()
    s = await open_local_store("f", tmp_path)
    try:
        assert s.stats()["records"] == 1
        assert (await s.put("c", 3)).version == 4  # not 2: versions never go back
    finally:
        await s.aclose()
