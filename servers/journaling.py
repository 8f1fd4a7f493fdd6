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
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import threading
from pathlib import Path
from typing import Any

import structlog

from openfunctions.core.errors import JournalLocked
from openfunctions.core.journal.execution import DEFAULT_ROTATE_BYTES

from .errors import DataDirLocked, DataDirUnusable

log = structlog.get_logger("openfunctions.servers.journal")

MAX_SLOTS = 16
#: A journal larger than this at startup continues in a new segment (see the module docstring).
ROTATE_BYTES = DEFAULT_ROTATE_BYTES


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


async def open_execution_journal(data_dir: Path, profile: str) -> tuple[Any, Path]:
    """Open the profile's execution journal in the first free slot.

    Returns ``(journal, path)``. Raises :class:`DataDirLocked`
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
        return journal, path
    raise DataDirLocked(
        f"all {MAX_SLOTS} journal slots of profile {profile!r} in {Path(data_dir) / 'journal'} are held by "
        "other running servers; stop one, use another --data-dir, or pass --no-journal",
        details={"data_dir": str(data_dir), "profile": profile},
    )


__all__ = ["open_execution_journal", "prepare_data_dir", "probe_writable", "journal_path", "MAX_SLOTS"]
