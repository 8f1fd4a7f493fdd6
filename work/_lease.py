"""The lease: which controller process may act for the work data directory.

Custody is a lease (owner id, generation, expiry) in a small file, not a
kernel lock, because it must survive the process in a way a lock cannot:
a controller that stops answering (paused, hung, swapped out) loses custody
when the lease expires, and a second process may then take over. The old
holder's *generation* is then stale and it is fenced: every effect record
is written inside :meth:`LeaseStore.fenced`, which re-reads the lease under
a kernel lock and refuses a stale or expired generation.

Files (in ``<data-dir>/work/``; directory 0700, files 0600):

``lease.json`` — format version 1, one canonical JSON object, replaced
atomically (write temp file, fsync, rename, fsync directory):

- ``v``: ``1``.
- ``owner``: the holder's owner id (``own_`` + 32 lowercase hex chars, ``core.new_id``; new per
  controller process/instance).
- ``generation``: integer >= 1, +1 on every acquisition (a takeover or a
  restart); never reused, so the file is kept on release (``expires_at``
  set to 0) rather than deleted.
- ``acquired_at``, ``renewed_at``: RFC 3339 UTC.
- ``expires_at``: POSIX seconds (float) after which the lease is free; 0
  after a release. Expiry compares against the wall clock of the one
  machine all holders run on.
- ``ttl``: the seconds each renewal adds.
- ``pid``: the holder's process id (diagnostics only; never used for
  liveness).

``lease.lock`` — empty; an exclusive ``flock`` on it serializes every
read-modify-write of ``lease.json`` and every fenced journal append. The
kernel drops it when its process dies, so it never needs cleaning up.

``live.<generation>`` — empty; the holder of that generation keeps an
exclusive ``flock`` on it for as long as it holds the lease. If a live
(unexpired) lease's ``live.<generation>`` can be locked by someone else,
its holder's process is gone (the kernel dropped the lock): the lease is
taken over at once instead of waiting for expiry. A holder that is alive
but unresponsive (stopped, hung) keeps its flock and is taken over only
after expiry. Files of older generations are removed on acquisition.

A takeover can only happen under ``lease.lock``, and a fenced append checks
the generation under the same lock, so an append by a stale holder either
happened before the takeover (and the new holder's recovery sees it) or is
refused with :class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from openfunctions.core import canonical_json, new_id, utc_timestamp
from openfunctions.core.files import ensure_private_dir, flock, open_private, try_flock, write_atomic

from ._errors import LeaseHeld, LeaseLost, WorkError

LEASE_VERSION = 1
LEASE_FILE = "lease.json"
LOCK_FILE = "lease.lock"
LIVE_PREFIX = "live."


@dataclass(frozen=True)
class Lease:
    """What a holder knows about its own lease (a snapshot; ``expires_at`` moves on renewal)."""

    owner: str
    generation: int
    expires_at: float
    ttl: float

    def to_dict(self) -> dict[str, Any]:
        return {"owner": self.owner, "generation": self.generation, "expiresAt": self.expires_at, "ttl": self.ttl}


class LeaseStore:
    """The file-backed lease of one work data directory (``<data-dir>/work``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        ttl: float = 30.0,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0:
            raise ValueError("lease ttl must be positive")
        self.root = Path(root)
        self.ttl = float(ttl)
        self.owner = owner or new_id("own")
        self.clock = clock
        self._local = anyio.Lock()
        self._live_fd: int | None = None
        ensure_private_dir(self.root, unsafe=_unsafe)

    @property
    def path(self) -> Path:
        return self.root / LEASE_FILE

    # -- reading ------------------------------------------------------------

    def read(self) -> dict[str, Any] | None:
        """The current lease record, or None if none was ever written."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            raise WorkError(f"lease file {self.path} is not valid JSON ({exc}); refusing to guess custody") from exc
        if not isinstance(rec, dict) or rec.get("v") != LEASE_VERSION or not isinstance(rec.get("generation"), int):
            raise WorkError(f"lease file {self.path} has an unknown format (expected version {LEASE_VERSION})")
        return rec

    # -- the operations, each under lease.lock --------------------------------

    async def acquire(self) -> Lease:
        """Take the lease: free, released, expired or orphaned -> a new generation; live -> :class:`LeaseHeld`."""
        async with self._locked():
            rec = self.read()
            now = self.clock()
            if rec is not None and rec.get("expires_at", 0) > now and rec.get("owner") != self.owner:
                if self._holder_alive(rec["generation"]):
                    raise LeaseHeld(
                        f"the work data directory is leased by owner {rec['owner']} (pid {rec.get('pid')}, generation "
                        f"{rec['generation']}) for {rec['expires_at'] - now:.1f}s more; another controller is running",
                        details={"owner": rec["owner"], "generation": rec["generation"], "expires_at": rec["expires_at"], "pid": rec.get("pid")},
                    )
            generation = (rec["generation"] if rec else 0) + 1
            self._hold_live(generation)
            stamp = utc_timestamp()
            expires_at = now + self.ttl
            new = {
                "v": LEASE_VERSION,
                "owner": self.owner,
                "generation": generation,
                "acquired_at": stamp,
                "renewed_at": stamp,
                "expires_at": expires_at,
                "ttl": self.ttl,
                "pid": os.getpid(),
            }
            try:
                _atomic_write(self.path, new)
            except BaseException:
                self._drop_live(generation)
                raise
            self._sweep_live(generation)
            return Lease(self.owner, generation, expires_at, self.ttl)

    def _live_path(self, generation: int) -> Path:
        return self.root / f"{LIVE_PREFIX}{generation}"

    def _holder_alive(self, generation: int) -> bool:
        """Whether the process holding ``generation`` still lives (it keeps a flock on its live file)."""
        try:
            fd = open_private(self._live_path(generation), os.O_RDWR, unsafe=_unsafe)
        except FileNotFoundError:
            return False
        try:
            return not try_flock(fd)
        finally:
            os.close(fd)

    def _hold_live(self, generation: int) -> None:
        fd = open_private(self._live_path(generation), os.O_RDWR, create=True, unsafe=_unsafe)
        if not try_flock(fd):
            os.close(fd)
            raise WorkError(f"lease generation {generation} is already held by a live process; refusing to reuse it") from None
        if self._live_fd is not None:
            os.close(self._live_fd)
        self._live_fd = fd

    def _drop_live(self, generation: int | None = None) -> None:
        if self._live_fd is not None:
            os.close(self._live_fd)
            self._live_fd = None
        if generation is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._live_path(generation))

    def _sweep_live(self, current: int) -> None:
        for p in self.root.glob(LIVE_PREFIX + "*"):
            suffix = p.name[len(LIVE_PREFIX):]
            if suffix.isdigit() and int(suffix) < current and not self._holder_alive(int(suffix)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)

    async def renew(self, lease: Lease) -> Lease:
        """Extend a live lease; a stale or expired one raises :class:`LeaseLost` (never silently re-taken)."""
        async with self._locked():
            rec = self._check(lease)
            rec["expires_at"] = self.clock() + self.ttl
            rec["renewed_at"] = utc_timestamp()
            _atomic_write(self.path, rec)
            return Lease(lease.owner, lease.generation, rec["expires_at"], lease.ttl)

    async def release(self, lease: Lease) -> None:
        """Give the lease up (expires now; the generation is kept so it is never reused)."""
        async with self._locked():
            rec = self.read()
            if rec is None or rec.get("owner") != lease.owner or rec.get("generation") != lease.generation:
                self._drop_live()  # already someone else's: only our own flock to let go
                return
            rec["expires_at"] = 0
            rec["renewed_at"] = utc_timestamp()
            _atomic_write(self.path, rec)
            self._drop_live(lease.generation)

    def abandon(self) -> None:
        """Let go of our live flock without touching ``lease.json`` (after the lease was lost)."""
        self._drop_live()

    @contextlib.asynccontextmanager
    async def fenced(self, lease: Lease) -> AsyncIterator[dict[str, Any]]:
        """Hold lease.lock while the body records an effect; refuse a stale or expired generation."""
        async with self._locked():
            yield self._check(lease)

    async def check(self, lease: Lease) -> dict[str, Any]:
        async with self._locked():
            return self._check(lease)

    def _check(self, lease: Lease) -> dict[str, Any]:
        rec = self.read()
        if rec is None:
            raise LeaseLost(f"lease file {self.path} is missing: generation {lease.generation} has no custody")
        if rec.get("owner") != lease.owner or rec.get("generation") != lease.generation:
            raise LeaseLost(
                f"lease generation {lease.generation} is stale: owner {rec.get('owner')} holds generation "
                f"{rec.get('generation')} now (taken over); this controller may record no effect",
                details={"generation": lease.generation, "current_generation": rec.get("generation"), "current_owner": rec.get("owner")},
            )
        now = self.clock()
        if rec.get("expires_at", 0) <= now:
            raise LeaseLost(
                f"lease generation {lease.generation} expired {now - rec.get('expires_at', 0):.1f}s ago; "
                "this controller may record no effect",
                details={"generation": lease.generation, "expired_at": rec.get("expires_at")},
            )
        return rec

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        async with self._local:
            with contextlib.ExitStack() as held:
                fd = open_private(self.root / LOCK_FILE, os.O_RDWR, create=True, unsafe=_unsafe)
                held.callback(os.close, fd)  # closing the descriptor drops the flock
                if not try_flock(fd):
                    # Another process holds it for a moment (its own fenced
                    # append): wait in a worker thread, never on the loop.
                    await anyio.to_thread.run_sync(held.enter_context, flock(fd))
                yield


def _unsafe(path: str, why: str) -> WorkError:
    return WorkError(f"refusing the lease path {path!r}: {why}", details={"path": path})


def _atomic_write(path: Path, record: dict[str, Any]) -> None:
    # The journal package's helper: temp file (O_NOFOLLOW, full write loop)
    # -> fsync -> rename -> directory fsync.
    write_atomic(path, (canonical_json(record) + "\n").encode("utf-8"))


__all__ = ["Lease", "LeaseStore", "LEASE_VERSION"]
