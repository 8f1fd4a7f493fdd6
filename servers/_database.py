"""``serve --database postgresql://...``: the execution journal in PostgreSQL, shared by server replicas.

The journal's rows are the store package's (``openfunctions.store.open_pg_journal``;
schema and promises at the top of ``store/_pg_journal.py``). This process's
other durable parts stay in its own data dir: the MCP task journal sits at
``<data-dir>/journal/<profile>.db.tasks.journal`` (so two replicas on one
machine need two ``--data-dir``\\ s), and work, grants and artifacts are files
(docs/SCALING.md, "not built yet").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import DataDirUnusable

#: Seconds between sweeps for replicas that died (their unsettled calls are settled ``unknown``).
SWEEP_INTERVAL = 5.0


async def open_database_journal(url: str, data_dir: Path | None, profile: str) -> tuple[Any, Path]:
    """``(journal, anchor)``: the profile's journal in the database, and the local path tasks live beside."""
    from openfunctions.store import open_pg_journal

    if data_dir is None:
        raise DataDirUnusable("--database needs the execution journal on: drop --no-journal",
                              details={"database": True})
    journal = await open_pg_journal(url, profile)
    journal.start_sweeping(SWEEP_INTERVAL)
    anchor = Path(data_dir) / "journal" / f"{profile}.db.journal"
    try:
        anchor.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        await journal.close()
        raise DataDirUnusable(f"cannot create {anchor.parent}: {exc.strerror or exc}",
                              details={"path": str(anchor.parent)}) from None
    return journal, anchor


__all__ = ["open_database_journal"]
