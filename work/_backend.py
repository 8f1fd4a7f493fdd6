"""Where the work controller's durable state lives: three small interfaces, and the file backend.

The controller never touches a file or a database itself. Its custody
(:mod:`._custody`) and its authority (:mod:`._authority`) talk to a
:class:`WorkBackend`, a bundle of

- :class:`LeaseBackend` — the lease (owner, generation, expiry):
  ``acquire`` (a free, released or expired lease -> generation + 1; a live
  one of another owner -> :class:`~._errors.LeaseHeld`), ``renew``,
  ``release``, ``check`` and ``abandon``; a stale or expired generation gets
  :class:`~._errors.LeaseLost`;
- :class:`AttemptLog` — the attempt journal: ``open(lease)`` before the
  first append of a generation, ``read(after=n)`` the records after the
  first ``n`` in the one order every reader sees, ``append(lease, type,
  data)`` **fenced**: the record is durable only if ``lease`` is still the
  current, unexpired generation at the moment it is written (checked inside
  the same lock or transaction as the write), else ``LeaseLost`` and nothing
  is written;
- :class:`GrantBackend` — the operator's grants (issue, revoke, list, the
  checks' reads, and ``load_sync``, the completion fence's synchronous re-read);
- :class:`ResolutionBackend` — the operator's inbox of verdicts on uncertain
  operations (``work resolve`` appends; the controller copies each new one
  into the attempt journal as a ``resolution`` record, by its inbox ``seq``).

One durable state, one fold: whatever the backend, the records it returns
are folded by :meth:`openfunctions.work.WorkState.apply`, the same code the
controller applies each appended record with. Record formats:
:mod:`._records` (docs/formats/work-attempts.md).

Two backends exist:

- files (this module, :func:`file_backend`, the default): the lease file,
  one journal segment per generation under ``<data-dir>/work/attempts/``,
  the grants journal. One controller process holds the lease for its whole
  life (``shared = False``);
- PostgreSQL (``openfunctions.store.open_pg_work``; the store package
  implements these protocols, ``servers`` injects it — work never imports
  store): rows, one lease row per work space. Several server replicas use
  one work space, so ``shared = True``: a controller takes the lease for
  each lifecycle call and gives it back after, and reads the records other
  replicas appended before it acts (:meth:`AttemptLog.read` with ``after``).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from openfunctions.core.files import ensure_private_dir
from openfunctions.core.journal import read_records
from openfunctions.core.records import FileRecordLog

from ._errors import WorkError
from ._lease import Lease, LeaseStore
from ._state import ATTEMPTS, WorkState

SEGMENT_DIR = "attempts"
JOURNAL_KIND = ATTEMPTS.kind  # "attempt"


class LeaseBackend(Protocol):
    owner: str
    ttl: float

    async def acquire(self) -> Lease: ...

    async def renew(self, lease: Lease) -> Lease: ...

    async def release(self, lease: Lease) -> None: ...

    async def check(self, lease: Lease) -> dict[str, Any]: ...

    def abandon(self) -> None: ...


class AttemptLog(Protocol):
    """The attempt journal. Records have ``seq``, ``type``, ``time`` and ``data`` (``core.journal.Record``)."""

    where: str

    async def open(self, lease: Lease) -> None: ...

    async def read(self, after: int = 0) -> list[Any]: ...

    async def append(self, lease: Lease, type_: str, data: dict[str, Any]) -> Any: ...

    async def close(self) -> None: ...


class GrantBackend(Protocol):
    where: str

    async def list(self) -> list[Any]: ...

    async def get(self, grant_id: str) -> Any: ...

    # builtins.list: in this class body, "list" is the method above
    async def for_principal(self, principal: str) -> builtins.list[Any]: ...

    async def active_for(self, principal: str, now: _dt.datetime | None = None) -> builtins.list[Any]: ...

    def load_sync(self) -> dict[str, Any]: ...

    async def issue(self, *, principal: str, steps: Sequence[str], paths: Sequence[str] = (), ttl: _dt.timedelta | None = None,
                    expires_at: _dt.datetime | None = None, issuer: str | None = None, catalog_digest: str | None = None,
                    now: _dt.datetime | None = None) -> Any: ...

    async def revoke(self, grant_id: str, *, by: str | None = None, now: _dt.datetime | None = None) -> Any: ...


class ResolutionBackend(Protocol):
    where: str

    def unchanged(self) -> bool: ...  # True: nothing new since the last read (cheap; may always say False)

    def read(self) -> list[tuple[int, dict[str, Any]]]: ...  # every resolve record as (seq, data); blocking

    async def resolve(self, operation_id: str, *, as_: str, reason: str, by: str) -> dict[str, Any]: ...


@dataclass
class WorkBackend:
    """The three durable parts of one work space, and whether several processes share them."""

    leases: LeaseBackend
    attempts: AttemptLog
    grants: GrantBackend
    # True: several controllers (server replicas) use this work space; each takes the lease per call
    shared: bool = False
    close: Callable[[], Any] | None = None
    # connect and check (a database's schema); awaited before first use, idempotent
    open: Callable[[], Awaitable[None]] | None = None
    # the operator's inbox; None: the file inbox of the controller's work directory
    resolutions: ResolutionBackend | None = None
    # the work artifacts (previews, command output, reply projections) every process of this space reads;
    # an ``openfunctions.artifacts.ArtifactStoreProtocol``; None: ``<data-dir>/work/artifacts`` (per process)
    artifacts: Any = None
    # the execution journal's receipts by id, read at recovery to settle an operation whose call settled
    # before its outcome record (a shared backend: the database's journals); None: <data-dir>/journal files
    settled_receipts: Callable[[set[str]], Awaitable[dict[str, dict[str, Any]]]] | None = None

    async def aopen(self) -> None:
        if self.open is not None:
            await self.open()

    async def aclose(self) -> None:
        if self.close is not None:
            result = self.close()
            if hasattr(result, "__await__"):
                await result


class FileAttemptLog:
    """The attempt journal in files: one core journal per lease generation, on the record stream.

    ``<root>/attempts/g<generation:010d>.jsonl`` (format: :mod:`._records`) is the current generation's
    file, a :class:`~openfunctions.core.records.FileRecordLog` of :data:`~._state.ATTEMPTS` opened onto the
    fold of the earlier generations' files (read in generation order, once per open: :meth:`read` hands
    what open read to the controller's recovery fold), so :attr:`state` is the whole journal's durable
    state, folded live by the stream's one ``apply`` after every append. (The controller folds the records
    :meth:`append` returns into its own state too: that one also holds its in-memory blocks, which are
    never durable.) The fence: :meth:`append` writes
    inside ``LeaseStore.fenced`` (``lease.lock`` held, the generation re-read), so a stale holder's record
    is refused with ``LeaseLost`` and never lands. The journal never compacts: each generation's file is
    kept (the history an operator reads with ``work attempts``).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.where = str(self.root / SEGMENT_DIR)
        self.log: FileRecordLog[WorkState] | None = None
        self._fenced: Callable[[Lease], Any] | None = None
        self._just_read: list[Any] | None = None

    def bind(self, leases: LeaseStore) -> FileAttemptLog:
        self._fenced = leases.fenced
        return self

    @property
    def state(self) -> WorkState | None:
        """The journal's durable state while a generation's file is open (None when closed)."""
        return self.log.state if self.log is not None else None

    def segments(self) -> list[Path]:
        d = self.root / SEGMENT_DIR
        if not d.exists():
            ensure_private_dir(d)  # the one private-directory policy (0700, durable in its parent)
            return []
        return sorted(p for p in d.iterdir() if p.name.startswith("g") and p.name.endswith(".jsonl"))

    def fold_sync(self) -> WorkState:
        """The whole journal folded by :data:`ATTEMPTS`, lock-free (raises the stream's error for a record it refuses)."""
        return self._read_and_fold()[0]

    def _read_and_fold(self) -> tuple[WorkState, list[Any]]:
        state = ATTEMPTS.new_state()
        records: list[Any] = []
        for seg in self.segments():
            part = list(read_records(seg))
            ATTEMPTS.fold(part, state, where=seg)  # per segment: a refusal names the file
            records += part
        return state, records

    async def open(self, lease: Lease) -> None:
        seg = self.root / SEGMENT_DIR / f"g{lease.generation:010d}.jsonl"
        if seg.exists():
            raise WorkError(f"attempt journal segment {seg} already exists for a new lease generation; refusing to reuse it")
        # The earlier generations first: a record they refuse fails the open before this generation's file exists.
        earlier, records = await anyio.to_thread.run_sync(self._read_and_fold)
        self.log = await FileRecordLog.open(ATTEMPTS, seg, state=earlier)
        self._just_read = records

    def read_sync(self, after: int = 0) -> list[Any]:
        out: list[Any] = []
        for seg in self.segments():
            out.extend(read_records(seg))
        return out[after:]

    async def read(self, after: int = 0) -> list[Any]:
        # What open just read, handed to the next read once (the controller's recovery fold comes right after
        # open), so a start-up reads the segments once; any other read goes to the files.
        just_read, self._just_read = self._just_read, None
        if just_read is not None:
            return just_read[after:]
        return await anyio.to_thread.run_sync(self.read_sync, after)

    async def append(self, lease: Lease, type_: str, data: dict[str, Any]) -> Any:
        if self.log is None:
            raise WorkError("the attempt journal is closed")
        assert self._fenced is not None, "FileAttemptLog.bind(leases) first"
        self._just_read = None  # no longer all there is
        async with self._fenced(lease):  # lease.lock held: a takeover cannot happen between check and write
            return await self.log.append(type_, data)

    async def close(self) -> None:
        self._just_read = None
        if self.log is not None:
            log_, self.log = self.log, None
            await log_.close()


def file_backend(
    root: str | os.PathLike[str], *, ttl: float = 30.0, owner: str | None = None, clock: Callable[[], float] | None = None,
    grants: GrantBackend | None = None,
) -> WorkBackend:
    """The default backend of the work data directory ``root`` (``<data-dir>/work``)."""
    import time

    from ._grants import GRANTS_FILE, GrantStore

    leases = LeaseStore(root, ttl=ttl, owner=owner, clock=clock or time.time)
    return WorkBackend(
        leases=leases, attempts=FileAttemptLog(root).bind(leases),
        grants=grants if grants is not None else GrantStore(Path(root) / GRANTS_FILE),
    )


__all__ = ["AttemptLog", "FileAttemptLog", "GrantBackend", "JOURNAL_KIND", "LeaseBackend", "ResolutionBackend", "SEGMENT_DIR",
           "WorkBackend", "file_backend"]
