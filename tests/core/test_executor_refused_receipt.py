"""A call refused before its handler keeps ``known`` certainty even when its receipt cannot be persisted.

A failed journal (a full disk) refuses the start record and then the receipt
too. The handler never ran, so nothing can have happened: the delivered
receipt says ``rejected``/``known`` with the persistence error, as
docs/formats/receipt.md states ("if that append fails the handler never
runs (rejected, known)"). A call whose handler ran still becomes
``unknown``/``unknown`` (test_executor.py).
"""

from __future__ import annotations

import pytest

from openfunctions.core import ToolRegistry, define_tool

pytestmark = pytest.mark.anyio


class _DiskFull:
    async def on_start(self, record):
        raise OSError(28, "No space left on device")

    async def on_settled(self, receipt):
        raise OSError(28, "No space left on device")


async def test_refused_before_the_handler_and_unpersisted_is_still_known() -> None:
    entered: list[int] = []

    async def h(params, ctx):
        entered.append(1)
        return {}

    tool = define_tool(name="t", description="d", input_schema={"type": "object"}, handler=h,
                       capability={"effect": "write"})
    d = await ToolRegistry([tool], sink=_DiskFull()).execute_detailed("t", {})
    assert entered == []
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("rejected", "known", False)
    assert d.receipt.error is not None and "settled record" in d.receipt.error.message
    assert d.result.is_error
