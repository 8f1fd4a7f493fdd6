"""A real PostgreSQL (with pgvector) for the test session.

Every test under tests/ can ask for the fixture ``pg_dsn`` (tests/conftest.py offers it). Modules
that import it (``from tests._pg import pg_dsn``) get a thin fixture of their own that hands out the
same server: pytest keeps a session fixture's value per definition, and each import is a definition,
so the server itself lives in ``pg_server_dsn``, defined once in tests/conftest.py (one PostgreSQL per
session, not one per importing module).

- ``OPENFUNCTIONS_TEST_DATABASE_URL`` set: that server is used as is (it
  must have the ``vector`` extension available; the fixture runs
  ``CREATE EXTENSION IF NOT EXISTS vector``). Tests isolate themselves by
  unique store and index names, so a shared database is fine.
- Otherwise the PyPI package ``pgserver`` (in the ``test`` extra) starts
  PostgreSQL 16 with pgvector in a private temporary directory, once per
  session (about 2 s), listening on a Unix socket only; it is stopped and
  deleted when the session ends.

  Under pytest-xdist every worker is a session of its own: each worker that runs a PostgreSQL test starts
  its own server in its own directory (``/tmp/ofpg-*``; pgserver serialises the starts with its own
  inter-process lock), so workers share no data directory, socket or database. A worker killed before
  its teardown (``kill -9``, a crashed worker xdist replaces) leaves its server running; any later server
  start stops it first: each directory holds an ``owner`` file with the pid of the pytest process that
  made it, and a directory whose owner is gone has its postmaster sent SIGQUIT (PostgreSQL's immediate
  shutdown) and is deleted. Directories without an ``owner`` file are left alone.
- Neither available: the tests that need it skip with the reason, except in
  CI (``CI=true`` or ``OPENFUNCTIONS_REQUIRE_INTEROP=1``), where that is a
  failure: a missing database must not turn into a green run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .procs import alive

ENV_URL = "OPENFUNCTIONS_TEST_DATABASE_URL"


def _required() -> bool:
    flags = (os.environ.get("CI", ""), os.environ.get("OPENFUNCTIONS_REQUIRE_INTEROP", ""))
    return any(f.strip().lower() not in ("", "0", "false", "no") for f in flags)


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"PostgreSQL unavailable and CI/OPENFUNCTIONS_REQUIRE_INTEROP is set: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason} (set {ENV_URL} or pip install pgserver)")


def _ensure_vector(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


ROOT_PREFIX = "ofpg-"


def _postmaster_of(data: Path) -> int | None:
    """The pid of the postmaster serving ``data``, if one runs (checked against its command line)."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if str(data).encode() in argv and alive(pid) else None


def sweep_orphans(tmp: str) -> list[Path]:
    """Stop and delete the servers of sessions that died before their teardown; returns the directories
    removed. Only directories whose ``owner`` file names a pid that no longer runs are touched."""
    removed = []
    for root in sorted(Path(tmp).glob(ROOT_PREFIX + "*")):
        try:
            owner = int((root / "owner").read_text())
        except (OSError, ValueError):
            continue  # still being made, or not made by this harness: not ours to judge
        if alive(owner):
            continue
        pid = _postmaster_of(root / "d")
        if pid is not None:
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown: the data is thrown away next
            deadline = time.monotonic() + 10
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


def required() -> bool:
    """Whether a missing peer (PostgreSQL, haproxy, Node) is a failure here rather than a skip (CI)."""
    return _required()


def pg_server(tmp: str | None = None) -> Iterator[str]:
    """Start (or adopt) the session's PostgreSQL and yield its DSN; tests/conftest.py wraps it as a fixture.
    ``tmp``: where its directory goes (default ``/tmp``; a short path, see below)."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        _unavailable(f"psycopg is not installed ({exc})")
    url = os.environ.get(ENV_URL)
    if url:
        try:
            _ensure_vector(url)
        except Exception as exc:
            _unavailable(f"{ENV_URL} is set but not usable: {exc}")
        yield url
        return
    try:
        import pgserver
    except ImportError as exc:
        _unavailable(f"{ENV_URL} is not set and pgserver is not installed ({exc})")
    # A short path: the server's Unix socket lives in it (sun_path holds ~107 bytes).
    tmp = tmp or ("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())
    sweep_orphans(tmp)
    root = tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=tmp)
    Path(root, "owner").write_text(str(os.getpid()))
    server = None
    try:
        try:
            server = pgserver.get_server(os.path.join(root, "d"), cleanup_mode="stop")
            dsn = server.get_uri()
            _ensure_vector(dsn)
        except Exception as exc:
            _unavailable(f"pgserver could not start PostgreSQL: {type(exc).__name__}: {exc}")
        yield dsn
    finally:
        if server is not None:
            try:
                server.cleanup()
            except Exception:
                pass
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_dsn(pg_server_dsn: str) -> str:
    """A DSN of a live PostgreSQL with the ``vector`` extension created (the session's one server)."""
    return pg_server_dsn


def unique_name(prefix: str = "t") -> str:
    """A store/index name no other test uses (tests share one database)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


__all__ = ["ENV_URL", "ROOT_PREFIX", "pg_dsn", "pg_server", "required", "sweep_orphans", "unique_name"]
