"""The executor's per-call shortcuts keep every promise: inline sync handlers, and the settled hook.

- ``define_tool(..., blocking=False)`` runs a sync handler on the event loop
  (no worker thread); the default still uses a worker thread; neither changes
  the spec digest.
- ``execute_detailed(..., on_settled=)`` hands over the settled result, also
  for a call cancelled from outside (the hook sees the same receipt the
  journal got, before the cancellation propagates).
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from openfunctions.core import Receipt, ToolRegistry, define_tool, tool


def _where(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"thread": threading.get_ident()}


@pytest.mark.anyio
async def test_a_non_blocking_sync_handler_runs_on_the_event_loop_thread_and_a_default_one_does_not() -> None:
    inline = define_tool(name="inline", description="d", handler=_where, blocking=False)
    threaded = define_tool(name="threaded", description="d", handler=_where)
    reg = ToolRegistry([inline, threaded])
    here = threading.get_ident()
    assert (await reg.execute("inline", {}))["thread"] == here
    assert (await reg.execute("threaded", {}))["thread"] != here
    # Where a handler runs is not what the tool is: the spec digest is the same.
    assert inline.spec() == {**threaded.spec(), "name": "inline"}


@pytest.mark.anyio
async def test_the_decorator_takes_blocking_false_too() -> None:
    @tool(blocking=False)
    def where() -> int:
        """Which thread."""
        return threading.get_ident()

    @tool
    def where_threaded() -> int:
        """Which thread."""
        return threading.get_ident()

    reg = ToolRegistry([where, where_threaded])
    assert (await reg.execute("where", {}))["result"] == threading.get_ident()
    assert (await reg.execute("where_threaded", {}))["result"] != threading.get_ident()


class _Sink:
    def __init__(self) -> None:
        self.settled: list[Receipt] = []

    async def on_start(self, record: Any) -> None:
        pass

    async def on_settled(self, receipt: Receipt) -> None:
        self.settled.append(receipt)


@pytest.mark.anyio
async def test_on_settled_hands_over_the_receipt_of_a_call_cancelled_from_outside() -> None:
    started = anyio.Event()

    async def hang(params: dict[str, Any], ctx: Any) -> None:
        started.set()
        await anyio.sleep_forever()

    sink = _Sink()
    reg = ToolRegistry([define_tool(name="hang", description="d", handler=hang)], sink=sink)
    seen: list[Any] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: reg.executor.execute_detailed(reg.get("hang"), {}, on_settled=seen.append))
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert len(seen) == 1
    receipt = seen[0].receipt
    assert (receipt.outcome, receipt.certainty, receipt.handler_started) == ("cancelled", "unknown", True)
    assert sink.settled == [receipt]  # the same receipt the journal sink persisted


@pytest.mark.anyio
async def test_on_settled_is_called_once_with_what_execute_detailed_returns() -> None:
    reg = ToolRegistry([define_tool(name="w", description="d", handler=_where, blocking=False)])
    seen: list[Any] = []
    detailed = await reg.executor.execute_detailed(reg.get("w"), {}, on_settled=seen.append)
    assert seen == [detailed] and detailed.receipt.outcome == "succeeded"
    rejected = await reg.executor.execute_detailed(reg.get("w"), [1], on_settled=seen.append)
    assert seen == [detailed, rejected] and rejected.receipt.outcome == "rejected"
