"""A crash VFS in the style of SQLite's: the journal writes through a file
layer that "loses power" at a chosen operation. Bytes written since the last
fsync are then dropped, truncated, zeroed or replaced by garbage, sector by
sector. Recovery must never accept garbage and never lose a synced record."""

from __future__ import annotations

import errno
import os
import random

import anyio
import pytest

from openfunctions.core.journal import JournalCorrupt, JournalFailed, JournalLog, read_records
from openfunctions.core.journal._fsutil import FileOps

pytestmark = pytest.mark.anyio
SECTOR = 512


class PowerLoss(OSError):
    def __init__(self) -> None:
        super().__init__(errno.EIO, "simulated power loss")


class CrashOps(FileOps):
    """Counts write/sync operations; at ``crash_at`` it fails (a write may land partially)."""

    def __init__(self, crash_at: int, rng: random.Random) -> None:
        self.crash_at = crash_at
        self.ops = 0
        self.synced_size = -1
        self.rng = rng
        self.dead = False

    def _tick(self) -> bool:
        self.ops += 1
        if self.dead or self.ops >= self.crash_at:
            self.dead = True
            return True
        return False

    def write_all(self, fd: int, data: bytes) -> None:
        if self._tick():
            cut = self.rng.randrange(0, len(data) + 1)
            if cut:
                os.write(fd, data[:cut])  # a torn write reaches the page cache
            raise PowerLoss()
        super().write_all(fd, data)

    def sync(self, fd: int) -> None:
        if self._tick():
            raise PowerLoss()
        super().sync(fd)
        self.synced_size = os.fstat(fd).st_size


def _mangle_unsynced(path, synced: int, mode: str, rng: random.Random) -> None:
    """Apply the crash to every byte after ``synced`` (the durable prefix)."""
    data = bytearray(path.read_bytes())
    tail = data[synced:]
    if mode == "drop":
        tail = bytearray()
    elif mode == "truncate":
        tail = tail[: rng.randrange(0, len(tail) + 1)]
    elif mode == "zero":
        tail = bytearray(len(tail))
    elif mode == "sectors":
        # Per file sector: kept, zeroed (extent allocated, never written) or garbage; then a random length.
        out = bytearray()
        pos = synced
        while pos < len(data):
            end = min(len(data), (pos // SECTOR + 1) * SECTOR)
            chunk = data[pos:end]
            fate = rng.choice(["keep", "keep", "zero", "garbage"])
            if fate == "zero":
                chunk = bytearray(len(chunk))
            elif fate == "garbage":
                chunk = bytearray(rng.randbytes(len(chunk)))
            out += chunk
            pos = end
        tail = out[: rng.randrange(0, len(out) + 1)]
    with open(path, "wb") as f:
        f.write(bytes(data[:synced]) + bytes(tail))


@pytest.mark.parametrize("mode", ["drop", "truncate", "zero", "sectors"])
async def test_crash_vfs_never_loses_synced_records_nor_accepts_garbage(tmp_path, mode):
    rng = random.Random(f"crashvfs-{mode}")
    corrupt_refusals = 0
    for scenario in range(120):
        p = tmp_path / f"{scenario}.jsonl"
        # A clean base so the crash hits a journal with history.
        base = await JournalLog.open(p)
        for i in range(rng.randrange(0, 4)):
            await base.append("base", {"i": i})
        await base.close()
        submitted: dict[int, dict] = {r.seq: r.data for r in read_records(p)}
        acked: set[int] = set(submitted)

        ops = CrashOps(crash_at=rng.randrange(1, 25), rng=rng)
        log = await JournalLog.open(p, _ops=ops)
        ops.synced_size = log.size

        async def appender(k: int, log: JournalLog = log, submitted: dict[int, dict] = submitted,
                           acked: set[int] = acked) -> None:
            for j in range(rng.randrange(1, 6)):
                data = {"k": k, "j": j, "blob": "é" * rng.randrange(0, 300)}
                try:
                    rec = await log.append("t", data)
                except JournalFailed:
                    return
                submitted[rec.seq] = data
                acked.add(rec.seq)

        async with anyio.create_task_group() as tg:
            for k in range(rng.randrange(1, 12)):
                tg.start_soon(appender, k)
        # Whatever was queued when the power failed had seqs assigned too.
        for seq in range(1, log._next_seq):
            submitted.setdefault(seq, None)  # type: ignore[arg-type]
        await log.close()
        assert ops.synced_size >= 0
        synced_bytes = p.read_bytes()[: ops.synced_size]
        _mangle_unsynced(p, ops.synced_size, mode, rng)

        try:
            log = await JournalLog.open(p)
        except JournalCorrupt as exc:
            # Fail closed is allowed only for garbage in the unsynced region.
            assert mode == "sectors", exc
            assert exc.details["offset"] >= ops.synced_size, exc
            assert p.read_bytes()[: ops.synced_size] == synced_bytes
            corrupt_refusals += 1
            continue
        recs = {r.seq: r for r in log.records()}
        await log.close()
        assert sorted(recs) == list(range(1, len(recs) + 1))
        for seq in acked:
            assert seq in recs, f"scenario {scenario}: synced seq {seq} lost"
        for seq, rec in recs.items():
            # Every surviving record is one that was really appended, byte for byte.
            if submitted.get(seq) is not None:
                assert rec.data == submitted[seq]
            else:
                assert rec.type == "t" and set(rec.data) == {"k", "j", "blob"}
        assert p.read_bytes()[: ops.synced_size] == synced_bytes
    print(mode, "refusals", corrupt_refusals)
    # The garbage mode must mostly recover (garbage usually lands in a torn tail).
    assert corrupt_refusals < 120


@pytest.mark.parametrize("mode", ["thread", "on-loop"])
async def test_fsync_error_poisons_until_reopened(tmp_path, monkeypatch, mode):
    # Every path that syncs (the writer thread, the loop's flush) fails the same way.
    monkeypatch.setattr(JournalLog, "sync_on_loop", mode == "on-loop")

    class FailingSync(FileOps):
        fail_next = False

        def sync(self, fd):
            if self.fail_next:
                self.fail_next = False
                raise OSError(errno.EIO, "Input/output error")
            super().sync(fd)

    ops = FailingSync()
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, _ops=ops)
    await log.append("t", {"i": 1})
    ops.fail_next = True
    with pytest.raises(JournalFailed) as ei:
        await log.append("t", {"i": 2})
    assert "Input/output error" in str(ei.value)
    assert log.failed
    # No retry: even though the disk "works" again, the log refuses writes.
    with pytest.raises(JournalFailed):
        await log.append("t", {"i": 3})
    await log.close()
    log = await JournalLog.open(p)
    recs = [r.data["i"] for r in log.records()]
    assert recs[:1] == [1] and recs in ([1], [1, 2])
    assert (await log.append("t", {"i": 4})).seq == len(recs) + 1
    await log.close()


async def test_queued_appenders_all_fail_when_the_batch_fails(tmp_path):
    class FailWrites(FileOps):
        armed = False

        def write_all(self, fd, data):
            if self.armed:
                raise OSError(errno.ENOSPC, "No space left on device")
            super().write_all(fd, data)

    ops = FailWrites()
    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=ops)
    await log.append("t", {})
    ops.armed = True
    errors: list[Exception] = []

    async def one(i):
        try:
            await log.append("t", {"i": i})
        except JournalFailed as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert len(errors) == 20
    assert len({id(e) for e in errors}) == 20  # each appender raises its own exception object
    assert all("No space left" in str(e) for e in errors)
    assert log.last_seq == 1
    await log.close()
