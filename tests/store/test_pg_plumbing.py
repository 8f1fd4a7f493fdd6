"""core.postgres, the plumbing every PostgreSQL backend shares: one reading of an error, and a restart survived.

The errors are real: each is raised by the real server (``RAISE ... USING ERRCODE``, a statement timeout, a
terminated backend, a full pool), then read by :func:`classify` and mapped by :func:`database_error`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from openfunctions.core.postgres import (
    DatabaseUnavailable,
    PgRows,
    classify,
    connection_or,
    database_error,
    open_pool,
)
from openfunctions.store import JournalUnavailable, StoreUnavailable
from openfunctions.work import BackendUnavailable, WorkError

pytestmark = pytest.mark.anyio


def _raised(dsn: str, sql: str) -> psycopg.Error:
    """The error the server raises for ``sql``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(sql)
        except psycopg.Error as exc:
            return exc
    raise AssertionError(f"{sql!r} raised nothing")


def _errcode(code: str) -> str:
    return f"DO $$ BEGIN RAISE EXCEPTION 'raised on purpose' USING ERRCODE = '{code}'; END $$"


@pytest.mark.parametrize(("sql", "kind", "write_certainty"), [
    (_errcode("40001"), "conflict", "known"),  # serialization failure: rolled back, run it again
    (_errcode("40P01"), "conflict", "known"),  # deadlock detected
    (_errcode("55P03"), "timeout", "known"),  # lock not available (lock_timeout)
    ("SET statement_timeout = 50; SELECT pg_sleep(5)", "timeout", "known"),  # query canceled
    (_errcode("23505"), "rejected", "known"),  # unique violation (IntegrityError)
    ("SELECT 'x'::int", "rejected", "known"),  # bad data (DataError)
    ("SELEKT 1", "rejected", "known"),  # syntax (ProgrammingError)
    (_errcode("57P01"), "unavailable", "unknown"),  # admin shutdown: the server went away mid-call
    (_errcode("XX000"), "failed", "unknown"),  # internal error: nobody knows what happened
])
def test_each_kind_of_database_error_is_read_one_way(pg_dsn, sql, kind, write_certainty) -> None:
    exc = _raised(pg_dsn, sql)
    write = classify(exc, write=True)
    read = classify(exc, write=False)
    assert write is not None and read is not None
    assert write.kind == read.kind == kind
    assert write.certainty == write_certainty and read.certainty == "known"  # a read never leaves a doubt
    assert write.reason.startswith(type(exc).__name__ + ": ")


async def test_a_full_pool_is_a_timeout_and_not_a_database_error_is_none(pg_dsn) -> None:
    pool = await open_pool(pg_dsn, min_size=1, max_size=1, timeout=0.2)
    try:
        async with pool.connection():
            with pytest.raises(Exception) as info:
                async with pool.connection(timeout=0.2):
                    pass
        failure = classify(info.value, write=True)
        assert failure is not None and failure.kind == "timeout" and failure.certainty == "known"
    finally:
        await pool.close()
    assert classify(ValueError("a bug"), write=True) is None
    assert classify(StoreUnavailable("ours"), write=True) is None


@pytest.mark.parametrize("into", [StoreUnavailable, JournalUnavailable, BackendUnavailable, DatabaseUnavailable])
def test_every_domain_gets_the_same_wording_and_certainty_in_its_own_class(pg_dsn, into) -> None:
    exc = _raised(pg_dsn, _errcode("57P01"))
    err = database_error(exc, into, "appending a record: PostgreSQL at somewhere failed", write=True,
                         details={"space": "s"})
    assert type(err) is into
    assert err.message.startswith("appending a record: PostgreSQL at somewhere failed (AdminShutdown: raised on purpose)")
    assert "the write may or may not have committed; the next call reconnects" in err.message
    assert err.details == {"space": "s", "certainty": "unknown", "database_error": "unavailable"}
    if not issubclass(into, WorkError):  # work's error carries it in details only
        assert err.certainty == "unknown" and err.effect_happened is None
    refused = database_error(_raised(pg_dsn, _errcode("23505")), into, "x", write=True)
    assert refused.details["certainty"] == "known" and "nothing was written" in refused.message


async def test_connection_or_maps_database_errors_and_lets_ours_through(pg_dsn) -> None:
    pool = await open_pool(pg_dsn, min_size=1, max_size=2)
    try:
        def fail(exc: BaseException) -> Exception:
            return database_error(exc, StoreUnavailable, "probing", write=False)

        with pytest.raises(StoreUnavailable, match=r"probing \(UndefinedTable: "):
            async with connection_or(pool, pool.connection(), fail) as conn:
                await conn.execute("SELECT * FROM of_no_such_table")
        with pytest.raises(WorkError, match="a domain error"):
            async with connection_or(pool, pool.connection(), fail):
                raise WorkError("a domain error")
        with pytest.raises(KeyError):
            async with connection_or(pool, pool.connection(), fail):
                raise KeyError("a bug")
    finally:
        await pool.close()


class _Probe(PgRows):
    what = "probes"


@pytest.fixture
def private_server():
    """A PostgreSQL of this test's own (pgserver in a temporary directory), which the test restarts."""
    pytest.importorskip("pgserver", reason="pgserver (the test extra) ships the PostgreSQL restarted here")
    from openfunctions.store._devdb import start, stop

    root = Path(tempfile.mkdtemp(prefix="ofrs-", dir="/tmp" if os.path.isdir("/tmp") else None))
    data = root / "pg"
    try:
        yield data, start(data), (lambda: start(data)), (lambda: stop(data))
    finally:
        try:
            stop(data)
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
async def test_after_a_restart_one_call_fails_named_and_the_pool_checks_the_rest(private_server) -> None:
    """A restart breaks every pooled connection. The first call on one fails with the domain's error (the write's
    outcome unknown); on that failure the pool checks its idle connections (``pool.check()``), so every call after
    it, as many at once as the pool holds, gets a live connection instead of the next dead one."""
    _, dsn, start, stop = private_server
    size = 4
    pool = await open_pool(dsn, min_size=size, max_size=size)
    try:
        rows = _Probe(dsn, pool, owns_pool=False)
        assert await rows._run("SELECT 1", (), fetch=True) == [(1,)]
        await pool.wait()  # every connection opened and idle
        await asyncio.to_thread(stop)
        await asyncio.to_thread(start)
        with pytest.raises(DatabaseUnavailable) as err:
            await rows._run("SELECT 1", (), fetch=True)
        assert err.value.details["database_error"] == "unavailable" and err.value.certainty == "unknown"
        assert err.value.message.startswith("probes in PostgreSQL at ")
        results = await asyncio.gather(*(rows._run("SELECT 1", (), fetch=True, write=False) for _ in range(size)),
                                       return_exceptions=True)
        assert results == [[(1,)]] * size, results
    finally:
        await pool.close()


@pytest.mark.slow
async def test_after_a_restart_the_key_locks_fail_once_then_grant_a_pool_full(private_server) -> None:
    """The cross-replica key locks (their own pool, not autocommit): after a restart one acquire fails (the
    executor names it ``KeyLocksFailed``), the pool checks the rest, and as many keys as it holds are granted."""
    from openfunctions.store import PgKeyLocks

    _, dsn, start, stop = private_server
    size = 3
    locks = await PgKeyLocks.open(dsn, max_connections=size, connection_timeout=10)
    try:
        # every connection of the pool lent once, held together, given back
        releases = [await locks.acquire(frozenset({k}), shared=False) for k in ("a", "b", "c")]
        for release in releases:
            release()
        await asyncio.sleep(0)
        await asyncio.gather(*list(locks._releases))
        await asyncio.to_thread(stop)
        await asyncio.to_thread(start)
        with pytest.raises(psycopg.OperationalError):
            await locks.acquire(frozenset({"a"}), shared=False)
        granted = await asyncio.gather(*(locks.acquire(frozenset({k}), shared=False) for k in ("x", "y", "z")),
                                       return_exceptions=True)
        assert all(callable(g) for g in granted), granted
        for release in granted:
            release()
    finally:
        await locks.close()


async def test_a_pool_that_cannot_connect_says_why_in_the_drivers_words(pg_dsn) -> None:
    """The pool retries until its timeout and then only says it gave up; the error carries the driver's own reason
    from one more attempt (a refused port, an unknown database), on one line, without the password."""
    import socket

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with socket.socket() as s:  # a port nothing listens on (bound, then freed)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DatabaseUnavailable) as refused:
        await open_pool(f"postgresql://u:sekrit@127.0.0.1:{port}/x", timeout=0.3)
    message = refused.value.message
    assert "Connection refused" in message and "sekrit" not in message and "\n" not in message, message
    assert "pool initialization incomplete" not in message

    parts = conninfo_to_dict(pg_dsn)
    missing = make_conninfo("", **{**parts, "dbname": "of_no_such_database", "password": "sekrit"})
    with pytest.raises(StoreUnavailable) as unknown:
        await open_pool(missing, timeout=0.3, unavailable=StoreUnavailable)
    message = unknown.value.message
    assert 'database "of_no_such_database" does not exist' in message and "sekrit" not in message, message
