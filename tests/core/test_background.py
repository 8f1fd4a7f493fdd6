"""core.run_every / stop_task: the loop the database backends' sweeps share."""

from __future__ import annotations

import asyncio

import pytest

from openfunctions.core import run_every, stop_task


@pytest.mark.anyio
async def test_a_failing_round_is_reported_and_the_loop_goes_on_until_stopped():
    calls: list[int] = []
    errors: list[str] = []

    async def once() -> None:
        calls.append(len(calls))
        if len(calls) == 2:
            raise RuntimeError("database away")

    task = run_every(0.001, once, name="t", on_error=lambda exc: errors.append(str(exc)))
    while len(calls) < 4:
        await asyncio.sleep(0.001)
    await stop_task(task)
    assert task.done() and task.cancelled()
    assert errors == ["database away"] and len(calls) >= 4
    stopped_at = len(calls)
    await asyncio.sleep(0.01)
    assert len(calls) == stopped_at  # nothing runs after stop_task returned
    await stop_task(None)  # a component that never started its loop closes the same way
