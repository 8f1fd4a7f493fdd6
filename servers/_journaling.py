"""Where a server's execution journal lives, and how a second server shares a data dir.

Layout: ``<data-dir>/journal/<profile>.journal`` (the file format is the
core journal's, documented in ``openfunctions.core.journal``). The journal
file is owned through a kernel lock held for the process's lifetime. A
journal past 64 MiB at startup is closed as a segment
(``<profile>.journal.seg-000001``, …) and the server continues in a fresh
file, so startup recovery stays short however long the history.

Two servers of the same profile on one data dir (two MCP hosts launching
``uvx openfunctions-mcp`` at once is common): the second one does not fail.
It takes the next free *slot*, ``<profile>.2.journal``, ``<profile>.3.journal``,
… up to :data:`MAX_SLOTS`; each process writes its own file, and a slot left
by a dead process is taken (and its unsettled calls recovered) by the next
server that starts. Only when every slot is held does the server refuse to
start, with :class:`DataDirLocked` naming the directory.

A journal whose write or fsync failed (a full disk) is fail-stop: it refuses
every later append, and nothing retries the failed descriptor ("fsyncgate").
The server wraps it in :class:`ServedJournal`, which makes that loud (one
``journal_failed`` error log, every refused call says the journal failed and
what brings it back, ``GET /healthz`` answers 503) and, unless
``reopen_interval`` is ``None``, re-opens it the way a restart would: once
no call that started on the failed file is still running and a 64 KiB
written-and-fsynced probe file succeeds in the journal directory, the failed
file is closed and opened afresh through full recovery (torn tail cut and
saved, unsettled starts settled ``unknown``), at most once per
``reopen_interval`` seconds, tried by the next call or health check, and
by a watcher task every second even when nothing calls. The watcher also
answers an operator's ``openfunctions-mcp journal reopen PATH``, which asks
for the re-open now (same safety rules, no interval; works with automatic
re-opening off): see ``_journal_reopen.py``.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.core.errors import JournalFailed, JournalLocked, OpenFunctionsError
from openfunctions.core.journal import DEFAULT_ROTATE_BYTES

from .errors import DataDirLocked, DataDirUnusable

log = structlog.get_logger("openfunctions.servers.journal")

MAX_SLOTS = 16
#: A journal larger than this at startup continues in a new segment (see the module docstring).
ROTATE_BYTES = DEFAULT_ROTATE_BYTES
#: A removed switch (it let a stdio server's lone appender write its record on the event loop's thread;
#: measured slower than the writer thread, see docs/formats/journal.md "Durability"). Still accepted, so a
#: configuration that sets it keeps starting: :func:`warn_removed_switches` says once that it is ignored.
REMOVED_JOURNAL_IN_PLACE_ENV = "OPENFUNCTIONS_JOURNAL_IN_PLACE"


def warn_removed_switches() -> bool:
    """Log one ``journal_in_place_removed`` warning if ``OPENFUNCTIONS_JOURNAL_IN_PLACE`` is set (any
    value); returns whether it was. Nothing else changes: every record goes through the writer thread."""
    value = os.environ.get(REMOVED_JOURNAL_IN_PLACE_ENV)
    if value is None:
        return False
    log.warning("journal_in_place_removed", variable=REMOVED_JOURNAL_IN_PLACE_ENV, value=value,
                effect="ignored: the in-place journal mode was removed; records are written by the journal's "
                       "writer thread, with the same durability", hint=f"unset {REMOVED_JOURNAL_IN_PLACE_ENV}")
    return True


#: Bytes the startup probe writes and fsyncs in the data dir: a disk too full
#: for this is too full for a journal.
PROBE_BYTES = 64 * 1024


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def probe_writable(directory: Path, size: int = PROBE_BYTES) -> None:
    """Create, write ``size`` bytes to, fsync and remove a file in ``directory``; raises OSError if any step fails."""
    probe = directory / f".write-probe.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(b"\0" * size)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
        try:
            os.unlink(probe)
        except FileNotFoundError:
            pass


def prepare_data_dir(data_dir: Path) -> Path:
    """Create the data dir (mode 0700) if absent and prove it takes a durable write; return it.

    Raises :class:`DataDirUnusable` naming the directory and the reason when
    it is a file, sits under a file, cannot be created, or does not take a
    written and fsynced file (read-only, full, no permission). A data dir
    that already exists and that other users can write to is served, with
    a warning: they could plant or alter journal files.
    """
    # A file-size limit (ulimit -f) must fail a write (EFBIG), as a full
    # disk does, not kill the process with SIGXFSZ halfway through a record.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    data_dir = Path(data_dir)
    existed = data_dir.is_dir()
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise DataDirUnusable(f"data dir {data_dir} is not a directory (a file is in the way)",
                              details={"data_dir": str(data_dir)}) from None
    except OSError as exc:
        raise DataDirUnusable(f"data dir {data_dir} cannot be created: {_why(exc)}",
                              details={"data_dir": str(data_dir), "errno": exc.errno}) from None
    try:
        probe_writable(data_dir)
    except OSError as exc:
        hint = " (the disk is full)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        raise DataDirUnusable(f"data dir {data_dir}: cannot write a file there: {_why(exc)}{hint}",
                              details={"data_dir": str(data_dir), "errno": exc.errno}) from None
    if existed:
        mode = stat.S_IMODE(data_dir.stat().st_mode)
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning("data_dir_permissions", path=str(data_dir), mode=oct(mode),
                        hint="other users can write here and could alter journals: chmod 700 it")
    return data_dir


def journal_path(data_dir: Path, profile: str, slot: int = 1) -> Path:
    name = f"{profile}.journal" if slot == 1 else f"{profile}.{slot}.journal"
    return Path(data_dir) / "journal" / name


#: Seconds between attempts to re-open a failed journal (``--journal-reopen-interval``).
DEFAULT_REOPEN_INTERVAL = 5.0


async def open_execution_journal(
    data_dir: Path, profile: str, *, reopen_interval: float | None = DEFAULT_REOPEN_INTERVAL, watch: bool = True
) -> tuple[Any, Path]:
    """Open the profile's execution journal in the first free slot.

    Returns ``(journal, path)``; the journal is a :class:`ServedJournal`
    (re-opened after a failure every ``reopen_interval`` seconds at most;
    ``None``: only a restart brings it back). Raises :class:`DataDirLocked`
    when all slots are held by live servers; other journal errors
    (``JournalCorrupt``, ``JournalUnsafe``) propagate: they need an operator.
    """
    from openfunctions.core.journal import ExecutionJournal  # same distribution; imported late for a fast --help
    for slot in range(1, MAX_SLOTS + 1):
        path = journal_path(data_dir, profile, slot)
        try:
            journal = await ExecutionJournal.open(path, rotate_over=ROTATE_BYTES)
        except JournalLocked:
            continue
        except OSError as exc:
            raise DataDirUnusable(f"journal {path}: cannot open it: {_why(exc)}",
                                  details={"path": str(path), "errno": exc.errno}) from None
        if slot > 1:
            log.info("journal_slot", path=str(path), reason="lower slots are held by other live servers")
        if journal.rotated_to is not None:
            log.info("journal_rotated", path=str(path), segment=str(journal.rotated_to))
        served = ServedJournal(journal, data_dir=Path(data_dir), profile=profile, reopen_interval=reopen_interval)
        if watch:
            from ._journal_reopen import start_watch

            served._watch = start_watch(served)
        return served, path
    raise DataDirLocked(
        f"all {MAX_SLOTS} journal slots of profile {profile!r} in {Path(data_dir) / 'journal'} are held by "
        "other running servers; stop one, use another --data-dir, or pass --no-journal",
        details={"data_dir": str(data_dir), "profile": profile},
    )


class ServedJournal:
    """A server's execution journal (an ``ExecutionObserver``): fail-stop made loud, and re-opened through recovery.

    Everything else (``log``, ``receipts()``, ``recovered``, ``rotated_to``,
    ``path``) is the current :class:`~openfunctions.core.journal.ExecutionJournal`'s.
    """

    def __init__(self, journal: Any, *, data_dir: Path, profile: str, reopen_interval: float | None) -> None:
        self._journal = journal
        self._data_dir = data_dir
        self._profile = profile
        self.reopen_interval = reopen_interval
        #: Why the journal refuses writes (``None`` while healthy).
        self.failure: str | None = None
        self.reopened = 0
        self._last_attempt = 0.0
        # Calls whose start is in the current file and that have not settled:
        # a re-open would settle them ``unknown`` while they still run.
        self._running: set[str] = set()
        self._reopening = anyio.Lock()
        #: Why the last re-open attempt did not happen (``None`` after a success).
        self.reopen_blocked: str | None = None
        self._watch: Any = None  # the reopen watcher task (``_journal_reopen.start_watch``)
        self._on_loop = False

    def sync_on_loop(self, on: bool) -> None:
        """Write and sync every record on the event loop's thread, once per loop iteration for all that
        iteration appended, instead of on the journal's writer thread (``JournalLog.sync_on_loop``; kept
        across re-opens). Both servers turn it on unless told ``journal_sync="thread"``: under many HTTP
        clients the writer thread's contention for the GIL cost more than the fsync's stall, and for one stdio
        client the two hand-overs around each fsync did (docs/design/journal.md)."""
        self._on_loop = on
        self._journal.log.sync_on_loop = on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def _refusal(self) -> JournalFailed:
        path = str(self._journal.path)
        if self.reopen_interval is None:
            action = (f"once the disk takes writes again, run `openfunctions-mcp journal reopen {path}` "
                      "or restart the server to re-open it through recovery")
        else:
            action = (f"the server re-opens it through recovery once the disk takes writes again "
                      f"(tried every {self.reopen_interval:g} s; `openfunctions-mcp journal reopen {path}` asks now), "
                      "or restart it")
        return JournalFailed(
            f"the execution journal {path} failed ({self.failure}) and refuses every write until it is "
            f"re-opened: no call runs meanwhile; {action}",
            details={"path": path, "cause": self.failure, "action": action},
        )

    def _fail(self, exc: BaseException) -> None:
        if self.failure is not None:
            return
        cause = exc.details.get("cause") if isinstance(exc, OpenFunctionsError) else None
        self.failure = str(cause or exc)
        self._last_attempt = time.monotonic()
        log.error("journal_failed", path=str(self._journal.path), cause=self.failure,
                  hint="calls are refused until the journal is re-opened (automatic once writes succeed, or restart); "
                       "GET /healthz answers 503 meanwhile")

    # -- ExecutionObserver ------------------------------------------------
    async def on_start(self, record: Any) -> None:
        if self.failure is not None and not await self.try_reopen():
            raise self._refusal()
        try:
            await self._journal.on_start(record)
        except JournalFailed as exc:
            self._fail(exc)
            raise self._refusal() from None
        self._running.add(record.receipt_id)

    async def on_settled(self, receipt: Any, *, queued: Any = None) -> None:
        try:
            if self.failure is not None:
                raise self._refusal()
            try:
                if queued is None:
                    await self._journal.on_settled(receipt)
                else:  # only when the inner journal declared ordered_receipts (forwarded by __getattr__)
                    await self._journal.on_settled(receipt, queued=queued)
            except JournalFailed as exc:
                self._fail(exc)
                raise self._refusal() from None
        finally:
            self._running.discard(receipt.receipt_id)

    # -- health and re-open ----------------------------------------------------
    async def health(self) -> dict[str, Any]:
        """``{"status": "ok"}``, or ``failed`` with the cause and the way back (tries a re-open first)."""
        if self.failure is not None:
            await self.try_reopen()
        if self.failure is None:
            return {"status": "ok"}
        refusal = self._refusal()
        return {"status": "failed", "code": refusal.code, "cause": self.failure, "action": refusal.details["action"]}

    async def try_reopen(self, *, force: bool = False) -> bool:
        """Re-open a failed journal through full recovery if it is time and safe; True if it is healthy now.

        ``force`` (an operator's ``journal reopen``): ignore the interval and
        whether automatic re-opening is on; the safety rules still hold.
        """
        if self.failure is None:
            return True
        if self._running:
            self.reopen_blocked = (f"{len(self._running)} call(s) that started on the failed file are still running; "
                                   "re-opening now would settle them unknown while they run")
            return False
        if self.reopen_interval is None and not force:
            return False
        async with self._reopening:
            if self.failure is None:
                return True
            now = time.monotonic()
            if not force and now - self._last_attempt < (self.reopen_interval or 0.0):
                return False
            self._last_attempt = now
            directory = Path(self._journal.path).parent
            try:
                await anyio.to_thread.run_sync(probe_writable, directory)
            except OSError as exc:
                log.info("journal_reopen_deferred", path=str(self._journal.path), reason=_why(exc))
                self.reopen_blocked = f"a {PROBE_BYTES // 1024} KiB probe write in {directory} failed: {_why(exc)}"
                return False
            try:
                await self._journal.close()
            except Exception as exc:  # a failed log may not close cleanly; its lock and fd are released regardless
                log.warning("journal_close_failed", path=str(self._journal.path), error=str(exc))
            try:
                fresh, path = await open_execution_journal(self._data_dir, self._profile, reopen_interval=None,
                                                           watch=False)
            except Exception as exc:
                log.error("journal_reopen_failed", path=str(self._journal.path), error=str(exc))
                self.reopen_blocked = f"opening the journal afresh failed: {exc}"
                return False
            self._journal = fresh._journal
            self.sync_on_loop(self._on_loop)
            self.failure = None
            self.reopen_blocked = None
            self.reopened += 1
            log.warning("journal_reopened", path=str(path), recovered=len(fresh.recovered),
                        repaired_tail=str(fresh.log.repaired_tail) if fresh.log.repaired_tail else None)
            return True

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        await self._journal.close()


__all__ = ["ServedJournal", "DEFAULT_REOPEN_INTERVAL", "open_execution_journal", "prepare_data_dir", "probe_writable", "journal_path", "MAX_SLOTS"]
