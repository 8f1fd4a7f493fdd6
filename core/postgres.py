"""PostgreSQL plumbing every backend of this distribution shares: pool, schema versions, errors, components.

Each domain keeps its own PostgreSQL backend beside its own code (the
execution journal, key locks and artifacts in ``store``, work in ``work``,
workflow runs in ``workflows``, agent run records in ``agents``, MCP tasks in
``servers``); what they do
alike lives here, once, so that every backend opens, migrates, checks and
fails the same way. psycopg 3 is imported lazily (the ``postgres`` extra).

- **Pool.** :func:`open_pool`: an opened ``AsyncConnectionPool`` of autocommit
  connections. Connections are not checked before each loan (that would double
  every call's round trips); a call that fails on a broken connection calls
  :func:`drop_dead_connections`, which has the pool check its idle ones (a
  restarted server breaks them all), so the next call gets a live one.
- **Schema versions.** One row per component in ``of_schema(component text
  PRIMARY KEY, version int, migrated_at timestamptz)``. A component's
  migrations are a list: ``MIGRATIONS[i]`` brings it from version ``i`` to
  ``i + 1`` (**append, never edit** a released entry). :func:`apply_migrations`
  runs the missing ones in one transaction under an advisory lock (several
  machines migrating at once: the others wait, then find the work done).
  Servers never migrate the shared components: :func:`check_schema` refuses a
  version other than the code's, naming ``openfunctions-mcp db migrate``
  (older) or an upgrade (newer), so replicas of two releases never write one
  table with two meanings.
- **Components.** :data:`COMPONENTS`, the registry ``db migrate``, ``db
  status`` and ``db verify`` iterate: each names where its migration list (and
  its ``db verify`` audit, if any) lives, as ``"module:attribute"`` resolved on
  use, so that the command line imports a domain only when it runs it and no
  package writes another's globals. A new component is one line here.
- **Errors.** :func:`classify` is the one reading of a psycopg error (what
  happened, and whether a write may have committed); :func:`database_error`
  turns it into the calling domain's own error class with one wording.
- **Record tables.** :class:`RecordTableSpec` (``core/_pg_records.py``): the
  one row layout every record stream's table has, its one append and read
  statements, and :class:`PgKeyTable`, one key's writer for a
  ``core.records.TableRecordLog``.
- **Rows and liveness.** :class:`PgRows` (one statement per call, its
  failure mapped) and :func:`open_checked` (a pool, the schema checked) for
  the record stores; :class:`PgInstance`, a process's registration in
  ``of_journal_instances`` with a session advisory lock held for life, whose
  death the other replicas see (the journal's and the agent runs' recovery).

Nothing here builds SQL from caller text: table and column names are code
constants; every value is a parameter.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio

from ._dsn import redact_dsn, redact_dsn_in
from ._imports import import_spec
from ._pg_records import Guard, PgKeyTable, RecordTableSpec, TableRow, decode_rows, read_rows, stamp
from ._stamps import new_id
from .errors import OpenFunctionsError, PersistenceError
from .records import Pair

Certainty = Literal["known", "unknown"]
E = TypeVar("E", bound=OpenFunctionsError)


class DatabaseError(PersistenceError):
    """A PostgreSQL component could not be used. ``certainty``: could a write have happened (``"unknown"``)?"""

    code = "database_error"


class DatabaseUnavailable(DatabaseError):
    """PostgreSQL cannot be reached, or psycopg is not installed."""

    code = "database_unavailable"


class SchemaOutOfDate(DatabaseError):
    """The database's schema of a component is older than this code: run ``openfunctions-mcp db migrate``."""

    code = "schema_out_of_date"


class SchemaTooNew(DatabaseError):
    """The database's schema of a component is newer than this code knows: refuse rather than guess."""

    code = "store_schema_too_new"


def load_psycopg() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or :class:`DatabaseUnavailable` naming the extra to install."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise DatabaseUnavailable(
            "PostgreSQL needs psycopg 3 and psycopg_pool: pip install 'openfunctions-mcp[postgres]'") from None
    return psycopg, psycopg_pool


# -- errors -----------------------------------------------------------------------------------------------------------

Kind = Literal["unavailable", "conflict", "timeout", "rejected", "failed"]


@dataclass(frozen=True)
class Failure:
    """What a database error means to the caller.

    ``kind``: ``unavailable`` (no connection, or it was lost: the next call
    reconnects), ``conflict`` (a serialization failure or deadlock: nothing
    committed, run it again), ``timeout`` (a statement or lock timeout, or no
    pooled connection in time: nothing committed), ``rejected`` (the database
    refused the statement: a constraint, bad data; nothing committed),
    ``failed`` (anything else the server reported). ``certainty`` is
    ``"unknown"`` only where a write may have committed: the connection was
    lost or the server failed while a write was in flight.
    """

    kind: Kind
    certainty: Certainty
    reason: str  # "TypeName: first line of the message" (bounded), for the error's text


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "connection lost"
    return f"{type(exc).__name__}: {text[:200]}"


def classify(exc: BaseException, *, write: bool) -> Failure | None:
    """The one reading of a database error; None when ``exc`` is not one (a bug, or an error of ours: re-raise it).

    ``write``: the failed call could have changed something (then a lost
    connection leaves the outcome ``unknown``).
    """
    try:
        psycopg, psycopg_pool = load_psycopg()
    except DatabaseUnavailable:
        return None
    errors = psycopg.errors
    reason = _reason(exc)
    if isinstance(exc, (psycopg_pool.PoolTimeout, TimeoutError)):
        return Failure("timeout", "known", reason)  # no connection was lent: nothing was sent
    if not isinstance(exc, psycopg.Error):
        return None
    if isinstance(exc, (errors.SerializationFailure, errors.DeadlockDetected)):
        return Failure("conflict", "known", reason)  # the server rolled the transaction back
    if isinstance(exc, (errors.QueryCanceled, errors.LockNotAvailable)):
        return Failure("timeout", "known", reason)  # canceled before it could commit
    if isinstance(exc, (psycopg.IntegrityError, psycopg.DataError, psycopg.ProgrammingError)):
        return Failure("rejected", "known", reason)  # refused before anything was written
    maybe: Certainty = "unknown" if write else "known"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return Failure("unavailable", maybe, reason)  # refused, reset, server shut down: mid-write, nobody knows
    return Failure("failed", maybe, reason)


_OUTCOME = {"known": "nothing was written", "unknown": "the write may or may not have committed"}


def database_error(exc: BaseException, into: type[E], what: str, *, write: bool,
                   details: dict[str, Any] | None = None) -> E:
    """``exc`` as the caller's error ``into``: ``"<what> (<reason>); <outcome>"``, ``certainty`` set on it and in
    ``details`` (for error classes that carry it only there), ``details["database_error"]`` the kind.

    Every PostgreSQL backend maps its failures through this one function, so
    the same failure reads the same in every domain. ``exc`` must be a
    database error (:func:`classify` not None); anything else is a bug and
    should propagate instead.
    """
    failure = classify(exc, write=write)
    if failure is None:
        failure = Failure("failed", "unknown" if write else "known", _reason(exc))
    extra = {**(details or {}), "certainty": failure.certainty, "database_error": failure.kind}
    hint = {"conflict": "; run it again", "unavailable": "; the next call reconnects"}.get(failure.kind, "")
    err = into(f"{what} ({failure.reason}); {_OUTCOME[failure.certainty]}{hint}", details=extra)
    if isinstance(err, PersistenceError):
        err.certainty = failure.certainty
    return err


# -- the pool ---------------------------------------------------------------------------------------------------------

async def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 10.0,
                    unavailable: type[OpenFunctionsError] = DatabaseUnavailable) -> Any:
    """An opened ``AsyncConnectionPool`` of autocommit connections (:class:`DatabaseUnavailable`, or the caller's
    ``unavailable`` class, when it cannot connect within ``timeout`` seconds)."""
    _, psycopg_pool = load_psycopg()
    if not isinstance(dsn, str) or not dsn:
        raise unavailable("a PostgreSQL DSN (postgresql://...) is required")
    pool = psycopg_pool.AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, timeout=timeout, open=False,
        kwargs={"autocommit": True}, name="openfunctions",
    )
    try:
        await pool.open(wait=True, timeout=timeout)
    except Exception as exc:
        await pool.close()
        why = await _why_unreachable(dsn) or str(exc)
        raise unavailable(f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {why}") from None
    return pool


async def _why_unreachable(dsn: str) -> str | None:
    """The driver's own reason a connection fails ("Connection refused", "password authentication failed ..."):
    the pool, which retried until its timeout, only says it gave up. One attempt, bounded; the first line of the
    error, with the DSN and its password taken out. ``None`` if this attempt connects (the failure was passing)."""
    psycopg, _ = load_psycopg()
    try:
        with anyio.fail_after(5):
            conn = await psycopg.AsyncConnection.connect(dsn, connect_timeout=3)
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else exc.__class__.__name__
        return redact_dsn_in(text.removeprefix("connection failed: "), dsn)
    await conn.close()
    return None


async def drop_dead_connections(pool: Any) -> None:
    """After a connection failed: have the pool check its idle connections (a restarted server breaks them all).

    Bounded (5 s) and never raising: the caller reports its own failure; the pool reconnects on the next loan.
    """
    if pool is None:
        return
    with anyio.move_on_after(5):
        try:
            await pool.check()
        except Exception:
            pass


@asynccontextmanager
async def connection_or(pool: Any, connection: Any, fail: Callable[[BaseException], Exception]) -> AsyncIterator[Any]:
    """Enter ``connection`` (a pooled connection's context manager); a database error in the block (one
    :func:`classify` reads) raises ``fail(exc)`` instead, after the pool drops its dead connections.

    The one shape of every PostgreSQL backend's call: each names its own error (``fail``, usually a
    :func:`database_error`); an error that is not the database's (a bug, a domain error) passes through.
    """
    try:
        async with connection as conn:
            yield conn
    except Exception as exc:
        if isinstance(exc, OpenFunctionsError) or classify(exc, write=False) is None:
            raise
        await drop_dead_connections(pool)
        raise fail(exc) from None


def advisory_key(text: str) -> int:
    """A 64-bit advisory lock key for ``text`` (the first 8 bytes of its SHA-256, signed as PostgreSQL's bigint)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def distinct_spaces(dsn: str, table: str, column_sql: str) -> list[str]:
    """The values of ``column_sql`` in ``table``, sorted (none if ``table`` does not exist yet).

    For the ``list_*_spaces`` helpers of the components: a database where a
    component was never migrated simply has no spaces of it. ``table`` and
    ``column_sql`` are code constants, never caller input.
    """
    psycopg, _ = load_psycopg()
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
            return []
        return [r[0] for r in conn.execute(f"SELECT {column_sql} FROM {table} ORDER BY space")]


# -- rows over a pool, and a process's liveness -----------------------------------------------------------------------

class PgRows:
    """A backend over a connection pool: :meth:`_run` is one statement, its failure an :attr:`error` (the
    domain's own class, through :func:`database_error`) naming :attr:`what` and the database."""

    what = "rows"  # what the rows are, for error messages ("tasks", "run records", ...)
    error: type[OpenFunctionsError] = DatabaseUnavailable

    def __init__(self, dsn: str, pool: Any, owns_pool: bool) -> None:
        self.pool = pool
        self.where = redact_dsn(dsn)
        self._dsn = dsn
        self._owns_pool = owns_pool
        self._psycopg, _ = load_psycopg()

    async def _run(self, sql: str, params: tuple[Any, ...], *, fetch: bool = False, write: bool = True) -> Any:
        """One statement (autocommit): its rows (``fetch``) or its row count. ``write``: it may change rows (then
        a lost connection leaves the outcome ``unknown``)."""
        def fail(exc: BaseException) -> Exception:
            return database_error(exc, self.error, f"{self.what} in PostgreSQL at {self.where} failed", write=write)

        async with connection_or(self.pool, self.pool.connection(), fail) as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if fetch else cur.rowcount

    async def _close_pool(self) -> None:
        if self._owns_pool:
            await self.pool.close()


class PgKeyedRows(PgRows):
    """A component's record table over a pool, its keys shared by replicas (a ``"serial"`` table): the one
    guard and read of the agent runs and the MCP tasks, whose writes all go through a key's :meth:`table`.

    Each key has a row in the component's own table (:attr:`head`: its name, the column naming the log a key
    belongs to, whose value is :attr:`partition`, and the flag of a key that takes no more records). A read
    sees only this log's keys. Every append is guarded (:meth:`_guard`), in its one statement: a new key's
    first record inserts the head row (``create``); a batch holding the :attr:`last` record type sets the
    flag (only the first such batch of a key is written); any other batch is written only while the flag is
    unset, except one of :attr:`after_end` types only (a run's claims), written while the key is this log's."""

    spec: RecordTableSpec
    head: tuple[str, str, str]  # (table, partition column, "ended" flag column)
    partition: str
    refused: type[OpenFunctionsError]
    refusal = "its guard refused the write"
    #: the record type that ends a key
    last: str = ""
    #: record types a key still takes after it ended
    after_end: frozenset[str] = frozenset()

    def _guard(self, key: str, rows: Sequence[TableRow]) -> Guard:
        table, part, ended = self.head
        this = f"{self.spec.key} = %s AND {part} = %s"
        if any(r.type == self.last for r in rows):
            return (f"UPDATE {table} SET {ended} = true WHERE {this} AND NOT {ended} RETURNING {self.spec.key}",
                    (key, self.partition))
        open_ = "" if all(r.type in self.after_end for r in rows) else f" AND NOT {ended}"
        return f"SELECT {self.spec.key} FROM {table} WHERE {this}{open_}", (key, self.partition)

    def _scope(self, key: str) -> Guard:
        table, part, _ = self.head
        return f"AND EXISTS (SELECT 1 FROM {table} WHERE {self.spec.key} = %s AND {part} = %s)", (key, self.partition)

    async def rows(self, key: str) -> list[TableRow]:
        """The key's rows in seq order (``[]``: none, or not this component's)."""
        scope, params = self._scope(key)
        rows = await self._run(self.spec.select(scope), (key, *params), fetch=True, write=False)
        return decode_rows(rows, f"{self.where} ({self.spec.key} {key})")

    async def records(self, key: str) -> list[Pair]:
        """The key's records ``(type, data)`` in order."""
        return [(r.type, r.data) for r in await self.rows(key)]

    def _table(self, key: str, rows: Sequence[TableRow], create: Guard | None) -> PgKeyTable:
        table = PgKeyTable(self.spec, key, rows, where=f"{self.where} ({self.spec.key} {key})",
                           connection=self.pool.connection, refused=self.refused, unavailable=self.error,
                           refusal=self.refusal)
        # a new key's appends carry ``create`` until one is written (a serial table's seq is then above 0)
        table.guard = lambda batch: create if create is not None and table.last_seq == 0 else self._guard(key, batch)
        return table

    async def table(self, key: str, *, create: Guard | None = None) -> PgKeyTable:
        """The key's rows as a :class:`~openfunctions.core.records.RecordTable`, read now:
        ``TableRecordLog(stream, table, table.records)`` is the key's live fold. ``create``: a new key (nothing is
        read): its first append carries this guard instead, the head row's ``INSERT ... RETURNING`` key."""
        return self._table(key, [] if create is not None else await self.rows(key), create)

    async def write(self, key: str, record: Pair, *, create: Guard | None = None) -> bool:
        """``record`` as the key's next row through its table (nothing read, nothing folded); ``False``: the
        guard refused it (nothing written). A write that failed raises (``error``, or ``refused`` when known)."""
        table = self._table(key, [], create)
        try:
            await table.append_many([record])
        except self.refused:
            if table.failed:
                raise
            return False
        return True


T = TypeVar("T")


async def open_checked(dsn: str, component: str, make: Callable[[Any, bool], T], *, pool: Any, max_connections: int,
                       timeout: float, then: Callable[[T], Awaitable[None]] | None = None,
                       close: Callable[[T], Awaitable[None]],
                       unavailable: type[OpenFunctionsError] = DatabaseUnavailable) -> T:
    """``make(pool, owns_pool)`` on ``pool`` (or a new one), after refusing a ``component`` schema not this
    code's; then ``then(made)``. A failure closes what was made."""
    owns = pool is None
    if pool is None:
        pool = await open_pool(dsn, max_size=max_connections, timeout=timeout, unavailable=unavailable)
    made = make(pool, owns)
    try:
        async with pool.connection() as conn:
            await check_schema(conn, component, where=redact_dsn(dsn))
        if then is not None:
            await then(made)
    except BaseException:
        await close(made)
        raise
    return made


class PgInstance:
    """This process's registration under ``scope``: a row of ``of_journal_instances`` and a lock held for life.

    The database's equivalent of a journal file's ``flock``, which dies with
    the process (or its connection): the process holds a session advisory lock
    on a dedicated connection; another process that can take that lock knows
    the instance is dead. :meth:`recover_dead` hands each dead instance of a
    scope to a settle callback while holding its lock, then deletes its row.
    The execution journal (scope: the profile) and the agent run records
    (scope ``runs:<space>``) use this one mechanism; MCP tasks carry the
    journal's instance and become orphans once its row is gone. (The table is
    the ``journal`` component's: ``store/_pg_journal_schema.py``.)
    """

    def __init__(self, dsn: str, scope: str) -> None:
        self.dsn = dsn
        self.scope = scope
        self.instance: str | None = None
        self.lock_conn: Any = None
        self._psycopg, _ = load_psycopg()
        self._registering = asyncio.Lock()  # concurrent first users register once between them

    async def register(self) -> str:
        """A new instance id (dropping a previous registration's lock connection, if any)."""
        if self.lock_conn is not None:
            try:
                await self.lock_conn.close()
            except Exception:
                pass
        conn = await self._psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        instance = new_id("inst")
        key = int.from_bytes(os.urandom(8), "big", signed=True)
        await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        await conn.execute(
            "INSERT INTO of_journal_instances (instance, journal, lock_key, host, pid) VALUES (%s, %s, %s, %s, %s)",
            (instance, self.scope, key, socket.gethostname(), os.getpid()))
        self.lock_conn, self.instance = conn, instance
        return instance

    async def ensure(self) -> str:
        """This process's instance id, registering first if there is none (or the database forgot it)."""
        async with self._registering:
            if self.instance is None:
                await self.register()
        assert self.instance is not None
        return self.instance

    async def recover_dead(self, pool: Any, settle: Callable[[str], Awaitable[None]]) -> int:
        """``settle(instance)`` for each dead instance of the scope, its lock held; then its row goes. How many.

        An instance settled by another process meanwhile is skipped; a
        ``settle`` that raises leaves the row (the next sweep tries again).
        """
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT instance, lock_key FROM of_journal_instances WHERE journal = %s AND instance <> %s",
                (self.scope, self.instance or ""))
            others = await cur.fetchall()
        done = 0
        for instance, key in others:
            cur = await self.lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            if not (await cur.fetchone())[0]:
                continue  # alive
            try:
                async with pool.connection() as conn:
                    cur = await conn.execute("SELECT 1 FROM of_journal_instances WHERE instance = %s", (instance,))
                    if await cur.fetchone() is None:
                        continue  # another process recovered it meanwhile
                await settle(instance)
                async with pool.connection() as conn:
                    await conn.execute("DELETE FROM of_journal_instances WHERE instance = %s", (instance,))
                done += 1
            finally:
                await self.lock_conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return done

    async def close(self, pool: Any) -> None:
        """A clean exit: the row goes with the lock (nothing of this process is left unsettled)."""
        if self.lock_conn is None:
            return
        try:
            async with pool.connection() as conn:
                await conn.execute("DELETE FROM of_journal_instances WHERE instance = %s", (self.instance,))
        except Exception:
            pass
        await self.lock_conn.close()
        self.lock_conn = None


# -- schema versions --------------------------------------------------------------------------------------------------

_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('openfunctions.schema'))"
_SCHEMA_TABLE = ("CREATE TABLE IF NOT EXISTS of_schema (component text PRIMARY KEY, version integer NOT NULL, "
                 "migrated_at timestamptz NOT NULL DEFAULT now())")
_HAS_SCHEMA = "SELECT to_regclass('of_schema') IS NOT NULL"
_VERSION = "SELECT coalesce((SELECT version FROM of_schema WHERE component = %s), 0)"


async def apply_migrations(conn: Any, component: str, migrations: Sequence[Sequence[str]]) -> int:
    """Bring ``component``'s schema to ``len(migrations)`` inside one transaction; the version found before.

    Creates ``of_schema`` if absent. Holds an advisory lock for the
    transaction, so concurrent migrators wait and then find the work done.
    Raises :class:`SchemaTooNew` if the database is ahead of this code.
    """
    async with conn.transaction():
        await conn.execute(_SCHEMA_LOCK)
        await conn.execute(_SCHEMA_TABLE)
        cur = await conn.execute("SELECT version FROM of_schema WHERE component = %s", (component,))
        row = await cur.fetchone()
        found = int(row[0]) if row else 0
        if found > len(migrations):
            raise SchemaTooNew(
                f"the database's {component!r} schema is version {found}; this code knows up to {len(migrations)}: "
                "upgrade openfunctions-mcp (refusing to guess at a newer schema)",
                details={"component": component, "found": found, "known": len(migrations)},
            )
        for step in migrations[found:]:
            for sql in step:
                await conn.execute(sql)
        if found < len(migrations):
            await conn.execute(
                "INSERT INTO of_schema (component, version) VALUES (%s, %s) ON CONFLICT (component) "
                "DO UPDATE SET version = EXCLUDED.version, migrated_at = now()",
                (component, len(migrations)),
            )
        return found


async def schema_version(conn: Any, component: str) -> int:
    """``component``'s schema version in the database (0: none yet)."""
    if not (await (await conn.execute(_HAS_SCHEMA)).fetchone())[0]:
        return 0
    return int((await (await conn.execute(_VERSION, (component,))).fetchone())[0])


def schema_version_sync(conn: Any, component: str) -> int:
    """:func:`schema_version` on a synchronous connection (lock-free command-line readers)."""
    if not conn.execute(_HAS_SCHEMA).fetchone()[0]:
        return 0
    return int(conn.execute(_VERSION, (component,)).fetchone()[0])


def schema_problem(component: str, found: int, *, where: str = "the database") -> DatabaseError | None:
    """The refusal (with both versions and the command to run) of a ``component`` schema at version ``found``
    other than this code's, or None: the one wording every component's check uses."""
    known = len(migrations_of(component))
    details = {"component": component, "found": found, "known": known}
    if found < known:
        return SchemaOutOfDate(
            f"the {component} schema in {where} is version {found}; this code needs version {known}: run "
            f"`openfunctions-mcp db migrate --database <url>` (with the new code) and start the server again",
            details=details)
    if found > known:
        return SchemaTooNew(
            f"the {component} schema in {where} is version {found}; this code knows up to version {known}: "
            "upgrade openfunctions-mcp on this machine (every replica must run the same release)", details=details)
    return None


async def check_schema(conn: Any, component: str, *, where: str = "the database") -> int:
    """Refuse (:func:`schema_problem`) a ``component`` schema other than this code's; return its version."""
    found = await schema_version(conn, component)
    problem = schema_problem(component, found, where=where)
    if problem is not None:
        raise problem
    return found


async def check_encoding(conn: Any) -> None:
    cur = await conn.execute("SHOW server_encoding")
    enc = (await cur.fetchone())[0]
    if enc.upper() not in ("UTF8", "UTF-8"):
        raise DatabaseError(f"the database's encoding is {enc}; openfunctions needs a UTF8 database "
                            "(CREATE DATABASE ... ENCODING 'UTF8')", details={"encoding": enc})


# -- components -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Component:
    """One versioned part of the shared schema: where its migration list and its ``db verify`` audit live.

    ``migrations``: ``"module:attribute"``, a list of steps (each a sequence of
    SQL statements). ``verify``: ``"module:function"`` or None; the function
    takes the DSN and returns ``[(subject, problems, what was checked)]``, one
    entry per space it found (an empty ``problems``: fine). ``at_open``: the
    component's own code also applies its migrations when it opens (the
    key-value store: one process's data, no replicas of two releases sharing
    rows), so ``db status`` counts only a newer version against it.
    """

    name: str
    migrations: str
    verify: str | None = None
    at_open: bool = False


#: Every component ``db migrate`` applies, in this order (the journal first: the others' rows may name its instances).
COMPONENTS: tuple[Component, ...] = (
    Component("journal", "openfunctions.store._pg_journal_schema:MIGRATIONS"),  # execution journals, instances
    Component("tasks", "openfunctions.servers._pg_tasks:MIGRATIONS"),  # MCP tasks shared by replicas
    Component("work", "openfunctions.work._pg_schema:MIGRATIONS",  # work lease, attempts, grants, inbox
              verify="openfunctions.work._pg:verify_pg_work_spaces"),
    Component("artifacts", "openfunctions.store._pg_artifacts:MIGRATIONS"),  # artifact index and blobs
    Component("runs", "openfunctions.agents._pg_runs:MIGRATIONS"),  # agents' run records
    Component("workflows", "openfunctions.workflows._pg_schema:MIGRATIONS",  # durable workflow runs
              verify="openfunctions.workflows._pg:verify_pg_workflow_spaces"),
    Component("store", "openfunctions.store._pg:MIGRATIONS", at_open=True),  # the key-value store's entries
    Component("rag", "openfunctions.rag._pg_schema:MIGRATIONS", at_open=True,  # pgvector RAG indexes (and docs)
              verify="openfunctions.rag._pg_schema:verify_pg_rag_indexes"),
)


def component(name: str) -> Component:
    found = next((c for c in COMPONENTS if c.name == name), None)
    if found is None:
        raise KeyError(f"no PostgreSQL schema component {name!r}; known: {', '.join(c.name for c in COMPONENTS)}")
    return found


def _resolve(spec: str) -> Any:
    return import_spec(spec, default_attr="MIGRATIONS", what="PostgreSQL schema component")


def migrations_of(name: str) -> Sequence[Sequence[str]]:
    """The migration list of component ``name``."""
    steps: Sequence[Sequence[str]] = _resolve(component(name).migrations)
    return steps


def verifier_of(name: str) -> Callable[[str], list[tuple[str, list[str], str]]] | None:
    """Component ``name``'s ``db verify`` audit, or None when it has none."""
    spec = component(name).verify
    if spec is None:
        return None
    audit: Callable[[str], list[tuple[str, list[str], str]]] = _resolve(spec)
    return audit


async def migrate_components(dsn: str) -> dict[str, tuple[int, int]]:
    """Apply every component's migrations (after the encoding check); component -> (version before, after)."""
    psycopg, _ = load_psycopg()
    out: dict[str, tuple[int, int]] = {}
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await check_encoding(conn)
            for c in COMPONENTS:
                migrations = migrations_of(c.name)
                found = await apply_migrations(conn, c.name, migrations)
                out[c.name] = (found, max(found, len(migrations)))
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {exc}") from None
    return out


__all__ = [
    "Guard", "PgKeyTable", "PgKeyedRows", "RecordTableSpec", "TableRow", "decode_rows", "read_rows", "stamp",
    "COMPONENTS", "Certainty", "Component", "DatabaseError", "DatabaseUnavailable", "Failure", "PgInstance", "PgRows",
    "SchemaOutOfDate", "open_checked",
    "SchemaTooNew", "advisory_key", "apply_migrations", "check_encoding", "check_schema", "classify", "component",
    "connection_or", "database_error", "distinct_spaces", "drop_dead_connections", "load_psycopg",
    "migrate_components", "migrations_of", "open_pool", "schema_problem", "schema_version", "schema_version_sync",
    "verifier_of",
]
