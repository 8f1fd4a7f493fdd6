"""Opt-in: a lone appender writes and syncs in place (core/journal/_log.py ``_durable``, _writer.py ``write_now``/``take_back``)."""

from __future__ import annotations

import threading

import anyio
import pytest

from openfunctions.core.journal import JournalLog, read_records
from openfunctions.core.journal._fsutil import FileOps

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _in_place(monkeypatch):
    monkeypatch.setattr(JournalLog, "inline_when_idle", True)


async def test_off_by_default_every_append_goes_through_the_writer_thread(tmp_path, monkeypatch):
    monkeypatch.undo()
    assert JournalLog.inline_when_idle is False
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)
    for i in range(3):
        await log.append("t", {"i": i})
    assert ops.syncs == [f"journal-writer:{p.name}"] * 3
    await log.close()


class WhereOps(FileOps):
    """Records the name of the thread each sync ran on."""

    def __init__(self) -> None:
        self.syncs: list[str] = []

    def sync(self, fd: int) -> None:
        super().sync(fd)
        self.syncs.append(threading.current_thread().name)


def _writer_threads(path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"journal-writer:{path.name}"]


async def test_a_lone_appender_syncs_on_its_own_thread_and_starts_no_writer_thread(tmp_path):
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)
    me = threading.current_thread().name
    for i in range(5):
        rec = await log.append("t", {"i": i})
        assert rec.seq == i + 1 and log.last_seq == i + 1  # durable when it returns
    recs = await log.append_many([("t", {"i": 5}), ("t", {"i": 6})])
    assert [r.seq for r in recs] == [6, 7] and log.last_seq == 7
    assert ops.syncs == [me] * 6  # five appends, one group: six syncs, all on this thread
    assert _writer_threads(p) == []
    assert log.size == p.stat().st_size
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == list(range(7))


async def test_concurrent_appenders_go_through_the_writer_thread(tmp_path):
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)

    async def one(i: int) -> None:
        await log.append("t", {"i": i})

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    # Each append saw other tasks ready to run or another append waiting for the
    # thread, so none wrote in place: every sync ran on the writer thread.
    assert ops.syncs and set(ops.syncs) == {f"journal-writer:{p.name}"}
    assert log.last_seq == 20
    await log.close()
    assert sorted(r.data["i"] for r in read_records(p)) == list(range(20))


async def test_while_the_thread_holds_a_batch_a_lone_append_queues_behind_it(tmp_path):
    release = threading.Event()
    entered = threading.Event()

    class GatedOps(WhereOps):
        def sync(self, fd: int) -> None:
            if not self.syncs:
                entered.set()
                release.wait(30)
            super().sync(fd)

    p = tmp_path / "j.jsonl"
    ops = GatedOps()
    log = await JournalLog.open(p, _ops=ops)
    log.inline_when_idle = False  # the first append must go to the thread and be held there
    done: list[int] = []

    async def first() -> None:
        done.append((await log.append("t", {"i": 0})).seq)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.to_thread.run_sync(entered.wait, 30)
        log.inline_when_idle = True
        threading.Timer(0.05, release.set).start()
        rec = await log.append("t", {"i": 1})  # another append is waiting for the thread: queue behind it
        done.append(rec.seq)
    assert sorted(done) == [1, 2]
    assert set(ops.syncs) == {f"journal-writer:{p.name}"}
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [0, 1]


async def test_appending_in_place_in_a_loop_still_lets_the_loop_run_its_timers(tmp_path):
    # An append that wrote in place still yields once, so a caller appending in
    # a loop does not starve the loop (timers, I/O) for the whole loop.
    import asyncio

    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)
    fired: list[int] = []
    asyncio.get_running_loop().call_later(0, lambda: fired.append(len(ops.syncs)))
    for i in range(20):
        await log.append("t", {"i": i})
    assert fired and fired[0] < 20  # the timer ran between two appends, not after all of them
    assert ops.syncs == [threading.current_thread().name] * 20  # and every append still wrote in place
    await log.close()


async def test_a_task_that_is_ready_but_does_not_append_does_not_send_appends_to_the_thread(tmp_path):
    # A stdio transport's reader task is often ready for a mere checkpoint when
    # a receipt is appended: the append holds its line, lets it run, and,
    # since nobody joined, still writes in place.
    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)
    stop = anyio.Event()
    ticks = 0

    async def busy() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await anyio.sleep(0)  # always ready again

    async with anyio.create_task_group() as tg:
        tg.start_soon(busy)
        await anyio.sleep(0)
        before = ticks
        for i in range(10):
            await log.append("t", {"i": i})
        await log.append_many([("t", {"i": 10}), ("t", {"i": 11})])
        assert ticks - before >= 11  # the busy task ran during the appends
        stop.set()
    assert ops.syncs == [threading.current_thread().name] * 11
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == list(range(12))


def _append_held(log: JournalLog, i: int):
    """Start an append while another task is ready to run (so it holds its line and
    yields); returns (the append's task, the other task). Call, then yield once."""
    import asyncio

    other = asyncio.ensure_future(asyncio.sleep(0))
    return asyncio.ensure_future(log.append("t", {"i": i})), other


async def test_an_append_cancelled_while_its_line_is_held_is_still_written(tmp_path):
    import asyncio

    p = tmp_path / "j.jsonl"
    ops = WhereOps()
    log = await JournalLog.open(p, _ops=ops)
    task, other = _append_held(log, 1)
    await asyncio.sleep(0)  # the append runs up to its held yield
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await other
    with anyio.fail_after(30):  # a safety net: the thread must take the released line
        while log.last_seq < 1:
            await anyio.sleep(0.01)
    assert ops.syncs == [f"journal-writer:{p.name}"]
    assert (await log.append("t", {"i": 2})).seq == 2
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [1, 2]


async def test_closing_while_a_line_is_held_writes_it(tmp_path):
    import asyncio

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    task, other = _append_held(log, 1)
    await asyncio.sleep(0)  # the append holds its line and yields
    await log.close()  # drains: releases the hold, the thread writes it
    assert (await task).seq == 1
    await other
    assert [r.data["i"] for r in read_records(p)] == [1]
    await log.close()
