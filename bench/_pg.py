"""The PostgreSQL a bench measures: the one it was given, or a private one started for the run.

    from _pg import pg_server
    with pg_server(args.database) as dsn:
        ...

Without a DSN, the PyPI package ``pgserver`` (the ``test`` extra) starts PostgreSQL 16 with pgvector in
a new private directory under /tmp (0700, a Unix socket only; default settings: ``fsync`` and
``synchronous_commit`` on), creates the ``vector`` extension, and on exit stops it and deletes the
directory. A given DSN is used as is (nothing created, nothing stopped).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def pg_server(dsn: str | None = None) -> Iterator[str]:
    """``dsn`` if given, else the DSN of a private PostgreSQL started now and removed on exit (see the module)."""
    if dsn:
        yield dsn
        return
    import pgserver
    import psycopg

    root = tempfile.mkdtemp(prefix="ofbench-pg-", dir="/tmp")
    os.chmod(root, 0o700)
    server = pgserver.get_server(os.path.join(root, "d"), cleanup_mode="stop")
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
