"""Cancellation while queued, while running, and after settling."""

import anyio
import pytest

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool

from ._helpers import Gate, until


@pytest.mark.anyio
async def test_cancel_while_queued_never_starts_and_frees_the_queue():
    g = Gate()
    sink = MemoryJournalSink()
    reg = ToolRegistry([g.tool("u")], sink=sink)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute, "u", {"key": "a"})
        await until(lambda: "a" in g.running)
        scope_holder = {}

        async def queued():
            with anyio.CancelScope() as scope:
                scope_holder["s"] = scope
                await reg.execute("u", {"key": "b"})

        tg.start_soon(queued)
        await until(lambda: reg.executor.scheduler.queued == 1)
        scope_holder["s"].cancel()
        await until(lambda: reg.executor.scheduler.queued == 0)
        g.open("a")
    assert g.started == ["a"]
    cancelled = [r for r in sink.receipts if r.outcome == "cancelled"]
    assert len(cancelled) == 1
    assert (cancelled[0].certainty, cancelled[0].handler_started) == ("known", False)
    succeeded = [r for r in sink.receipts if r.outcome == "succeeded"]
    assert [s.receipt_id for s in sink.starts] == [succeeded[0].receipt_id]  # no fictitious start
    # the queue is not stuck
    g.open("c")
    assert await reg.execute("u", {"key": "c"}) == {"key": "c"}


@pytest.mark.anyio
async def test_cancel_while_running_reaches_the_handler():
    entered = anyio.Event()
    observed = {}
    sink = MemoryJournalSink()

    async def slow(params, ctx):
        entered.set()
        try:
            await anyio.Event().wait()
        except anyio.get_cancelled_exc_class():
            observed["cancelled"] = True
            raise

    reg = ToolRegistry([define_tool(name="slow", description="", handler=slow)], sink=sink)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute, "slow", {})
        await entered.wait()
        tg.cancel_scope.cancel()
    assert observed == {"cancelled": True}
    (r,) = sink.receipts
    assert (r.outcome, r.certainty, r.handler_started) == ("cancelled", "unknown", True)
    assert reg.executor.scheduler.running_exclusive is False


@pytest.mark.anyio
async def test_result_settled_before_late_cancellation_is_kept_and_recorded():
    class CancelDuringSettle(MemoryJournalSink):
        scope = None

        async def on_settled(self, receipt):
            self.scope.cancel()  # the caller gives up while the receipt is being persisted
            await anyio.sleep(0)  # a checkpoint: the shield must hold
            await super().on_settled(receipt)

    sink = CancelDuringSettle()

    async def quick(params, ctx):
        return {"done": True}

    reg = ToolRegistry([define_tool(name="q", description="", handler=quick)], sink=sink)
    got = {}
    with anyio.CancelScope() as scope:
        sink.scope = scope
        got["d"] = await reg.execute_detailed("q", {})
        await anyio.sleep(0)
        got["after"] = True  # not reached: the late cancellation applies afterwards
    assert got["d"].receipt.outcome == "succeeded" and got["d"].value == {"done": True}
    assert "after" not in got
    assert [r.outcome for r in sink.receipts] == ["succeeded"]


@pytest.mark.anyio
async def test_closed_scheduler_refuses_queued_and_new_calls():
    g = Gate()
    sink = MemoryJournalSink()
    reg = ToolRegistry([g.tool("u")], sink=sink)
    results = []

    async def call(k):
        results.append(await reg.execute_detailed("u", {"key": k}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a")
        await until(lambda: "a" in g.running)
        tg.start_soon(call, "b")
        await until(lambda: reg.executor.scheduler.queued == 1)
        reg.executor.scheduler.close("server shutting down")
        await until(lambda: len(results) == 1)
        g.open("a")
    by_outcome = {d.receipt.outcome: d for d in results}
    assert by_outcome["cancelled"].receipt.handler_started is False
    assert "server shutting down" in by_outcome["cancelled"].error.message
    assert by_outcome["succeeded"].value == {"key": "a"}
    late = await reg.execute_detailed("u", {"key": "c"})
    assert late.receipt.outcome == "cancelled" and late.receipt.certainty == "known"


@pytest.mark.anyio
async def test_without_a_sink_a_cancelled_call_still_settles_and_frees_its_slot():
    # No sink: _settle enters no cancel scope (nothing there awaits); the call still
    # settles with its receipt, tells on_settled, and releases its reservation.
    entered = anyio.Event()
    settled = []

    async def slow(params, ctx):
        entered.set()
        await anyio.Event().wait()

    reg = ToolRegistry([define_tool(name="slow", description="", handler=slow)])
    tool = reg.get("slow")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: reg.executor.execute_detailed(tool, {}, on_settled=settled.append))
        await entered.wait()
        tg.cancel_scope.cancel()
    (d,) = settled
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("cancelled", "unknown", True)
    assert reg.executor.scheduler.running_exclusive is False
