"""Waiting for a fact another thread or process makes true: the one copy the tests share.

Poll with a short, growing interval (1 ms doubling up to 20 ms): a condition that holds at
once costs nothing, one that takes a second costs at most ~20 ms of extra wait, and a loop
that never sees it raises ``AssertionError`` naming ``what`` after ``timeout`` seconds (a
failing test, never a hang). Where the test owns the code that makes the fact true, wait on
an event instead (``threading.Event``, ``anyio.Event``); these are for facts outside it: a
file another process writes, a pid that dies, a thread that exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

FIRST_INTERVAL = 0.001
MAX_INTERVAL = 0.02


def _intervals():
    step = FIRST_INTERVAL
    while True:
        yield step
        step = min(step * 2, MAX_INTERVAL)


def _poll(predicate: Callable[[], T], timeout: float, what: str) -> Generator[float, None, T]:
    """The one poll of both waits: yields how long to sleep before the next try; returns ``predicate()``'s first
    truthy value; ``AssertionError`` once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    for step in _intervals():
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        yield step
    raise AssertionError("unreachable")  # pragma: no cover  (the generator never ends)


def wait_for(predicate: Callable[[], T], *, timeout: float = 30.0, what: str = "condition") -> T:
    """Return ``predicate()``'s first truthy value; ``AssertionError`` after ``timeout`` seconds."""
    poll = _poll(predicate, timeout, what)
    try:
        while True:
            time.sleep(next(poll))
    except StopIteration as done:
        return done.value


async def await_for(predicate: Callable[[], T], *, timeout: float = 30.0, what: str = "condition") -> T:
    """``wait_for`` for async tests: sleeps with ``anyio.sleep`` so the event loop keeps running."""
    import anyio

    poll = _poll(predicate, timeout, what)
    try:
        while True:
            await anyio.sleep(next(poll))
    except StopIteration as done:
        return done.value


def wait_for_file(path: Path, timeout: float = 30.0) -> None:
    """A cross-process event: fixture tools and children signal by creating files."""
    wait_for(path.exists, timeout=timeout, what=f"{path} to appear")


async def await_file(path: Path, timeout: float = 30.0) -> None:
    await await_for(path.exists, timeout=timeout, what=f"{path} to appear")


__all__ = ["await_file", "await_for", "wait_for", "wait_for_file"]
