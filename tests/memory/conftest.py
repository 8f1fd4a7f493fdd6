"""Memory runs on both stores: ``memory_store`` is parametrized (local files, real PostgreSQL)."""

from __future__ import annotations

import pytest

from openfunctions.store import open_local_store, open_pg_store
from tests._pg import pg_dsn, unique_name  # noqa: F401  (pg_dsn is a fixture)


@pytest.fixture(params=["local", "postgresql"])
async def memory_store(request, tmp_path):
    if request.param == "local":
        s = await open_local_store("memory", tmp_path / "data")
    else:
        s = await open_pg_store(unique_name("mem"), request.getfixturevalue("pg_dsn"))
    try:
        yield s
    finally:
        await s.aclose()
