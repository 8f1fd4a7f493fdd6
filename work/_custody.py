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

from openfunctions.core.files import ensure_private_dir

from .clock import Clock
from .errors import LeaseLost, WorkError
from .lease import Lease, LeaseStore

log = structlog.get_logger("openfunctions.work.custody")

SEGMENT_DIR = "attempts"
JOURNAL_KIND = "attempt"


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
    ) -> None:
        self.root = root
        self.leases = LeaseStore(root, ttl=ttl, owner=owner, clock=clock.time)
        self.renew_every = renew_every
        self.clock = clock
        self.apply = apply
        self.on_lost = on_lost
        # transitions hold it too: a renewal never interleaves with one
        self.lifecycle = lifecycle
        self.lease: Lease | None = None
        self.lost: LeaseLost | None = None
        self.journal: Any = None
        self.closed = False
        self.renewals = 0
        self._renewer: asyncio.Task[None] | None = None

    # -- opening and closing ---------------------------------------------------

    def segments(self) -> list[Path]:
        d = self.root / SEGMENT_DIR
        if not d.exists():
            ensure_private_dir(d)  # the one private-directory policy (0700, durable in its parent)
            return []
        return sorted(p for p in d.iterdir() if p.name.startswith("g") and p.name.endswith(".jsonl"))

    async def acquire(self) -> Lease:
        """Take the lease (``LeaseHeld`` while another owner is live) and open this generation's segment."""
        from openfunctions.core.journal import JournalLog

        self.lease = await self.leases.acquire()
        try:
            seg = self.root / SEGMENT_DIR / f"g{self.lease.generation:010d}.jsonl"
            if seg.exists():
                raise WorkError(f"attempt journal segment {seg} already exists for a new lease generation; refusing to reuse it")
            self.journal = await JournalLog.open(seg, kind=JOURNAL_KIND)
        except BaseException:
            await self.release()
            raise
        return self.lease

    def start_renewal(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop(), name="work-lease-renewal")

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        if self.journal is not None:
            j, self.journal = self.journal, None
            with contextlib.suppress(Exception):
                await j.close()
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
        if self.journal is None:
            raise WorkError("the work controller is closed")
        assert self.lease is not None
        type_, data = rec
        # A record is either durable and applied, or neither: a cancellation
        # may not land between the append and the apply.
        with anyio.CancelScope(shield=True):
            try:
                async with self.leases.fenced(self.lease):
                    record = await self.journal.append(type_, {**data, "lease_generation": self.lease.generation})
            except LeaseLost as exc:
                self.lose(exc)
                raise
            self.apply(record)
        return record

    @property
    def pid(self) -> int:
        return os.getpid()


__all__ = ["Custody", "CustodyProtocol", "SEGMENT_DIR", "JOURNAL_KIND"]
