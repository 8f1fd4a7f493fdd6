"""Shared pytest configuration: anyio's built-in plugin on asyncio, and the session's PostgreSQL.

``pg_server_dsn`` is the one definition that starts PostgreSQL (session scope: a fixture's value is
cached per definition, so it must live here, once). ``pg_dsn`` is what tests ask for; modules that
import ``pg_dsn`` from tests._pg get the same server through it.
"""

import pytest

from tests._harness import pg as _pg
from tests._harness.pg import pg_dsn  # noqa: F401  (a fixture, offered to every test)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server_dsn():
    yield from _pg.pg_server()
