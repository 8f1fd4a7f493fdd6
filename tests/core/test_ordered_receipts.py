"""A sink with ordered receipts (the file journal) lets the next write in once a receipt is queued (core/_sink.py)."""

from __future__ import annotations

import threading

import anyio
import pytest

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal, JournalLog
from openfunctions.core.journal._fsutil import FileOps

from ._helpers import until


class GatedOps(FileOps):
    """The ``hold_at``-th fsync waits for ``gate`` (one record per fsync while calls are serial)."""

    def __init__(self, hold_at: int) -> None:
        self.hold_at = hold_at
        self.gate = threading.Event()
        self.syncs = 0

    def sync(self, fd: int) -> None:
        self.syncs += 1
        if self.syncs == self.hold_at:
            self.gate.wait(30)
        super().sync(fd)


def _registry(journal, order: list[str], observer=None) -> ToolRegistry:
    async def write_it(params, ctx):
        order.append(f"handler {params['n']}")
        return {"n": params["n"]}

    t = define_tool(name="write_it", description="d", input_schema={"type": "object"}, handler=write_it,
                    capability={"effect": "write"})
    reg = ToolRegistry([t], sink=journal)
    if observer is not None:
        reg.executor.add_sink(observer)
    return reg


async def _two_writes(tmp_path, observer=None):
    ops = GatedOps(hold_at=4)  # start 0, receipt 0, start 1, then receipt 1 is held in its fsync
    journal = ExecutionJournal(await JournalLog.open(tmp_path / "e.journal", kind="execution", _ops=ops))
    order: list[str] = []
    reg = _registry(journal, order, observer)
    done: list[int] = []
    await reg.execute_detailed("write_it", {"n": 0})

    async def call(n: int) -> None:
        d = await reg.execute_detailed("write_it", {"n": n})
        assert d.receipt.outcome == "succeeded"
        done.append(n)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, 1)
            await until(lambda: order == ["handler 0", "handler 1"])
            tg.start_soon(call, 2)
            await anyio.sleep(0.2)  # call 2 gets as far as it can while receipt 1 is held
            assert ops.syncs == 4  # receipt 1 is in its fsync
            queued_behind = journal.log._next_seq
            state = (list(order), list(done))
            ops.gate.set()
    await journal.close()
    return state, queued_behind, done


@pytest.mark.anyio
async def test_the_next_write_is_admitted_once_the_receipt_is_queued_and_runs_after_its_start(tmp_path):
    (order, done), next_seq, finished = await _two_writes(tmp_path)
    # While call 1's receipt was not durable: call 2 was admitted and its start
    # queued behind that receipt (seq 5 = start 2 after 1: start 0, receipt 0,
    # start 1, receipt 1), but its handler had not run and nobody was answered.
    assert next_seq == 6 and order == ["handler 0", "handler 1"] and done == []
    assert sorted(finished) == [1, 2]


@pytest.mark.anyio
async def test_with_an_observer_after_the_journal_the_reservation_waits_for_on_settled(tmp_path):
    # A fan-out never declares ordered receipts: observers (the work controller)
    # must see the outcome before the next write is admitted.
    (order, done), next_seq, finished = await _two_writes(tmp_path, MemoryJournalSink())
    assert next_seq == 5 and order == ["handler 0", "handler 1"] and done == []  # call 2 still waits for admission
    assert sorted(finished) == [1, 2]


@pytest.mark.anyio
async def test_a_reads_shared_slot_is_released_once_its_receipt_is_queued_and_its_reply_waits(tmp_path):
    # Held until durable, the shared slots capped a server at max_parallel calls per fsync round trip.
    ops = GatedOps(hold_at=2)  # receipt 0 (of a read: no start), then receipt 1 is held
    journal = ExecutionJournal(await JournalLog.open(tmp_path / "r.journal", kind="execution", _ops=ops))
    order: list[str] = []
    done: list[int] = []

    async def read_it(params, ctx):
        order.append(f"handler {params['n']}")
        return {"n": params["n"]}

    t = define_tool(name="read_it", description="d", input_schema={"type": "object"}, handler=read_it,
                    capability={"effect": "read", "parallel_safe": True})
    reg = ToolRegistry([t], sink=journal, max_parallel=1)
    await reg.execute_detailed("read_it", {"n": 0})

    async def call(n: int) -> None:
        await reg.execute_detailed("read_it", {"n": n})
        done.append(n)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, 1)
            await until(lambda: order == ["handler 0", "handler 1"])
            tg.start_soon(call, 2)
            # Call 2 gets the only slot while receipt 1 is in its fsync; neither is answered before it is durable.
            await until(lambda: order == ["handler 0", "handler 1", "handler 2"])
            await anyio.sleep(0.1)
            assert ops.syncs == 2 and done == []
            ops.gate.set()
    assert sorted(done) == [1, 2]
    await journal.close()
