"""Background loops a component owns: started once, cancelled and awaited at close.

The database backends (journal, tasks, run records) each sweep for the work of
replicas that died; they share this one loop so that a failed sweep (the
database away) is reported and retried the same way everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


def run_every(interval: float, fn: Callable[[], Awaitable[Any]], *, name: str,
              on_error: Callable[[Exception], None]) -> asyncio.Task[None]:
    """A task calling ``fn()`` every ``interval`` seconds until cancelled; a failure goes to ``on_error``
    and the loop goes on (the next round is the retry)."""
    async def loop() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await fn()
            except Exception as exc:  # noqa: BLE001 - reported, retried next round
                on_error(exc)

    return asyncio.get_running_loop().create_task(loop(), name=name)


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended; whatever it ends with is dropped (we are closing)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except BaseException:  # noqa: BLE001 - cancelled, or its own failure: closing anyway
        pass


__all__ = ["run_every", "stop_task"]
