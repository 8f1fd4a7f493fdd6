"""``serve --database postgresql://...``: the execution journal and the MCP tasks in PostgreSQL, shared by replicas.

The journal's rows are the store package's (``openfunctions.store.open_pg_journal``,
schema and promises at the top of ``store/_pg_journal.py``), the tasks' this
package's own (``servers/_pg_tasks.py``). With a database:

- the execution journal is the database's (each replica appends to its own
  stream; ``db verify`` and ``journal verify|tail|show --database`` read them all);
- conflict keys hold across replicas: the executor's ``key_locks`` are
  PostgreSQL advisory locks (``openfunctions.store.PgKeyLocks``), so two
  writes sharing a key never run at once on two replicas (a registry-wide
  barrier stays per process);
- MCP tasks are rows too (``servers/_tasks_store.py``'s ``DatabaseTaskStore``):
  ``tasks/get``, ``tasks/list`` (2025-11-25), ``tasks/result`` and
  ``tasks/cancel`` answer through any replica; a cancel reaches the replica
  running the call by ``NOTIFY`` (and a mark on the task's row, found by the
  next sweep if the notification was missed), and so do ``tasks/update``
  responses (a row the running replica takes once).
  Every replica sweeps: the calls and tasks of a replica that
  died are settled ``unknown``/``failed``, never re-run;
- large task results (past 256 KiB) are artifacts in the database's store
  ``"default"`` (``openfunctions.store.PgArtifactStore``), so any replica
  reads them back, verified;
- what is still local to the data dir: work, grants (docs/SCALING.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import DataDirUnusable

#: The database's artifact store that large task results go to (what the data dir's ``artifacts/`` is for files).
ARTIFACT_STORE = "default"


async def open_database_journal(url: str, data_dir: Path | None, profile: str,
                                executor: Any = None) -> tuple[Any, Path]:
    """``(journal, anchor)``: the profile's journal in the database, and the local path of this process's data.

    With ``executor``: its ``key_locks`` become the database's advisory locks (closed with the journal).
    """
    from openfunctions.store import PgKeyLocks, database_sweep_interval, open_pg_journal

    if data_dir is None:
        raise DataDirUnusable("--database needs the execution journal on: drop --no-journal",
                              details={"database": True})
    interval = database_sweep_interval()  # a bad value is refused before anything is opened
    journal = await open_pg_journal(url, profile)
    if executor is not None:
        try:
            journal.key_locks = await PgKeyLocks.open(url)
        except BaseException:
            await journal.close()
            raise
        executor.key_locks = journal.key_locks
    journal.start_sweeping(interval)
    anchor = Path(data_dir) / "journal" / f"{profile}.db.journal"
    try:
        anchor.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        await journal.close()
        raise DataDirUnusable(f"cannot create {anchor.parent}: {exc.strerror or exc}",
                              details={"path": str(anchor.parent)}) from None
    return journal, anchor


async def open_database_tasks(manager: Any, journal: Any, url: str, profile: str, anchor: Path) -> None:
    """Keep ``manager``'s tasks in the database beside ``journal``; settle what dead replicas left running."""
    from openfunctions.store import database_sweep_interval, open_pg_artifact_store

    from ._pg_tasks import open_pg_task_log
    from ._tasks import tasks_path
    from ._tasks_store import DatabaseTaskStore

    # Results past 256 KiB: artifacts in the database too, so any replica reads them back (same pool).
    artifacts = await open_pg_artifact_store(url, ARTIFACT_STORE, pool=journal.pool)
    store = DatabaseTaskStore(await open_pg_task_log(url, profile, pool=journal.pool), journal)
    try:
        manager.recovered = await store.sweep()
    except BaseException:
        await store.close()
        raise
    store.start_sweeping(database_sweep_interval())
    store.listen(manager.cancel_here, manager.update_here, running=lambda: list(manager.runs))
    manager.use_store(store, tasks_path(anchor))
    manager.artifacts = artifacts


class ServedArtifacts:
    """The artifacts profile's store (``of_artifact_read``): the data dir's files, or the database's with a database.

    ``install(server)`` learns the server's ``database_url``; ``start()`` then
    opens the database's store :data:`ARTIFACT_STORE` (where large task results
    go), so a result kept through one replica reads in bounded chunks through
    any other. Without a database nothing changes: ``<data-dir>/artifacts``.
    """

    def __init__(self, root: Path) -> None:
        from openfunctions.artifacts import ArtifactStore

        self._files = ArtifactStore(root)
        self._db: Any = None
        self._url: str | None = None
        self.current: Any = self._files

    def install(self, server: Any) -> None:
        self._url = getattr(server, "database_url", None)

    async def start(self) -> None:
        if self._url and self._db is None:
            from openfunctions.store import open_pg_artifact_store

            self._db = await open_pg_artifact_store(self._url, ARTIFACT_STORE, max_connections=2)
            self.current = self._db

    async def put(self, data: Any, **kw: Any) -> Any:
        return await self.current.put(data, **kw)

    async def stat(self, artifact_id: Any) -> Any:
        return await self.current.stat(artifact_id)

    async def read(self, artifact_id: Any, *a: Any, **kw: Any) -> Any:
        return await self.current.read(artifact_id, *a, **kw)

    async def usage(self) -> dict[str, int]:
        return dict(await self.current.usage())

    async def close(self) -> None:
        self._files.close()
        if self._db is not None:
            await self._db.aclose()
            self._db = None


__all__ = ["ServedArtifacts", "open_database_journal", "open_database_tasks"]
