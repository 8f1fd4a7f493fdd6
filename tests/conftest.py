"""Shared pytest configuration: anyio's built-in plugin on asyncio, the session's PostgreSQL, and logging
put back after each test.

``pg_server_dsn`` is the one definition that starts PostgreSQL (session scope: a fixture's value is
cached per definition, so it must live here, once). ``pg_dsn`` is what tests ask for; modules that
import ``pg_dsn`` from tests._pg get the same server through it. Under pytest-xdist each worker is a
session, so each worker that needs one starts its own server (tests/_harness/pg.py).

Logging is process-global and a test may configure it onto a stream that is closed after it
(tests/_harness/logs.py): ``_logging_put_back`` restores what each test found.
"""

import pytest

from tests._harness import pg as _pg
from tests._harness.logs import logging_put_back
from tests._harness.pg import pg_dsn  # noqa: F401  (a fixture, offered to every test)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server_dsn():
    yield from _pg.pg_server()


@pytest.fixture(autouse=True)
def _logging_put_back():
    with logging_put_back():
        yield


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist with ``--dist loadgroup``: the tests of the release artifacts (fixture ``dists``, a
    session fixture that builds the sdist and wheel, about 20 s) run on one worker, so one build serves them
    all instead of one per worker."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "dists" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("dists"))
