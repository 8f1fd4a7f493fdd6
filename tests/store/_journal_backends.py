"""The two execution-journal backends behind one test face: files (core.journal) and PostgreSQL (store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from openfunctions.core.journal import ExecutionJournal, read_records
from openfunctions.store import migrate_database as migrate
from openfunctions.store import open_pg_journal, verify_pg_journal

_migrated: set[str] = set()


async def migrated(dsn: str) -> str:
    if dsn not in _migrated:
        await migrate(dsn)
        _migrated.add(dsn)
    return dsn


class FileBackend:
    name = "file"

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "journal" / "tools.journal"

    async def open(self) -> Any:
        return await ExecutionJournal.open(self.path)

    def records(self) -> list[tuple[str, str]]:
        return [(r.type, r.data["receipt_id"]) for r in read_records(self.path)]

    def verify(self) -> None:
        seqs = [r.seq for r in read_records(self.path)]  # validates seq, checksums and chain; raises if not
        assert seqs == list(range(1, len(seqs) + 1))

    async def crash(self, journal: Any) -> None:
        """What a SIGKILL leaves: the file as written, the lock gone (no receipt for calls in flight)."""
        await journal.log.close()


class PgBackend:
    name = "postgresql"

    def __init__(self, dsn: str, journal: str) -> None:
        self.dsn = dsn
        self.journal = journal

    async def open(self) -> Any:
        await migrated(self.dsn)
        return await open_pg_journal(self.dsn, self.journal)

    def records(self) -> list[tuple[str, str]]:
        """Every stream's records, merged by time (each stream's order kept)."""
        from openfunctions.store._pg_journal_read import read_records as read_pg

        return [(r.type, json.loads(r.data)["receipt_id"]) for r in read_pg(self.dsn, self.journal)]

    def verify(self) -> None:
        report = verify_pg_journal(self.dsn, self.journal)
        assert report.ok, report.problems

    async def crash(self, journal: Any) -> None:
        """What a SIGKILL leaves: the instance row stays, its advisory lock dies with its connection. Returns
        once the server ended that connection's backend: the client's close only starts that, and a sweep
        that runs before it ends still sees the lock held (a loaded machine, parallel workers)."""
        import psycopg

        from tests._harness import await_for

        pid = journal._lock_conn.info.backend_pid
        journal._closed = True
        await journal._lock_conn.close()
        await journal.pool.close()

        def backend_gone() -> bool:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                return conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is None

        await await_for(backend_gone, what=f"the dead instance's backend {pid} to end")


@contextmanager
def private_database(dsn: str) -> Iterator[str]:
    """A new, empty database on the same server, dropped afterwards (for tests that need the whole schema)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from tests._pg import unique_name

    name = unique_name("db")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = conninfo_to_dict(dsn)
    parts["dbname"] = name
    try:
        yield make_conninfo(**parts)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
