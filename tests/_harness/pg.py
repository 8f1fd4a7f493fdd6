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
- Neither available: the tests that need it skip with the reason, except in
  CI (``CI=true`` or ``OPENFUNCTIONS_REQUIRE_INTEROP=1``), where that is a
  failure: a missing database must not turn into a green run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest

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


def required() -> bool:
    """Whether a missing peer (PostgreSQL, haproxy, Node) is a failure here rather than a skip (CI)."""
    return _required()


def pg_server() -> Iterator[str]:
    """Start (or adopt) the session's PostgreSQL and yield its DSN; tests/conftest.py wraps it as a fixture."""
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
    root = tempfile.mkdtemp(prefix="ofpg-", dir="/tmp" if os.path.isdir("/tmp") else None)
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


__all__ = ["ENV_URL", "pg_dsn", "pg_server", "required", "unique_name"]
