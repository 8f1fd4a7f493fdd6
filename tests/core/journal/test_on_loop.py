"""Opt-in: every append is written and synced by the event loop, once per iteration
(core/journal/_log.py ``sync_on_loop``, _writer.py ``enqueue(on_loop=True)``/``_flush_on_loop``)."""

from __future__ import annotations

import asyncio
import errno
import threading

import anyio
import pytest

from openfunctions.core.errors import JournalFailed
from openfunctions.core.journal import JournalLog, read_records
from openfunctions.core.journal._fsutil import FileOps
from tests._harness import writer_threads

pytestmark = pytest.mark.anyio


class WhereOps(FileOps):
    """Records each sync's thread and how many lines its write carried."""

    def __init__(self) -> None:
        self.syncs: list[str] = []
        self.lines: list[int] = []

    def write_all(self, fd: int, data: bytes) -> None:
        super().write_all(fd, data)
        self.lines.append(data.count(b"\n"))

    def sync(self, fd: int) -> None:
        super().sync(fd)
        self.syncs.append(threading.current_thread().name)


async def _open(path, ops=None) -> JournalLog:
    log = await JournalLog.open(path, _ops=ops or WhereOps())
    log.sync_on_loop = True
    return log


async def test_off_by_default():
    assert JournalLog.sync_on_loop is False


async def test_one_iteration_s_appends_share_one_write_and_sync_on_the_loop_thread(tmp_path):
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await _open(p, ops)
    durable_when_returned: list[bool] = []

    async def one(i: int) -> None:
        rec = await log.append("t", {"i": i})
        durable_when_returned.append(log.last_seq >= rec.seq and p.stat().st_size >= log.size)

    # Twenty tasks started together append in the same iteration: one flush takes them all.
    tasks = [asyncio.ensure_future(one(i)) for i in range(20)]
    await asyncio.gather(*tasks)
    assert ops.lines == [20] and ops.syncs == [threading.current_thread().name]
    assert durable_when_returned == [True] * 20
    assert writer_threads(p) == []
    # Appends in later iterations get flushes of their own.
    for i in range(3):
        await log.append("t", {"i": 20 + i})
    assert ops.lines == [20, 1, 1, 1]
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == list(range(23))


async def test_an_appender_is_answered_only_after_its_flush(tmp_path):
    log = await _open(tmp_path / "j.jsonl")
    task = asyncio.ensure_future(log.append("t", {"i": 1}))
    await asyncio.sleep(0)  # the append ran up to its wait: queued, flush scheduled for the next iteration
    assert not task.done() and log.last_seq == 0
    rec = await task
    assert rec.seq == 1 and log.last_seq == 1
    await log.close()


async def test_a_failed_flush_fails_every_appender_of_it_and_every_later_append(tmp_path):
    class FailingSync(WhereOps):
        armed = False

        def sync(self, fd: int) -> None:
            if self.armed:
                raise OSError(errno.EIO, "Input/output error")
            super().sync(fd)

    loop_errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: loop_errors.append(context))
    p = tmp_path / "j.jsonl"
    ops = FailingSync()
    log = await _open(p, ops)
    await log.append("t", {"i": 0})
    ops.armed = True
    results = await asyncio.gather(*(log.append("t", {"i": i}) for i in range(1, 6)), return_exceptions=True)
    assert all(isinstance(r, JournalFailed) and "Input/output error" in str(r) for r in results)
    assert log.failed
    ops.armed = False  # fail-stop: no retry on the failed fd even once the disk works again
    with pytest.raises(JournalFailed):
        await log.append("t", {"i": 6})
    assert loop_errors == []  # the flush's failure went to the appenders, not up into the loop
    await log.close()
    reopened = await JournalLog.open(p)
    assert reopened.last_seq >= 1 and (await reopened.append("t", {"i": 7})).seq == reopened.last_seq
    await reopened.close()


async def test_a_cancelled_appender_s_record_is_still_written(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await _open(p)
    task = asyncio.ensure_future(log.append("t", {"i": 1}))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await log.append("t", {"i": 2})).seq == 2
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [1, 2]


async def test_a_drain_before_the_flush_ran_hands_the_queued_lines_to_the_thread(tmp_path):
    # drain() (close() runs it on a worker thread) must not leave lines that wait for a loop flush
    # behind: here it runs on the loop's own thread, so the flush cannot run first.
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await _open(p, ops)
    tasks = [asyncio.ensure_future(log.append("t", {"i": i})) for i in range(3)]
    await asyncio.sleep(0)  # queued, flush scheduled, not run
    assert log.last_seq == 0 and log._writer is not None
    log._writer.drain()
    assert ops.syncs == [f"journal-writer:{p.name}"] and ops.lines == [3]
    results = await asyncio.gather(*tasks)
    assert [r.seq for r in results] == [1, 2, 3]
    assert ops.syncs == [f"journal-writer:{p.name}"]  # the flush found nothing left to write
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [0, 1, 2]


async def _staggered_appends(tmp_path) -> list[int]:
    """Task b appends one loop iteration after task a; the lines each write carried."""
    ops = WhereOps()
    log = await _open(tmp_path / "j.jsonl", ops)

    async def a() -> None:
        await log.append("t", {"i": 0})

    async def b() -> None:
        await asyncio.sleep(0)
        await log.append("t", {"i": 1})

    await asyncio.gather(a(), b())
    await log.close()
    return ops.lines


async def test_a_flush_steps_behind_ready_callbacks_so_later_appends_share_it(tmp_path):
    # Task b appends one iteration after task a: a's flush, seeing b ready, steps behind it and takes both.
    assert await _staggered_appends(tmp_path) == [2]


async def test_a_flush_steps_behind_an_always_ready_task_only_a_few_times(tmp_path):
    # A task that is always ready cannot hold a flush back for long: at most FLUSH_DEFERRALS iterations.
    from openfunctions.core.journal._writer import FLUSH_DEFERRALS

    ops = WhereOps()
    log = await _open(tmp_path / "j.jsonl", ops)
    ticks = 0
    stop = False

    async def busy() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    spinner = asyncio.ensure_future(busy())
    await asyncio.sleep(0)
    for i in range(5):
        before = ticks
        await log.append("t", {"i": i})
        assert 1 <= ticks - before <= FLUSH_DEFERRALS + 2
    stop = True
    await spinner
    assert ops.lines == [1] * 5
    await log.close()


async def test_a_flush_stops_stepping_behind_ready_callbacks_once_its_budget_passed(tmp_path, monkeypatch):
    # Task b would append one iteration after task a; with the budget spent (0 s), a's flush writes at once
    # instead of stepping behind b, so the two appends take two writes.
    from openfunctions.core.journal import _writer

    monkeypatch.setattr(_writer, "FLUSH_DEFER_BUDGET_S", 0.0)
    assert await _staggered_appends(tmp_path) == [1, 1]
    assert [r.data["i"] for r in read_records(tmp_path / "j.jsonl")] == [0, 1]


async def test_appends_from_a_thread_s_own_loop_are_flushed_on_that_loop(tmp_path):
    # One log, two event loops (the main one and a worker thread's), appending in turn:
    # each loop's flush writes its own appends and the file order is seq order.
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await _open(p, ops)
    await log.append("t", {"i": 0})

    def other_loop() -> int:
        return asyncio.run(log.append("t", {"i": 1})).seq

    seq = await anyio.to_thread.run_sync(other_loop)
    assert seq == 2
    await log.append("t", {"i": 2})
    await log.close()
    assert [(r.seq, r.data["i"]) for r in read_records(p)] == [(1, 0), (2, 1), (3, 2)]
    assert len(set(ops.syncs)) == 2  # the main loop's thread and the worker's


async def test_a_loop_closed_with_its_flush_still_scheduled_does_not_stall_another_loop(tmp_path):
    # The first loop appends and is closed before its flush runs (its appender never answered);
    # an append on a fresh loop must still be flushed, and it writes the orphaned line too.
    p = tmp_path / "j.jsonl"
    log = await _open(p)

    def first_loop() -> None:
        loop = asyncio.new_event_loop()
        task = loop.create_task(log.append("t", {"i": 0}))
        loop.call_soon(loop.stop)  # scheduled before the append runs: stop after its first step
        loop.run_forever()
        assert not task.done()
        loop.close()  # the flush, scheduled by the append, is dropped with the loop

    def second_loop() -> int:
        async def append() -> int:
            with anyio.fail_after(10):
                return (await log.append("t", {"i": 1})).seq
        return asyncio.run(append())

    await anyio.to_thread.run_sync(first_loop)
    assert await anyio.to_thread.run_sync(second_loop) == 2
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [0, 1]


def test_callbacks_ready_reads_asyncio_s_queue_and_answers_no_on_a_loop_without_one():
    # The one private asyncio read (``_ready``): true while a callback is due, false once it ran.
    from openfunctions.core.journal._writer import callbacks_ready

    loop = asyncio.new_event_loop()
    try:
        assert hasattr(loop, "_ready"), "asyncio's BaseEventLoop no longer has _ready: update core/journal/_writer.py"
        assert callbacks_ready(loop) is False
        loop.call_soon(lambda: None)
        assert callbacks_ready(loop) is True
        loop.run_until_complete(asyncio.sleep(0))
        assert callbacks_ready(loop) is False
    finally:
        loop.close()
    uvloop = pytest.importorskip("uvloop")
    other = uvloop.new_event_loop()
    try:
        assert not hasattr(other, "_ready")
        other.call_soon(lambda: None)
        assert callbacks_ready(other) is False  # cannot tell: the flush writes at once
    finally:
        other.close()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_on_a_loop_without_a_ready_queue_the_flush_writes_at_once(tmp_path, loop_kind):
    # Same two appenders as in the "steps behind" test: asyncio's loop batches them into one write;
    # uvloop (no ``_ready``) flushes the first alone, and both are still durable when answered.
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    p = tmp_path / "j.jsonl"
    ops = WhereOps()

    async def main() -> list[int]:
        log = await _open(p, ops)

        async def a() -> int:
            return (await log.append("t", {"i": 0})).seq

        async def b() -> int:
            await asyncio.sleep(0)
            return (await log.append("t", {"i": 1})).seq

        seqs = await asyncio.gather(a(), b())
        assert log.last_seq == 2
        await log.close()
        return seqs

    loop = new_loop()
    try:
        assert loop.run_until_complete(main()) == [1, 2]
    finally:
        loop.close()
    assert ops.lines == ([2] if loop_kind == "asyncio" else [1, 1])
    assert [r.data["i"] for r in read_records(p)] == [0, 1]
