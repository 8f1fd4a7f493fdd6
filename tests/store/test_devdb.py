"""``openfunctions-mcp db start|stop|status``: a real local PostgreSQL (pgserver), driven through the command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from openfunctions.servers import cli


def _db(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(["db", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def devdb_dir():
    pytest.importorskip("pgserver", reason="pgserver (the devdb and test extras) ships the PostgreSQL it starts")
    # A short path: the server's Unix socket lives in it (sun_path holds ~107 bytes).
    root = Path(tempfile.mkdtemp(prefix="ofdev-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield root / "pg"
    from openfunctions.store._devdb import stop

    try:
        stop(root / "pg")  # whatever the test did, no server outlives it
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_start_status_stop_a_local_postgresql_with_pgvector(devdb_dir: Path, capsys, monkeypatch) -> None:
    import psycopg

    monkeypatch.delenv("OPENFUNCTIONS_DATABASE_URL", raising=False)
    rc, out, _ = _db(capsys, "status", "--dir", str(devdb_dir))
    assert rc == 1 and "not running" in out and "openfunctions-mcp db start" in out
    rc, out, err = _db(capsys, "start", "--dir", str(devdb_dir))
    assert rc == 0, err
    dsn = out.strip()
    assert dsn.startswith("postgresql://") and "OPENFUNCTIONS_DATABASE_URL" in err
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE kept (v vector(3))")
        conn.execute("INSERT INTO kept VALUES ('[1,2,3]')")
    rc, out, _ = _db(capsys, "status", "--dir", str(devdb_dir))
    assert rc == 0 and f"running: {dsn}" in out
    rc, out, _ = _db(capsys, "start", "--dir", str(devdb_dir))  # already running: the same DSN, nothing restarted
    assert rc == 0 and out.strip() == dsn
    rc, out, _ = _db(capsys, "stop", "--dir", str(devdb_dir))
    assert rc == 0 and "stopped" in out
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=5).close()
    rc, out, _ = _db(capsys, "status", "--dir", str(devdb_dir))
    assert rc == 1 and "not running" in out
    rc, out, _ = _db(capsys, "stop", "--dir", str(devdb_dir))
    assert rc == 0 and "was not running" in out
    # Started again on the same directory, the data is still there.
    rc, out, _ = _db(capsys, "start", "--dir", str(devdb_dir))
    assert rc == 0
    with psycopg.connect(out.strip(), autocommit=True, connect_timeout=10) as conn:
        assert conn.execute("SELECT v::text FROM kept").fetchone() == ("[1,2,3]",)


def test_status_without_a_database_is_the_local_servers_and_with_one_the_schemas(tmp_path, capsys, monkeypatch):
    """`db status` keeps reporting a named database's schema; with none named, it tells about the local server."""
    pytest.importorskip("pgserver")
    from openfunctions.store import db_cli

    monkeypatch.setenv("OPENFUNCTIONS_MCP_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("OPENFUNCTIONS_DATABASE_URL", raising=False)
    rc, out, _ = _db(capsys, "status")
    assert rc == 1 and f"not running (data: {tmp_path / 'postgres'})" in out
    seen = []
    monkeypatch.setattr(db_cli, "_cmd_status", lambda args: seen.append(args.database) or 0)
    assert cli.main(["db", "status", "--database", "postgresql://u@h/db"]) == 0
    assert seen == ["postgresql://u@h/db"]


def test_a_missing_pgserver_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['pgserver'] = None; from openfunctions.servers.cli import main; "
            f"sys.exit(main(['db', 'start', '--dir', {str(tmp_path / 'pg')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "needs the pgserver package" in proc.stderr and "pip install 'openfunctions-mcp[devdb]'" in proc.stderr
    assert "Traceback" not in proc.stderr
