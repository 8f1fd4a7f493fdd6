"""The journaled call path: what must be durable before a handler runs, and what need not.

docs/formats/receipt.md: a tool whose capability declares ``effect: "read"``
has no effect to have intended, so no start record precedes its handler; an
effectful tool's start record is durable before its handler is entered.
Either way the receipt is durable before the result is delivered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal, read_records


def _records(path: Path) -> list[tuple[str, str]]:
    return [(r.type, r.data["receipt_id"]) for r in read_records(path)]


@pytest.mark.anyio
async def test_a_read_only_call_leaves_no_start_record_and_a_durable_receipt(tmp_path: Path) -> None:
    path = tmp_path / "x.journal"
    seen_in_handler: list[list[tuple[str, str]]] = []

    async def look(params, ctx):
        seen_in_handler.append(_records(path))
        return {"ok": True}

    tool = define_tool(name="look", description="reads", handler=look, capability={"effect": "read"})
    async with await ExecutionJournal.open(path) as journal:
        registry = ToolRegistry([tool], sink=journal)
        out = await registry.execute_detailed("look", {})
        rid = out.receipt.receipt_id
        assert out.receipt.outcome == "succeeded"
        # Delivered: the receipt is already in the file (the append returned after fdatasync).
        assert _records(path) == [("receipt", rid)]
    assert seen_in_handler == [[]]  # nothing of this call was in the journal while its handler ran


@pytest.mark.anyio
@pytest.mark.parametrize("capability", [{"effect": "write"}, {"effect": "external"}, None])
async def test_an_effectful_calls_start_is_durable_before_its_handler_runs(tmp_path: Path, capability) -> None:
    path = tmp_path / "x.journal"
    seen_in_handler: list[list[tuple[str, str]]] = []

    async def change(params, ctx):
        # The handler checks the journal file itself for its own start record.
        seen_in_handler.append(_records(path))
        assert ("start", ctx.receipt_id) in seen_in_handler[-1]
        return {"changed": True}

    tool = define_tool(name="change", description="writes", handler=change, capability=capability)
    async with await ExecutionJournal.open(path) as journal:
        registry = ToolRegistry([tool], sink=journal)
        out = await registry.execute_detailed("change", {})
        rid = out.receipt.receipt_id
        assert out.receipt.outcome == "succeeded", out.receipt
    assert seen_in_handler == [[("start", rid)]]
    assert _records(path) == [("start", rid), ("receipt", rid)]


@pytest.mark.anyio
async def test_observers_still_see_the_start_of_a_read_only_call(tmp_path: Path) -> None:
    from openfunctions.core import MemoryJournalSink

    async def look(params, ctx):
        return "ok"

    tool = define_tool(name="look", description="reads", handler=look, capability={"effect": "read"})
    observer = MemoryJournalSink()
    async with await ExecutionJournal.open(tmp_path / "x.journal") as journal:
        registry = ToolRegistry([tool], sink=journal)
        registry.executor.add_sink(observer)
        out = await registry.execute_detailed("look", {})
    assert [s.receipt_id for s in observer.starts] == [out.receipt.receipt_id]
    assert observer.starts[0].read_only is True
    assert "read_only" not in observer.starts[0].to_dict()  # not part of the persisted format


@pytest.mark.anyio
async def test_a_read_only_call_in_flight_at_a_crash_leaves_nothing_to_recover(tmp_path: Path) -> None:
    import anyio

    path = tmp_path / "x.journal"
    entered = anyio.Event()

    async def hang(params, ctx):
        entered.set()
        await anyio.sleep_forever()

    tool = define_tool(name="hang", description="reads forever", handler=hang, capability={"effect": "read"})
    journal = await ExecutionJournal.open(path)
    registry = ToolRegistry([tool], sink=journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(registry.execute_detailed, "hang", {})
        await entered.wait()
        journal.log._close_now()  # what a crash looks like to the file
        tg.cancel_scope.cancel()
    again = await ExecutionJournal.open(path)
    assert again.recovered == []
    await again.close()
