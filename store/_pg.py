"""The PostgreSQL store: psycopg 3 with a connection pool; the database does the work.

Schema (created and migrated by the store itself, under a transaction-scoped
advisory lock so that several processes opening at once migrate once)::

    of_schema(component text PRIMARY KEY, version int, migrated_at timestamptz)
        -- one row per component ("store", "rag", ...): its schema version
    of_store_rev                         -- SEQUENCE: every write's version
    of_store_entries(
        store      text COLLATE "C",     -- the store's name
        key        text COLLATE "C",     -- code-point order, as the local store
        value      text,                 -- compact JSON (text, not jsonb: jsonb refuses "\\u0000"
                                         -- and reorders keys; nothing queries inside values)
        version    bigint,               -- nextval('of_store_rev') at the write
        updated_at timestamptz,
        PRIMARY KEY (store, key))

A schema newer than this code is refused (:class:`SchemaTooNew`). Compare-
and-set is one conditional statement (``UPDATE ... WHERE version = %s``,
``INSERT ... ON CONFLICT DO NOTHING``); a transaction is a SERIALIZABLE
database transaction whose serialization failure is a :class:`Conflict`.
Every statement is parameterized; no caller text is ever spliced into SQL.

When the database goes away mid-call the call fails with
:class:`StoreUnavailable` (``certainty="unknown"`` for a write: it may have
committed); the pool checks a connection before lending it, so the next
call gets a fresh one once the server is back.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from openfunctions.core import postgres as _postgres
from openfunctions.core import redact_dsn
from openfunctions.core.postgres import (  # the plumbing every PostgreSQL backend shares
    DatabaseUnavailable,
    apply_migrations,
    database_error,
    drop_dead_connections,
    load_psycopg,
)

from ._api import (
    DEFAULT_LIST_LIMIT,
    DEFAULT_MAX_VALUE_BYTES,
    Entry,
    Store,
    Transaction,
    check_key,
    check_list_args,
    check_name,
    check_version,
    encode_value,
    prefix_end,
)
from ._errors import Conflict, StoreClosed, StoreError, StoreUnavailable, StoreUnsafe

#: Seconds between sweeps for replicas that died (their unsettled calls are settled ``unknown``, their tasks
#: ``failed``, their agent runs ``interrupted``, and cancel marks or answers whose notification this replica missed
#: are acted on). ``$OPENFUNCTIONS_DATABASE_SWEEP_S`` overrides it (a positive number of seconds): shorter settles a
#: dead replica's work sooner, at one more read each time. One value for every sweep of a process.
SWEEP_INTERVAL = 5.0
SWEEP_ENV = "OPENFUNCTIONS_DATABASE_SWEEP_S"


def database_sweep_interval() -> float:
    """:data:`SWEEP_INTERVAL`, or ``$OPENFUNCTIONS_DATABASE_SWEEP_S`` when set (refused, named, unless positive)."""
    import math
    import os

    from openfunctions.core.errors import ConfigurationError

    raw = os.environ.get(SWEEP_ENV, "").strip()
    if not raw:
        return SWEEP_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"${SWEEP_ENV} must be a positive number of seconds, got {raw!r}",
                                 details={"variable": SWEEP_ENV})
    return value

SCHEMA_COMPONENT = "store"
HOT_CONNECTIONS = 2  # idle connections PgStore keeps out of its pool for single statements (see _run)
# Migrations: the i-th entry brings the component from version i to i+1. Append, never edit.
MIGRATIONS: list[Sequence[str]] = [
    (
        "CREATE SEQUENCE IF NOT EXISTS of_store_rev",
        """CREATE TABLE IF NOT EXISTS of_store_entries (
            store text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            value text NOT NULL,
            version bigint NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (store, key))""",
    ),
]


def _psycopg() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)`` (``core/postgres.py``), missing -> :class:`StoreUnavailable`."""
    try:
        return load_psycopg()
    except DatabaseUnavailable as exc:
        raise StoreUnavailable(exc.message) from None


def _ts(value: _dt.datetime) -> str:
    return value.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 10.0) -> Any:
    """``core.postgres.open_pool`` with the store's errors (no DSN: :class:`StoreUnsafe`; unreachable:
    :class:`StoreUnavailable`)."""
    if not isinstance(dsn, str) or not dsn:
        raise StoreUnsafe("a PostgreSQL DSN (postgresql://...) is required")
    _psycopg()
    return await _postgres.open_pool(dsn, min_size=min_size, max_size=max_size, timeout=timeout,
                                     unavailable=StoreUnavailable)


class PgStore(Store):
    backend = "postgresql"

    def __init__(self, name: str, pool: Any, max_value_bytes: int, owns_pool: bool, dsn: str) -> None:  # use open_pg_store
        self.name = name
        self.max_value_bytes = max_value_bytes
        self.pool = pool
        self._owns_pool = owns_pool
        self._where = redact_dsn(dsn) if dsn else "PostgreSQL"
        self._closed = False
        psycopg, _ = _psycopg()
        self._db_errors = (psycopg.OperationalError, psycopg.InterfaceError)
        self._serialization = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
                               psycopg.errors.UniqueViolation)
        self._pool_timeout = _psycopg()[1].PoolTimeout
        self._idle_status = psycopg.pq.TransactionStatus.IDLE
        self._hot: list[Any] = []  # idle connections kept out of the pool for single statements (_run)

    # -- plumbing -------------------------------------------------------------
    async def _lost(self) -> None:
        """After a connection failed: drop the pool's other dead connections (a restarted server
        breaks them all), so that the next call reconnects instead of failing the same way."""
        try:
            await self._release_hot()
        except Exception:
            pass
        await drop_dead_connections(self.pool)

    def _unavailable(self, exc: BaseException, write: bool) -> StoreUnavailable:
        return database_error(exc, StoreUnavailable, f"store {self.name!r}: PostgreSQL at {self._where} failed mid-call",
                              write=write)

    async def _run(self, sql: str, params: tuple[Any, ...], *, write: bool, fetch: str = "one") -> Any:
        """One autocommit statement on a connection from the hot list (else the pool).

        The hot path (bench/bench_store.py): the pool's checkout and return cost a lock, a
        context manager, a commit check and bookkeeping per call (measured: about a third of a
        local get's time); up to :data:`HOT_CONNECTIONS` idle connections are kept out of the pool
        for single statements and go back to it on any error, on :meth:`_lost` and at close.
        """
        if self._closed:
            raise StoreClosed(f"store {self.name!r} is closed")
        conn = self._hot.pop() if self._hot else None
        try:
            if conn is None:
                conn = await self.pool.getconn()
            cur = await conn.execute(sql, params)
            if fetch == "one":
                result = await cur.fetchone()
            elif fetch == "all":
                result = await cur.fetchall()
            else:
                result = None
        except BaseException as exc:
            if conn is not None:
                await self.pool.putconn(conn)  # the pool checks it and replaces a broken one
            if isinstance(exc, self._pool_timeout):
                raise database_error(exc, StoreUnavailable, f"store {self.name!r}: no PostgreSQL connection at "
                                     f"{self._where}", write=write) from None
            if isinstance(exc, self._db_errors):
                await self._lost()
                raise self._unavailable(exc, write) from None
            raise
        if not self._closed and len(self._hot) < HOT_CONNECTIONS and conn.pgconn.transaction_status == self._idle_status:
            self._hot.append(conn)
        else:
            await self.pool.putconn(conn)
        return result

    async def _release_hot(self) -> None:
        while self._hot:
            await self.pool.putconn(self._hot.pop())

    async def _current_version(self, key: str) -> int:
        row = await self._run("SELECT version FROM of_store_entries WHERE store = %s AND key = %s", (self.name, key), write=False)
        return row[0] if row else 0

    async def _conflict(self, key: str, expected: int) -> Conflict:
        have = await self._current_version(key)
        return Conflict(
            f"key {key!r}: expected version {expected}{' (absent)' if expected == 0 else ''}, found {have}"
            f"{' (absent)' if have == 0 else ''}; nothing was written",
            details={"key": key, "expected_version": expected, "version": have},
        )

    # -- the interface --------------------------------------------------------
    async def get(self, key: str) -> Entry | None:
        check_key(key)
        row = await self._run(
            "SELECT value, version, updated_at FROM of_store_entries WHERE store = %s AND key = %s",
            (self.name, key), write=False)
        return Entry(key, json.loads(row[0]), row[1], _ts(row[2])) if row else None

    async def put(self, key: str, value: Any) -> Entry:
        check_key(key)
        text = encode_value(value, key, self.max_value_bytes)
        row = await self._run(
            "INSERT INTO of_store_entries (store, key, value, version, updated_at) "
            "VALUES (%s, %s, %s, nextval('of_store_rev'), now()) ON CONFLICT (store, key) DO UPDATE SET "
            "value = EXCLUDED.value, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at "
            "RETURNING version, updated_at", (self.name, key, text), write=True)
        return Entry(key, value, row[0], _ts(row[1]))

    async def delete(self, key: str) -> bool:
        check_key(key)
        row = await self._run("DELETE FROM of_store_entries WHERE store = %s AND key = %s RETURNING 1",
                              (self.name, key), write=True)
        return row is not None

    async def compare_and_set(self, key: str, expected_version: int, value: Any) -> Entry:
        check_key(key)
        check_version(expected_version)
        text = encode_value(value, key, self.max_value_bytes)
        if expected_version == 0:
            row = await self._run(
                "INSERT INTO of_store_entries (store, key, value, version, updated_at) "
                "VALUES (%s, %s, %s, nextval('of_store_rev'), now()) ON CONFLICT (store, key) DO NOTHING "
                "RETURNING version, updated_at", (self.name, key, text), write=True)
        else:
            row = await self._run(
                "UPDATE of_store_entries SET value = %s, version = nextval('of_store_rev'), updated_at = now() "
                "WHERE store = %s AND key = %s AND version = %s RETURNING version, updated_at",
                (text, self.name, key, expected_version), write=True)
        if row is None:
            raise await self._conflict(key, expected_version)
        return Entry(key, value, row[0], _ts(row[1]))

    async def compare_and_delete(self, key: str, expected_version: int) -> None:
        check_key(key)
        check_version(expected_version)
        row = None
        if expected_version != 0:
            row = await self._run(
                "DELETE FROM of_store_entries WHERE store = %s AND key = %s AND version = %s RETURNING 1",
                (self.name, key, expected_version), write=True)
        if row is None:
            raise await self._conflict(key, expected_version)

    async def list(self, prefix: str = "", *, after: str | None = None, limit: int = DEFAULT_LIST_LIMIT,
                   reverse: bool = False) -> list[Entry]:
        prefix, after, limit = check_list_args(prefix, after, limit)
        # Range bounds use the primary key's index; starts_with guards the upper bound's edge cases.
        sql = ["SELECT key, value, version, updated_at FROM of_store_entries WHERE store = %s AND key >= %s"]
        params: list[Any] = [self.name, prefix]
        if prefix:
            sql.append("AND starts_with(key, %s)")
            params.append(prefix)
            upper = prefix_end(prefix)
            if upper is not None and not _has_surrogate(upper):
                sql.append("AND key < %s")
                params.append(upper)
        if after is not None:
            sql.append("AND key < %s" if reverse else "AND key > %s")
            params.append(after)
        sql.append("ORDER BY key DESC" if reverse else "ORDER BY key")
        sql.append("LIMIT %s")
        params.append(limit)
        rows = await self._run(" ".join(sql), tuple(params), write=False, fetch="all")
        return [Entry(r[0], json.loads(r[1]), r[2], _ts(r[3])) for r in rows]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        if self._closed:
            raise StoreClosed(f"store {self.name!r} is closed")
        _, psycopg_pool = _psycopg()
        committing = False
        try:
            async with self.pool.connection() as conn:
                async with conn.transaction():
                    await conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    yield _PgTransaction(self, conn)
                    committing = True
        except psycopg_pool.PoolTimeout as exc:
            raise database_error(exc, StoreUnavailable, f"store {self.name!r}: no PostgreSQL connection at "
                                 f"{self._where}", write=True) from None
        except self._serialization as exc:
            raise Conflict(f"transaction on store {self.name!r} lost a race ({type(exc).__name__}); nothing was "
                           "written: run it again", details={"sqlstate": getattr(exc, "sqlstate", None)}) from None
        except self._db_errors as exc:
            # Before COMMIT was sent nothing can have committed; during it, nobody knows.
            await self._lost()
            raise self._unavailable(exc, write=committing) from None

    async def flush(self) -> None:
        """Every acknowledged write is already committed (synchronous commit): nothing to wait for."""
        if self._closed:
            raise StoreClosed(f"store {self.name!r} is closed")

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._release_hot()
        if self._owns_pool:
            await self.pool.close()

    def __repr__(self) -> str:
        return f"<PgStore {self.name!r} at {self._where}>"


class _PgTransaction(Transaction):
    def __init__(self, store: PgStore, conn: Any) -> None:
        self._store = store
        self._conn = conn

    async def get(self, key: str) -> Entry | None:
        check_key(key)
        cur = await self._conn.execute(
            "SELECT value, version, updated_at FROM of_store_entries WHERE store = %s AND key = %s",
            (self._store.name, key))
        row = await cur.fetchone()
        return Entry(key, json.loads(row[0]), row[1], _ts(row[2])) if row else None

    async def put(self, key: str, value: Any) -> None:
        check_key(key)
        text = encode_value(value, key, self._store.max_value_bytes)
        await self._conn.execute(
            "INSERT INTO of_store_entries (store, key, value, version, updated_at) "
            "VALUES (%s, %s, %s, nextval('of_store_rev'), now()) ON CONFLICT (store, key) DO UPDATE SET "
            "value = EXCLUDED.value, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at",
            (self._store.name, key, text))

    async def delete(self, key: str) -> None:
        check_key(key)
        await self._conn.execute("DELETE FROM of_store_entries WHERE store = %s AND key = %s", (self._store.name, key))


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


async def open_pg_store(name: str, dsn: str | None = None, *, pool: Any = None,
                          max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES, max_connections: int = 8,
                          timeout: float = 10.0) -> PgStore:
    """Open the store ``name`` in PostgreSQL (creating or migrating the schema).

    Pass ``dsn`` (``postgresql://user:pass@host/db``; a pool of up to
    ``max_connections`` is opened and closed with the store) or an open
    psycopg ``AsyncConnectionPool`` as ``pool`` (shared; the caller closes it).
    Raises StoreUnavailable (cannot connect), SchemaTooNew.
    """
    check_name(name)
    owns = pool is None
    if pool is None:
        if dsn is None:
            raise StoreUnsafe("open_pg_store needs dsn= (postgresql://...) or pool=")
        pool = await open_pool(dsn, max_size=max_connections, timeout=timeout)
    try:
        psycopg, _ = _psycopg()
        try:
            async with pool.connection() as conn:
                await apply_migrations(conn, SCHEMA_COMPONENT, MIGRATIONS)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot prepare the store schema in PostgreSQL: {exc}") from None
    except BaseException:
        if owns:
            await pool.close()
        raise
    return PgStore(name, pool, max_value_bytes, owns, dsn or "")


__all__ = ["PgStore", "apply_migrations", "open_pg_store", "open_pool", "redact_dsn", "StoreError"]
