"""Admission scheduler: registry-wide barriers, scoped (keyed) barriers, bounded pools.

Every call is admitted under one :class:`Admission` (built by
``ToolDefinition.admission(params)``): a *mode* and a set of *conflict keys*
(plain strings shared across tools: two tools keyed on the same repository
conflict on it).

``exclusive``
    A registry-wide barrier: unclassified tools, and writes that declare
    neither conflict keys nor ``parallel_safe``. Runs alone.
``shared``
    A reviewed read. Holds its keys shared (reads of one key run together).
    At most ``max_parallel`` at once.
``write``
    A write that declared conflict keys (held exclusively: writes sharing a
    key run one at a time) or, with no keys, a reviewed ``parallel_safe``
    write that needs no barrier. At most ``max_parallel_writes`` at once.

Two reservations conflict when either is a barrier, or when they share a key
and at least one of them is a write. A keyless read or parallel-safe write
therefore runs beside keyed writes: a keyed write promises its effect stays
inside its keys, and a read that depends on that state declares the key too.

Admission is in arrival order over one queue, without starvation: a waiter is
admitted only if its pool has room and it conflicts with nothing running and
with nothing queued ahead of it. So writes to one key run in arrival order, a
read waits for an earlier write to its key, a later read of that key waits
behind a queued write, and nothing queued after a barrier passes it.

Keys are per process. Across replicas, an optional :class:`KeyLocks` (e.g.
PostgreSQL advisory locks) is taken by the executor after local admission; a
registry-wide barrier stays local to its process.

One scheduler serves a registry and all its projections. It is not
thread-safe: it belongs to one event loop (anyio).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import anyio
import structlog

from .errors import AdmissionRefused, ExecutionCancelled

Mode = Literal["shared", "exclusive", "write"]

#: Default bound of the write lane (keyed and parallel-safe writes running at once).
#: Large on purpose: an external effect is mostly waiting (an HTTP call, a
#: database), and 100 concurrent clients must not be capped below what a
#: server without any scheduling serves; it still bounds a runaway fan-out.
DEFAULT_MAX_PARALLEL_WRITES = 256

_NO_KEYS: frozenset[str] = frozenset()

log = structlog.get_logger("openfunctions.scheduler")


class Admission:
    """How one call is admitted: a mode and its conflict keys (see the module doc)."""

    __slots__ = ("mode", "keys")

    def __init__(self, mode: Mode, keys: frozenset[str] = _NO_KEYS) -> None:
        self.mode = mode
        self.keys = keys

    def __repr__(self) -> str:
        return f"Admission({self.mode!r}, {sorted(self.keys)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Admission) and other.mode == self.mode and other.keys == self.keys

    def __hash__(self) -> int:
        return hash((self.mode, self.keys))


class KeyLocks(Protocol):
    """Cross-replica conflict keys: the executor takes them after local admission.

    ``acquire(keys, shared=...)`` waits until every key is held (``shared``
    for a read, exclusive for a write) and returns a release callable: sync,
    idempotent, never raising (it may schedule async work). It is called once
    the call's reservation is released. A cancellation or an error while
    acquiring settles the call ``cancelled``/``rejected`` with ``known``
    certainty (nothing ran) and frees its local slot.
    """

    async def acquire(self, keys: frozenset[str], *, shared: bool) -> Callable[[], None]: ...


class Reservation:
    __slots__ = ("mode", "keys", "released", "key_release", "_scheduler")

    def __init__(self, scheduler: Scheduler, mode: Mode, keys: frozenset[str] = _NO_KEYS) -> None:
        self.mode = mode
        self.keys = keys
        self.released = False
        #: Set by the executor when :class:`KeyLocks` granted this reservation's keys across replicas.
        self.key_release: Callable[[], None] | None = None
        self._scheduler = scheduler

    def release(self) -> None:
        self._scheduler.release(self)

    def admits_child(self, mode: Mode | Admission, keys: frozenset[str] = _NO_KEYS) -> None:
        """Raise ``AdmissionRefused`` unless a child call fits inside this reservation.

        A barrier's child may run anything. A read's child may run only reads.
        A write's child may run writes and reads. Any child's keys must be
        within this reservation's keys (the parent holds nothing else), and a
        child that needs a registry-wide barrier needs a barrier parent. So a
        parallel-safe write (no keys) may delegate only keyless reads and
        parallel-safe writes.
        """
        if isinstance(mode, Admission):
            keys = mode.keys
            mode = mode.mode
        if self.released:
            raise AdmissionRefused("the parent call's reservation was already released")
        if self.mode == "exclusive":
            return
        if self.mode == "shared" and mode != "shared":
            raise AdmissionRefused(
                "a read (shared) reservation cannot become a write reservation: "
                "the delegated tool is not a reviewed read"
            )
        if mode == "exclusive":
            raise AdmissionRefused(
                "the delegated tool needs a registry-wide barrier (it is unclassified, or a write with "
                "neither conflict keys nor parallel_safe); only a barrier's child may run it"
            )
        if keys and not keys <= self.keys:
            extra = sorted(keys - self.keys)
            raise AdmissionRefused(
                f"the delegated call's conflict keys {extra} are outside the parent call's keys "
                f"{sorted(self.keys)}",
                details={"keys": extra, "parent_keys": sorted(self.keys)},
            )


class _Waiter:
    __slots__ = ("mode", "keys", "event", "reservation", "refused")

    def __init__(self, mode: Mode, keys: frozenset[str]) -> None:
        self.mode = mode
        self.keys = keys
        self.event = anyio.Event()
        self.reservation: Reservation | None = None
        self.refused: str | None = None


class Scheduler:
    def __init__(self, max_parallel: int = 8, max_parallel_writes: int = DEFAULT_MAX_PARALLEL_WRITES) -> None:
        if max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        if max_parallel_writes < 1:
            raise ValueError("max_parallel_writes must be at least 1")
        self.max_parallel = max_parallel
        self.max_parallel_writes = max_parallel_writes
        self.running_shared = 0
        self.running_writes = 0
        self.running_exclusive = False
        # key -> -1 while a write holds it, else the number of reads holding it
        self._held: dict[str, int] = {}
        # An insertion-ordered set: O(1) removal of a cancelled or admitted waiter anywhere.
        self._queue: dict[_Waiter, None] = {}
        self._queued_shared = 0
        self._queued_writes = 0
        self._closed: str | None = None

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _blocked(self, mode: Mode, keys: frozenset[str]) -> bool:
        """Whether what is *running* (or a full pool) keeps a call of ``mode``/``keys`` out."""
        if self.running_exclusive:
            return True
        if mode == "shared":
            if self.running_shared >= self.max_parallel:
                return True
            if keys:
                held = self._held
                for k in keys:
                    if held.get(k, 0) < 0:
                        return True
            return False
        if mode == "write":
            if self.running_writes >= self.max_parallel_writes:
                return True
            if keys:
                held = self._held
                for k in keys:
                    if k in held:
                        return True
            return False
        return self.running_shared > 0 or self.running_writes > 0

    def _grant(self, mode: Mode, keys: frozenset[str]) -> Reservation:
        if mode == "shared":
            self.running_shared += 1
            if keys:
                held = self._held
                for k in keys:
                    held[k] = held.get(k, 0) + 1
        elif mode == "write":
            self.running_writes += 1
            if keys:
                held = self._held
                for k in keys:
                    held[k] = -1
        else:
            self.running_exclusive = True
        return Reservation(self, mode, keys)

    async def acquire(self, mode: Mode, keys: frozenset[str] = _NO_KEYS) -> Reservation:
        if self._closed is not None:
            raise ExecutionCancelled(f"scheduler is closed: {self._closed}")
        if not self._queue and not self._blocked(mode, keys):
            return self._grant(mode, keys)
        return await self._wait(mode, keys)

    async def _wait(self, mode: Mode, keys: frozenset[str]) -> Reservation:
        if mode not in ("shared", "write", "exclusive"):
            raise ValueError(f"unknown admission mode {mode!r}")
        w = _Waiter(mode, keys)
        self._enqueue(w)
        # Not kept out by what runs: only the queue ahead may hold it back.
        if mode != "exclusive" and not self._blocked(mode, keys):
            self._pump()
            if w.reservation is not None:
                return w.reservation
        try:
            await w.event.wait()
        except BaseException:
            # Cancelled while queued: leave the queue, or give back a grant
            # that raced with the cancellation, and let the next one in.
            if w.reservation is not None:
                self.release(w.reservation)
            else:
                if self._dequeue(w):
                    self._pump()
            raise
        if w.refused is not None:
            raise ExecutionCancelled(w.refused)
        assert w.reservation is not None
        return w.reservation

    def _enqueue(self, w: _Waiter) -> None:
        self._queue[w] = None
        if w.mode == "shared":
            self._queued_shared += 1
        elif w.mode == "write":
            self._queued_writes += 1

    def _dequeue(self, w: _Waiter) -> bool:
        if w not in self._queue:  # already admitted, or refused by close()
            return False
        del self._queue[w]
        if w.mode == "shared":
            self._queued_shared -= 1
        elif w.mode == "write":
            self._queued_writes -= 1
        return True

    def release(self, r: Reservation) -> None:
        if r.released:
            return
        r.released = True
        if r.key_release is not None:
            try:
                r.key_release()
            except Exception as exc:  # a release must never keep the local slot
                log.error("key_locks_release_failed", keys=sorted(r.keys), error=repr(exc))
        keys = r.keys
        if r.mode == "shared":
            self.running_shared -= 1
            if keys:
                held = self._held
                for k in keys:
                    n = held[k] - 1
                    if n:
                        held[k] = n
                    else:
                        del held[k]
        elif r.mode == "write":
            self.running_writes -= 1
            if keys:
                for k in keys:
                    del self._held[k]
        else:
            self.running_exclusive = False
        if self._queue:
            self._pump()

    def _pump(self) -> None:
        """Admit, in arrival order, every waiter that nothing running or queued ahead of it conflicts with."""
        if self.running_exclusive:
            return
        admitted: list[_Waiter] = []
        ahead_writes: set[str] = set()  # keys that writes still queued ahead want
        ahead_reads: set[str] = set()  # keys that reads still queued ahead want
        seen_shared = seen_writes = 0
        first = True  # no waiter still queued ahead
        for w in self._queue:
            mode, keys = w.mode, w.keys
            if mode == "exclusive":
                if first and not self._blocked(mode, keys):
                    admitted.append(w)
                    w.reservation = self._grant(mode, keys)
                break  # nothing queued after a barrier passes it
            if mode == "shared":
                seen_shared += 1
                ok = not self._blocked(mode, keys) and (not keys or ahead_writes.isdisjoint(keys))
                if not ok and keys:
                    ahead_reads.update(keys)
            else:
                seen_writes += 1
                ok = not self._blocked(mode, keys) and (
                    not keys or (ahead_writes.isdisjoint(keys) and ahead_reads.isdisjoint(keys))
                )
                if not ok and keys:
                    ahead_writes.update(keys)
            if ok:
                admitted.append(w)
                w.reservation = self._grant(mode, keys)
            else:
                first = False
            # Stop once no later waiter could be admitted: each pool is full or has no one left queued.
            if (self.running_shared >= self.max_parallel or seen_shared == self._queued_shared) and (
                self.running_writes >= self.max_parallel_writes or seen_writes == self._queued_writes
            ):
                break
        for w in admitted:
            self._dequeue(w)
            w.event.set()

    def close(self, reason: str = "shutting down") -> None:
        """Stop admitting: queued calls are refused (cancelled, never started); running ones go on."""
        self._closed = reason
        queue = list(self._queue)
        self._queue.clear()
        self._queued_shared = self._queued_writes = 0
        for w in queue:
            w.refused = f"call was queued when the scheduler closed: {reason}"
            w.event.set()


__all__ = ["Admission", "DEFAULT_MAX_PARALLEL_WRITES", "KeyLocks", "Mode", "Reservation", "Scheduler"]
