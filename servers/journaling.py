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

from pathlib import Path
from typing import Any

import structlog

from openfunctions.core.errors import JournalLocked
from openfunctions.core.journal.execution import DEFAULT_ROTATE_BYTES

from .errors import DataDirLocked

log = structlog.get_logger("openfunctions.servers.journal")

MAX_SLOTS = 16
#: A journal larger than this at startup continues in a new segment (see the module docstring).
ROTATE_BYTES = DEFAULT_ROTATE_BYTES


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


__all__ = ["open_execution_journal", "journal_path", "MAX_SLOTS"]
