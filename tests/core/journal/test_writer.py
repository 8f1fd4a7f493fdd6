"""The group-commit writer thread (core/journal/_writer.py): batching, idle exit, loops, drain."""

from __future__ import annotations

import threading

import anyio
import pytest

from openfunctions.core.journal import JournalClosed, JournalLog, _writer, read_records
from openfunctions.core.journal._fsutil import FileOps
from tests._harness import writer_threads

from .._helpers import until


@pytest.mark.anyio
async def test_everything_queued_during_a_sync_goes_into_the_next_single_write(tmp_path):
    release = threading.Event()
    writes: list[int] = []

    class GatedOps(FileOps):
        def write_all(self, fd, data):
            writes.append(data.count(b"\n"))
            super().write_all(fd, data)

        def sync(self, fd):
            if len(writes) == 1:
                release.wait(30)
            super().sync(fd)

    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=GatedOps())
    seqs: list[int] = []

    async def one(i: int) -> None:
        seqs.append((await log.append("t", {"i": i})).seq)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await until(lambda: writes == [1])  # record 1 is in its fsync, held there
        for i in range(1, 11):
            tg.start_soon(one, i)
        await until(lambda: log._next_seq == 12)  # all ten queued behind it
        assert seqs == []  # nobody is acknowledged before its fsync
        release.set()
    assert writes == [1, 10]
    assert sorted(seqs) == list(range(1, 12))
    await log.close()
    assert [r.data["i"] for r in read_records(tmp_path / "j.jsonl")] == list(range(11))


@pytest.mark.anyio
async def test_an_idle_writer_thread_exits_and_the_next_append_starts_one(tmp_path, monkeypatch):
    monkeypatch.setattr(_writer, "IDLE_EXIT", 0.05)
    p = tmp_path / "idle.jsonl"
    log = await JournalLog.open(p)
    assert writer_threads(p) == []  # no thread before the first append
    await log.append("t", {"n": 1})
    assert len(writer_threads(p)) == 1
    for _ in range(400):  # up to ~4 s of real time for a 0.05 s idle timeout
        if not writer_threads(p):
            break
        await anyio.sleep(0.01)
    assert writer_threads(p) == []
    rec = await log.append("t", {"n": 2})
    assert rec.seq == 2 and log.last_seq == 2
    await log.close()
    assert writer_threads(p) == []  # close ends the thread
    assert [r.data["n"] for r in read_records(p)] == [1, 2]


def test_a_log_outlives_its_event_loop(tmp_path):
    # One log, appended from two event loops one after the other (an app
    # that runs anyio.run twice): each batch wakes its own loop's futures.
    p = tmp_path / "loops.jsonl"
    log = JournalLog.open_sync(p)

    async def burst(tag: str) -> list[int]:
        out: list[int] = []

        async def one(i: int) -> None:
            out.append((await log.append("t", {"tag": tag, "i": i})).seq)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        return sorted(out)

    assert anyio.run(burst, "a") == list(range(1, 21))
    assert anyio.run(burst, "b") == list(range(21, 41))
    anyio.run(log.close)
    assert [r.seq for r in read_records(p)] == list(range(1, 41))


@pytest.mark.anyio
async def test_a_crash_like_close_finishes_the_write_in_flight_and_fails_the_queued_appenders(tmp_path):
    # _close_now is what a crash looks like to the file: the in-flight write
    # finishes, what is still queued is dropped, and its appender is told so
    # (JournalClosed) instead of waiting forever.
    release = threading.Event()
    entered = threading.Event()

    class GatedOps(FileOps):
        def sync(self, fd):
            entered.set()
            release.wait(30)
            super().sync(fd)

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, _ops=GatedOps())
    results: dict[int, object] = {}

    async def one(i: int) -> None:
        try:
            results[i] = (await log.append("t", {"i": i})).seq
        except JournalClosed as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, 0)
        await anyio.to_thread.run_sync(entered.wait, 30)
        tg.start_soon(one, 1)  # queued behind the held fsync
        await until(lambda: log._next_seq == 3)
        threading.Timer(0.05, release.set).start()
        log._close_now()  # joins the writer: record 1 finishes, record 2 is dropped
        with anyio.fail_after(30):  # a safety net, not a timing assertion: it must not hang
            await until(lambda: len(results) == 2, max_checkpoints=10**7)
    assert results[0] == 1
    assert isinstance(results[1], JournalClosed) and "closed before this record was written" in str(results[1])
    assert [r.seq for r in read_records(p)] == [1]


@pytest.mark.anyio
async def test_a_log_collected_on_its_own_writer_thread_closes_there(tmp_path):
    # The garbage collector may run a dropped log's __del__ on the writer
    # thread, even mid-batch. It must not take the writer's lock there (it
    # may hold it) nor close the fd under the write: the thread finishes the
    # batch, then closes the fd and releases the flock itself.
    p = tmp_path / "j.jsonl"
    holder: dict[str, JournalLog] = {}
    where: list[str] = []

    class CollectDuringSync(FileOps):
        def sync(self, fd):
            log = holder.pop("log", None)
            if log is not None:
                where.append(threading.current_thread().name)
                log.__del__()  # what a collection on this thread would run
            super().sync(fd)  # the fd must still be open here

    log = await JournalLog.open(p, _ops=CollectDuringSync())
    holder["log"] = log
    rec = await log.append("t", {"i": 1})
    assert rec.seq == 1 and where == [f"journal-writer:{p.name}"]
    for _ in range(400):  # the thread exits once the batch is done (safety net ~4 s)
        if not writer_threads(p):
            break
        await anyio.sleep(0.01)
    assert writer_threads(p) == []
    assert log.closed and log._fd == -1
    # The flock was released: the journal reopens in this process, record intact.
    reopened = await JournalLog.open(p)
    assert reopened.last_seq == 1
    await reopened.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["thread", "on-loop"])
async def test_many_appenders_with_cancellations_lose_nothing_that_was_queued(tmp_path, monkeypatch, mode):
    # On the loop, the same storm exercises cancellations while a record waits for the next iteration's flush.
    monkeypatch.setattr(JournalLog, "sync_on_loop", mode == "on-loop")
    import random

    rng = random.Random(20261130)
    p = tmp_path / "stress.jsonl"
    where: list[str] = []

    class WhereOps(FileOps):
        def sync(self, fd):
            super().sync(fd)
            where.append(threading.current_thread().name)

    log = await JournalLog.open(p, _ops=WhereOps())
    acked: set[int] = set()
    queued: list[int] = []

    async def appender(i: int) -> None:
        for k in range(20):
            before = log._next_seq
            try:
                rec = await log.append("t", {"i": i, "k": k})
            finally:
                if log._next_seq > before:
                    queued.append(before)  # this call got a seq: its line was queued
            acked.add(rec.seq)
            if rng.random() < 0.3:
                await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        scopes = []
        for i in range(50):
            scope = anyio.CancelScope()
            scopes.append(scope)

            async def run(i=i, scope=scope):
                with scope:
                    await appender(i)

            tg.start_soon(run)
        for _ in range(200):
            await anyio.sleep(0)
            victim = rng.choice(scopes)
            victim.cancel()  # some appenders are cancelled while their record waits for its fsync
    storm_on_loop = where.count(threading.current_thread().name)
    # One lone append afterwards syncs on the loop's thread on the loop, through the writer thread otherwise.
    assert log._writer is not None
    await anyio.to_thread.run_sync(log._writer.drain)  # cancelled callers' records may still be in flight
    lone = await log.append("t", {"lone": True})
    queued.append(lone.seq)
    await log.close()
    on_disk = [r.seq for r in read_records(p)]
    # Every queued record is on disk (cancelled callers' too), in seq order, with no gap;
    # every acknowledged one is among them.
    assert on_disk == list(range(1, len(on_disk) + 1))
    assert sorted(queued) == on_disk
    assert acked <= set(on_disk)
    assert len(acked) < len(on_disk)  # the test did cancel callers mid-wait
    loop_syncs = where.count(threading.current_thread().name)
    if mode == "on-loop":  # every sync on the loop's thread (drain's hand-over aside), the lone append's too
        assert loop_syncs == storm_on_loop + 1 and loop_syncs >= len(where) - 1
    else:
        assert loop_syncs == 0


@pytest.mark.anyio
async def test_the_wake_up_survives_idle_spells_idle_exits_and_bursts(tmp_path, monkeypatch):
    # The thread blocks on a lock used as a binary semaphore, released only
    # while it is idle: appends that land while it writes, while it is about
    # to block, just after its idle timeout, and after it exited must all be
    # written, never released twice (a RuntimeError on the thread would leave
    # appenders waiting forever: the 30 s fail_after catches that).
    monkeypatch.setattr(_writer, "IDLE_EXIT", 0.003)
    p = tmp_path / "wake.jsonl"
    log = await JournalLog.open(p)
    n = 0
    with anyio.fail_after(30):
        for round_ in range(60):
            burst = 1 + round_ % 7

            async def one(i: int) -> None:
                await log.append("t", {"i": i})

            async with anyio.create_task_group() as tg:
                for _ in range(burst):
                    tg.start_soon(one, n)
                    n += 1
            await anyio.sleep((round_ % 4) * 0.002)  # sometimes the thread idles out in between
    w = log._writer
    await log.close()
    assert writer_threads(p) == []
    assert w is not None and w._wake.locked() and not w._idle  # no release left pending for a next thread
    assert sorted(r.data["i"] for r in read_records(p)) == list(range(n))
