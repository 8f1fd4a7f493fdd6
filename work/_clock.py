"""One clock for the work package, injectable so no test waits on the wall clock.

:class:`Clock` is what the controller, its custody (lease expiry and
renewal) and its completion fence read time from. :class:`SystemClock` is the
real one; a test passes its own (e.g. one whose ``sleep`` waits on an event
and whose ``time`` it advances by hand).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import time as _time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """POSIX seconds (the lease file's clock)."""

    def now(self) -> _dt.datetime:
        """An aware UTC datetime (grant expiry)."""

    async def sleep(self, seconds: float) -> None:
        """Wait (the renewal lane's pace)."""


class SystemClock:
    def time(self) -> float:
        return _time.time()

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def iso(t: _dt.datetime) -> str:
    """RFC 3339 UTC with microseconds and a ``Z`` (the journals' time format)."""
    return t.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}Z"


SYSTEM_CLOCK = SystemClock()

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK", "iso"]
