"""Store fixtures: ``store`` runs each test on both backends (local files, real PostgreSQL)."""

from __future__ import annotations

import pytest

from openfunctions.store import open_local_store, open_pg_store
from tests._pg import pg_dsn, unique_name  # noqa: F401  (pg_dsn is a fixture)


@pytest.fixture(params=["local", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
async def store(backend, tmp_path, request):
    if backend == "local":
        s = await open_local_store("t", tmp_path / "data", max_value_bytes=4096)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        s = await open_pg_store(unique_name("s"), dsn, max_value_bytes=4096)
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
def reopen(backend, tmp_path, request):
    """Open the same store again (after closing the first): persistence across restarts."""

    async def _reopen(s):
        await s.aclose()
        if backend == "local":
            return await open_local_store("t", tmp_path / "data", max_value_bytes=4096)
        return await open_pg_store(s.name, request.getfixturevalue("pg_dsn"), max_value_bytes=4096)

    return _reopen


@pytest.fixture
def fresh_db(pg_dsn):  # noqa: F811  (pg_dsn is the fixture imported above)
    """A private, empty database on the session's PostgreSQL, dropped afterwards."""
    from ._journal_backends import private_database

    with private_database(pg_dsn) as dsn:
        yield dsn
