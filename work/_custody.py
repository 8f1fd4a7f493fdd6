"""Custody: the lease, the fenced attempt journal, renewal — the controller's right to act.

Everything the controller writes goes through :meth:`Custody.append`: the
record is appended under the lease fence, fsynced, and then handed to the
``apply`` callback (``WorkState.apply``), shielded, so a record is either
durable and applied or neither. When custody is lost (a renewal or a fence
finds another generation) :attr:`lost` is set and ``on_lost`` is told; no
further append is accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog

from ._backend import JOURNAL_KIND, SEGMENT_DIR, WorkBackend, file_backend
from ._clock import Clock
from ._errors import LeaseLost, WorkError
from ._lease import Lease

log = structlog.get_logger("openfunctions.work.custody")



class CustodyProtocol(Protocol):
    """What the lifecycle commands need from custody."""

    lease: Lease | None
    lost: LeaseLost | None

    async def append(self, rec: tuple[str, dict[str, Any]]) -> Any: ...

    async def check(self) -> None: ...

    def require(self) -> None: ...


class Custody:
    def __init__(
        self, root: Path, *, ttl: float, renew_every: float, owner: str | None, clock: Clock,
        apply: Callable[[Any], None], on_lost: Callable[[LeaseLost], None], lifecycle: anyio.Lock,
        backend: WorkBackend | None = None,
    ) -> None:
        self.root = root
        self.backend = backend if backend is not None else file_backend(root, ttl=ttl, owner=owner, clock=clock.time)
        self.leases = self.backend.leases
        self.log = self.backend.attempts
        self.renew_every = renew_every
        self.clock = clock
        self.apply = apply
        self.on_lost = on_lost
        # transitions hold it too: a renewal never interleaves with one
        self.lifecycle = lifecycle
        self.lease: Lease | None = None
        self.lost: LeaseLost | None = None
        # True while this process may append (a generation's log is open)
        self.holding = False
        self.closed = False
        self.renewals = 0
        # how many of the log's records are folded into the state (shared backends read the rest before acting)
        self.position = 0
        self._fold = anyio.Lock()
        self._renewer: asyncio.Task[None] | None = None

    # -- opening and closing ---------------------------------------------------

    async def read_all(self) -> list[Any]:
        """Every record of the attempt log, in order (recovery folds them)."""
        records = await self.log.read(0)
        self.position = len(records)
        return records

    async def catch_up(self) -> int:
        """Fold the records other processes appended since this one last read (shared backends); how many."""
        async with self._fold:
            new = await self.log.read(self.position)
            for rec in new:
                self.apply(rec)
            self.position += len(new)
            return len(new)

    async def acquire(self) -> Lease:
        """Take the lease (``LeaseHeld`` while another owner is live) and open this generation's log."""
        self.lost = None
        self.lease = await self.leases.acquire()
        try:
            await self.log.open(self.lease)
        except BaseException:
            await self.release()
            raise
        self.holding = True
        return self.lease

    def start_renewal(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop(), name="work-lease-renewal")

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        if self.holding:
            self.holding = False
            with contextlib.suppress(Exception):
                await self.log.close()
        if self.lease is not None and self.lost is None:
            with contextlib.suppress(Exception):
                await self.leases.release(self.lease)
        self.leases.abandon()  # our live flock, if a lost lease left it held

    # -- the lease lane ----------------------------------------------------------

    async def _renew_loop(self) -> None:
        while True:
            await self.clock.sleep(self.renew_every)
            try:
                async with self.lifecycle:
                    assert self.lease is not None
                    self.lease = await self.leases.renew(self.lease)
                    self.renewals += 1
            except LeaseLost as exc:
                self.lose(exc)
                return
            except Exception as exc:  # a disk error: keep trying until expiry says otherwise
                log.warning("lease_renewal_failed", error=str(exc))

    def lose(self, exc: LeaseLost) -> None:
        if self.lost is None:
            self.lost = exc
            log.error("lease_lost", error=exc.message)
        self.on_lost(exc)

    # -- checks and fenced appends -------------------------------------------------

    def require(self) -> None:
        if self.lost is not None:
            raise LeaseLost(f"this controller lost its lease: {self.lost.message}", details=self.lost.details)
        if self.closed:
            raise WorkError("the work controller is closed")

    async def check(self) -> None:
        """Re-read custody from the lease file (the authority's lease hook; raises LeaseLost)."""
        self.require()
        assert self.lease is not None
        try:
            await self.leases.check(self.lease)
        except LeaseLost as exc:
            self.lose(exc)
            raise

    async def append(self, rec: tuple[str, dict[str, Any]]) -> Any:
        if self.lost is not None:
            raise self.lost
        if not self.holding:
            raise WorkError("the work controller is closed" if self.closed else "this controller holds no lease now")
        assert self.lease is not None
        type_, data = rec
        # A record is either durable and applied, or neither: a cancellation
        # may not land between the append and the apply. The log checks the
        # generation in the same lock/transaction as the write (the fence).
        with anyio.CancelScope(shield=True):
            async with self._fold:
                try:
                    record = await self.log.append(self.lease, type_, {**data, "lease_generation": self.lease.generation})
                except LeaseLost as exc:
                    self.lose(exc)
                    raise
                self.apply(record)
                self.position += 1
        return record

    @property
    def pid(self) -> int:
        return os.getpid()


__all__ = ["Custody", "CustodyProtocol", "SEGMENT_DIR", "JOURNAL_KIND"]
