"""Background compaction of a file record stream: appends go on while the snapshot is written, wait only for
the switch, and a crash at any step loses nothing (the old file is the whole truth until the rename).

The toy counters stream of test_record_stream.py: its ``add`` records are not idempotent, so a record
copied into the new file twice (in the snapshot and in the tail) would show as a wrong sum.
"""

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
from openfunctions.core.records import FileRecordLog, RecordStreamError, replay

from .test_record_stream import counters

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


def _on_new_file(monkeypatch: pytest.MonkeyPatch, method: str, hook: Any) -> None:
    """Run ``hook()`` before ``method`` of the compaction's new file (``*.compact``), not of any other."""
    real = getattr(JournalLog, method)

    async def wrapped(self: JournalLog, *args: Any, **kwargs: Any) -> Any:
        if self.path.name.endswith(".compact"):
            await hook()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(JournalLog, method, wrapped)


async def test_an_append_during_a_background_compaction_is_not_blocked_until_the_switch(tmp_path, monkeypatch):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    for _ in range(50):
        await log.append("add", {"k": "a", "v": 1})
    old_file = log.log
    snapshot_writing, release_snapshot = anyio.Event(), anyio.Event()
    switch_reached, switch_append_done = anyio.Event(), anyio.Event()
    seen: dict[str, Any] = {}

    async def hold_snapshot() -> None:
        if not snapshot_writing.is_set():  # the first batch written to the new file: the snapshot
            snapshot_writing.set()
            await release_snapshot.wait()

    async def append_in_switch() -> None:
        rec = await log.append("add", {"k": "s", "v": 1})
        seen["switch_append_went_to"] = log.log  # the file it went to is the open one after the switch
        seen["switch_append_seq"] = rec.seq
        switch_append_done.set()

    async def at_switch() -> None:  # the new file's close: the switch, writes wait at the gate now
        switch_reached.set()
        seen["gate_closed"] = log._gate is not None
        tg.start_soon(append_in_switch)
        await anyio.sleep(0)
        seen["append_done_during_switch"] = switch_append_done.is_set()

    _on_new_file(monkeypatch, "append_many", hold_snapshot)
    _on_new_file(monkeypatch, "close", at_switch)
    compacted = anyio.Event()

    async def compact() -> None:
        seen["result"] = await log.compact_background(kept="all")
        compacted.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(compact)
        await snapshot_writing.wait()
        # The snapshot write is held: an append goes to the old file and returns, durable and folded.
        rec = await log.append("add", {"k": "a", "v": 10})
        assert log.log is old_file and log.compacting and not compacted.is_set()
        assert rec.seq == 51 and log.state["a"] == 60
        with pytest.raises(RecordStreamError, match="background compaction is running"):
            await log.compact()
        release_snapshot.set()
        await switch_reached.wait()
    assert seen["gate_closed"] and not seen["append_done_during_switch"]
    assert switch_append_done.is_set() and seen["switch_append_went_to"] is not old_file
    assert seen["result"].info == {"kept": "all"} and seen["result"].written == 1
    assert log.state == {"a": 60, "s": 1} and not log.compacting
    # the new file: the snapshot (one set), the tail (the add of 10), then the append made in the switch
    records = list(read_records(path))
    assert [(r.type, r.data) for r in records] == [("set", {"k": "a", "v": 50}), ("add", {"k": "a", "v": 10}),
                                                   ("add", {"k": "s", "v": 1})]
    assert records[-1].seq == seen["switch_append_seq"]
    assert log.header_meta["compacted"] is True and log.header_meta["whole"] is True
    assert replay(counters(), path).state == log.state
    await log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.journal", "c.journal.lock"]


async def test_concurrent_appends_and_background_compactions_fold_every_record_once(tmp_path):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    writers, rounds = 8, 40

    async def writer(w: int) -> None:
        for i in range(rounds):
            if i % 2:
                await log.append("add", {"k": f"w{w}", "v": 1})
            else:
                await log.append_many([("add", {"k": f"w{w}", "v": 1}), ("add", {"k": "all", "v": 1})])

    async def compactor() -> None:
        for _ in range(5):
            await log.compact_background()
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        for w in range(writers):
            tg.start_soon(writer, w)
        tg.start_soon(compactor)
    expected = {f"w{w}": rounds for w in range(writers)} | {"all": writers * rounds // 2}
    assert log.state == expected
    assert replay(counters(), path).state == expected
    await log.close()
    again = await FileRecordLog.open(counters(), path)
    assert again.state == expected
    await again.close()


async def test_a_stream_that_keeps_its_segments_does_not_compact_in_the_background(tmp_path):
    log = await FileRecordLog.open(counters(keep_segments=True), tmp_path / "c.journal")
    try:
        with pytest.raises(RecordStreamError, match="compacts by rotating"):
            await log.compact_background()
    finally:
        await log.close()


async def test_a_background_compaction_supersedes_older_segments_even_when_it_keeps_nothing(tmp_path):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append("set", {"k": "a", "v": 1})
    await log.log.rotate(meta=counters().meta)  # a segment before the file (as a crashed rotation leaves)
    await log.append("del", {"k": "a"})
    await log.compact_background()
    assert log.state == {} and list(read_records(path)) == []
    assert not list(tmp_path.glob("c.journal.seg-*"))
    assert replay(counters(), path).state == {}
    await log.close()


CRASHING_CHILD = textwrap.dedent("""
    import os, signal, sys
    import anyio
    from pathlib import Path
    from openfunctions.core.records import FileRecordLog
    sys.path.insert(0, sys.argv[3])
    from tests._harness.kill_points import kill_compaction_at
    from tests.core.test_record_stream import counters

    path, step = Path(sys.argv[1]), sys.argv[2]

    kill_compaction_at(step)

    async def main():
        log = await FileRecordLog.open(counters(), path)
        for i in range(30):
            await log.append("add", {"k": "total", "v": 1})
            await log.append("set", {"k": f"k{i}", "v": i})
            print("acked", f"k{i}", flush=True)
        async def writes():
            i = 1000
            while True:
                await log.append("set", {"k": f"k{i}", "v": i})
                print("acked", f"k{i}", flush=True)
                i += 1
                await anyio.sleep(0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(writes)
            await anyio.sleep(0.05)
            await log.compact_background()
            print("compacted", flush=True)
            await anyio.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)

    anyio.run(main)
""")


@pytest.mark.parametrize("step", ["snapshot", "before_rename", "after_rename", "before_reopen", "after_switch"])
async def test_sigkill_at_each_step_of_a_background_compaction_loses_no_acknowledged_record(tmp_path, step):
    path = tmp_path / "c.journal"
    proc = subprocess.run([sys.executable, "-c", CRASHING_CHILD, str(path), step, str(REPO)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    lines = proc.stdout.split()
    acked = [w for w in lines if w.startswith("k")]
    assert ("compacted" in lines) == (step == "after_switch")  # it died at the step it was told to
    assert len(acked) > 30, "no write was acknowledged beside the compaction: the test would prove nothing"
    # before the rename the unfinished new file is there; the old file is the whole truth
    assert os.path.exists(f"{path}.compact") == (step in ("snapshot", "before_rename"))
    log = await FileRecordLog.open(counters(), path)  # cleans what the compaction left
    try:
        assert log.state["total"] == 30  # each add folded once: the snapshot and the tail do not overlap
        missing = [k for k in acked if k not in log.state]
        assert not missing, f"acknowledged records lost at step {step}: {missing[:5]}"
        assert not os.path.exists(f"{path}.compact") and not os.path.exists(f"{path}.compact.lock")
        if step in ("after_rename", "before_reopen", "after_switch"):  # the new file is in place
            assert json.loads(path.read_text().splitlines()[0])["meta"]["whole"] is True
        assert replay(counters(), path).state == log.state
    finally:
        await log.close()
