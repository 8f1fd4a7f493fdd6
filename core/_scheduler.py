"""Admission scheduler: exclusive tools, a bounded shared pool, write barriers.

Two reservation modes. ``shared``: reviewed parallel-safe reads, at most
``max_parallel`` at once. ``exclusive``: everything else (unclassified
tools, writes, external effects) — runs alone. Admission is strictly FIFO
over one queue: only the head may be admitted, so a write waits for running
reads, later reads wait behind the write, and nobody starves.

One scheduler serves a registry and all its projections. It is not
thread-safe: it belongs to one event loop (anyio).
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import anyio

from .errors import AdmissionRefused, ExecutionCancelled

Mode = Literal["shared", "exclusive"]


class Reservation:
    __slots__ = ("mode", "released", "_scheduler")

    def __init__(self, scheduler: Scheduler, mode: Mode) -> None:
        self.mode = mode
        self.released = False
        self._scheduler = scheduler

    def release(self) -> None:
        self._scheduler.release(self)

    def admits_child(self, mode: Mode) -> None:
        """Raise unless a child call of ``mode`` fits inside this reservation."""
        if self.released:
            raise AdmissionRefused("the parent call's reservation was already released")
        if self.mode == "shared" and mode == "exclusive":
            raise AdmissionRefused(
                "a read (shared) reservation cannot become a write (exclusive) reservation: "
                "the delegated tool is not a reviewed parallel-safe read"
            )


class _Waiter:
    __slots__ = ("mode", "event", "reservation", "refused")

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.event = anyio.Event()
        self.reservation: Reservation | None = None
        self.refused: str | None = None


class Scheduler:
    def __init__(self, max_parallel: int = 8) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.max_parallel = max_parallel
        self.running_shared = 0
        self.running_exclusive = False
        self._queue: deque[_Waiter] = deque()
        self._closed: str | None = None

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _admissible(self, mode: Mode) -> bool:
        if self.running_exclusive:
            return False
        if mode == "shared":
            return self.running_shared < self.max_parallel
        return self.running_shared == 0

    def _grant(self, mode: Mode) -> Reservation:
        if mode == "shared":
            self.running_shared += 1
        else:
            self.running_exclusive = True
        return Reservation(self, mode)

    async def acquire(self, mode: Mode) -> Reservation:
        if self._closed is not None:
            raise ExecutionCancelled(f"scheduler is closed: {self._closed}")
        if not self._queue and self._admissible(mode):
            return self._grant(mode)
        w = _Waiter(mode)
        self._queue.append(w)
        try:
            await w.event.wait()
        except BaseException:
            # Cancelled while queued: leave the queue, or give back a grant
            # that raced with the cancellation, and let the next one in.
            if w.reservation is not None:
                self.release(w.reservation)
            else:
                try:
                    self._queue.remove(w)
                except ValueError:
                    pass
                self._pump()
            raise
        if w.refused is not None:
            raise ExecutionCancelled(w.refused)
        assert w.reservation is not None
        return w.reservation

    def release(self, r: Reservation) -> None:
        if r.released:
            return
        r.released = True
        if r.mode == "shared":
            self.running_shared -= 1
        else:
            self.running_exclusive = False
        self._pump()

    def _pump(self) -> None:
        while self._queue and self._admissible(self._queue[0].mode):
            w = self._queue.popleft()
            w.reservation = self._grant(w.mode)
            w.event.set()

    def close(self, reason: str = "shutting down") -> None:
        """Stop admitting: queued calls are refused (cancelled, never started); running ones go on."""
        self._closed = reason
        while self._queue:
            w = self._queue.popleft()
            w.refused = f"call was queued when the scheduler closed: {reason}"
            w.event.set()


__all__ = ["Scheduler", "Reservation", "Mode"]
