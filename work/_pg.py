"""The work controller's durable state in PostgreSQL: lease, attempt records, grants, shared by server replicas.

It implements the three interfaces of ``openfunctions.work`` (``LeaseBackend``,
``AttemptLog``, ``GrantBackend``; see ``work/_backend.py``) over rows, and
:func:`open_pg_work` bundles them as a ``WorkBackend`` with ``shared = True``:
each controller takes the lease for one lifecycle call and gives it back, so
an attempt started through one replica continues through another. ``serve
--database`` (``servers/_work_database.py``) and ``grant|work --database``
(``work/cli.py``) open it. The plumbing (pool, schema check, error reading) is
``openfunctions.core.postgres``'s; what lives in other packages' tables (the
execution journals' receipts, the artifact store) is passed in by the caller
(``receipts=``, ``artifacts=``): work sits beside the store package, never on it.

Schema (component ``"work"`` in ``of_schema``; migrations in
``work/_pg_schema.py``, applied only by ``openfunctions-mcp db migrate``)::

    of_work_leases(                 -- one row per work space (default "work"); the lease AND the log's head
        space      text PRIMARY KEY,
        owner      text,            -- the holder's owner id ("own_" + 26 base32), null before the first lease
        generation bigint,          -- +1 on every acquisition (takeover, or the next call); never reused
        expires_at double precision,-- POSIX seconds after which the lease is free; 0 after a release
        ttl        double precision,-- seconds each renewal adds
        acquired_at, renewed_at text,   -- RFC 3339 UTC (diagnostics)
        host text, pid integer,     -- the holder (diagnostics only; never used for liveness)
        last_seq   bigint,          -- the seq of the space's newest attempt record (0: none)
        alive_key  bigint)          -- migration 3: the key of the session advisory lock the holder's process
                                    -- keeps while it lives (null: a holder without one: wait for expiry)
    of_work_records(                -- the attempt journal: one row per record, PRIMARY KEY (space, seq); the one
                                    -- record-table layout (core/_pg_records.py, seq "fence") plus generation
        space text, seq bigint,     -- 1, 2, 3, ... no gap: assigned as last_seq + 1 under the lease row's lock
        generation bigint,          -- the lease generation that wrote it (= data.lease_generation)
        type text, time text,       -- the record type (work/_records.py's table) and RFC 3339 UTC time
        data text)                  -- canonical JSON of the record's data (docs/formats/work-attempts.md)
    of_work_grants(                 -- one row per grant, PRIMARY KEY (space, grant_id)
        space text, grant_id text,
        ord bigint IDENTITY,        -- issue order
        principal text,
        record text,                -- canonical JSON of Grant.to_record() (docs/formats/work-grants.md)
        revoked_at text, revoked_by text)   -- null until the first revocation (later ones change nothing)
    of_work_resolutions(            -- the operator's inbox (``work resolve --database``), migration 2; the one
        space text, seq bigint IDENTITY,    -- record-table layout (core/_pg_records.py, seq "serial"): one order for
        type text,                  -- every replica, a seq a controller copied is skipped by the others;
        time text,                  -- migration 4: RFC 3339 UTC ("" for rows written before it)
        data text)                  -- type "resolve", data as work/_resolutions.py (the RESOLUTIONS stream)

Promises:

- **A lease is a row.** ``acquire`` is one upsert that takes a free,
  released or expired lease with ``generation + 1``; a live lease of another
  owner is refused (``LeaseHeld``) — unless its holder's process is gone.
  Expiry compares against the database's clock (``clock_timestamp()``), one
  clock for every machine; a test may pass its own clock.
- **A dead holder is taken over at once** (what ``live.<generation>``'s
  flock does for the file lease): a process that takes a lease first takes a
  session advisory lock (key ``alive_key``, from its space and owner id) on a
  connection of its own, kept for its life. PostgreSQL drops the lock when
  that session ends — the process died, or its connection was cut. A live
  lease whose ``alive_key`` lock is free is taken over with ``generation + 1``
  (guarded by the owner and generation seen); a holder still alive but
  unresponsive keeps its session and is taken over only after expiry. A
  holder cut off from the database but alive is fenced like any stale holder:
  its appends are refused.
- **Every attempt write is fenced by the generation in the same
  transaction**: the append is one statement (one transaction): an UPDATE
  of the lease row that moves ``last_seq`` only where owner, generation and
  expiry still match (it takes the row lock; a takeover committed meanwhile
  is seen, READ COMMITTED re-checks the newest row version), and the INSERT
  of the record with that ``seq`` only if the UPDATE matched. A stale or expired holder's write is refused
  with ``LeaseLost`` and nothing is written; since a takeover needs the same
  row lock, a write either committed before the takeover (the new holder
  reads it) or is refused.
- **A lost connection mid-append** raises ``BackendUnavailable`` (code
  ``work_backend_unavailable``, ``certainty: unknown``): the commit may or may
  not have happened; the next reader folds whatever is in the table.
- **Grants are rows**; a check reads them at every call (a revocation on
  any machine counts at the next check), and the completion fence's
  ``load_sync`` reads them on its own synchronous connection.
- **Recovery reads the execution journals**: an operation interrupted after
  its call settled (the receipt committed, the outcome record not) is settled
  from the receipt, as the file controller does from ``<data-dir>/journal``
  (:class:`PgSettledReceipts`: every journal in the database, read through
  the ``receipts=`` reader, ``store/_pg_journal.py``'s public one when served).
- **Work artifacts** (``pg_work_backend(..., artifacts=<opener>)``, what ``serve
  --database`` builds): previews, command output and reply projections go to
  the database's artifact store :func:`work_artifact_store_name` (``"work:" +
  space``; tables and promises at the top of ``store/_pg_artifacts.py``), on
  the backend's pool: the same quota (64 MiB), digest and scope rules as
  ``<data-dir>/work/artifacts``, and an id minted through one replica reads
  through ``of_work_artifact_read`` on any other. Its schema (component
  ``artifacts``) is checked when the backend opens.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as _dt
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn

import structlog

from openfunctions.core import OpenFunctionsError, canonical_json, new_id, redact_dsn, utc_timestamp
from openfunctions.core.journal import Record
from openfunctions.core.postgres import (
    PgKeyTable,
    RecordTableSpec,
    advisory_key,
    check_schema,
    connection_or,
    database_error,
    decode_rows,
    distinct_spaces,
    drop_dead_connections,
    migrate_components,
    open_pool,
    read_rows,
    stamp,
)
from openfunctions.core.postgres import load_psycopg as _psycopg
from openfunctions.core.records import TableRecordLog

from ._pg_schema import COMPONENT

log = structlog.get_logger("openfunctions.work.pg")

DEFAULT_SPACE = "work"
#: The attempt records: the one record-table layout plus ``generation``, each seq assigned by the lease row's fence.
ATTEMPTS_TABLE = RecordTableSpec("of_work_records", "space", seq="fence", extra=("generation",))
#: The resolution inbox's table: the one record-table layout, key ``space``; seq from its identity (many operators).
RESOLUTIONS_TABLE = RecordTableSpec("of_work_resolutions", "space", seq="serial")


def _work() -> Any:
    import openfunctions.work as work

    return work


class _Pg:
    """What the three share: the pool, the space, the clock, and one way to run a transaction."""

    def __init__(self, dsn: str, pool: Any, space: str, clock: Callable[[], float] | None, *, max_connections: int = 4,
                 timeout: float = 10.0, artifact_quota: int | None = None,
                 open_artifacts: Callable[..., Awaitable[Any]] | None = None) -> None:
        self.dsn = dsn
        self.pool = pool
        self.owns_pool = pool is None
        self.space = space
        self.clock = clock
        self.where = f"{redact_dsn(dsn)} (work space {space!r})"
        self.psycopg, _ = _psycopg()
        self._limits = (max_connections, timeout)
        self._checked = False
        self._lock = asyncio.Lock()
        self._sync: Any = None
        # owner -> the connection holding that owner's liveness lock (the process's life)
        self.alive: dict[str, Any] = {}
        # None: no artifact store; else its quota (bytes), opened on the pool by ready()
        self.artifact_quota = artifact_quota
        self.open_artifacts = open_artifacts  # (dsn, name, *, quota_bytes, pool) -> an opened artifact store
        self.artifacts: Any = None

    async def ready(self) -> None:
        """Open the pool and check the schema once (``SchemaOutOfDate`` / ``SchemaTooNew``: nothing is used)."""
        if self._checked:
            return
        async with self._lock:
            if self._checked:
                return
            if self.pool is None:
                self.pool = await open_pool(self.dsn, max_size=self._limits[0], timeout=self._limits[1],
                                            unavailable=_work().BackendUnavailable)
            async with self.pool.connection() as conn:
                await check_work_schema(conn, where=self.where)
            if self.open_artifacts is not None and self.artifact_quota is not None and self.artifacts is None:
                self.artifacts = await self.open_artifacts(  # checks the artifacts schema; shares the pool
                    self.dsn, work_artifact_store_name(self.space), quota_bytes=self.artifact_quota, pool=self.pool)
            self._checked = True

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        await self.ready()
        async with self.pool.connection() as conn:
            yield conn

    async def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None
        self.artifacts = None  # on this pool: nothing of its own to close
        for conn in self.alive.values():
            with contextlib.suppress(Exception):
                await conn.close()
        self.alive.clear()
        if self.owns_pool and self.pool is not None:
            pool, self.pool = self.pool, None
            self._checked = False
            await pool.close()

    def query_sync(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Rows of one query on this process's synchronous connection (reconnects once; for callers that may not await)."""
        for attempt in (1, 2):
            try:
                if self._sync is None or self._sync.closed:
                    self._sync = self.psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
                return list(self._sync.execute(sql, params).fetchall())
            except self.psycopg.OperationalError as exc:
                if self._sync is not None:
                    self._sync.close()
                self._sync = None
                if attempt == 2:
                    raise self.unavailable("cannot read the work space", exc) from None
        return []

    @contextlib.asynccontextmanager
    async def using(self, what: str, *, certainty: str = "known") -> AsyncIterator[Any]:
        """A pooled connection; any database error in the block -> ``BackendUnavailable`` naming ``what``
        (``certainty="unknown"`` for a write that may have committed), after the pool is told."""
        # self.pool is None only before the first ready(): a pool that ready() opens then is fresh, nothing to drop
        async with connection_or(self.pool, self.connection(),
                                 lambda exc: self.unavailable(what, exc, certainty=certainty)) as conn:
            yield conn

    def alive_key(self, owner: str) -> int:
        """The advisory lock key of ``owner``'s liveness in this space (64 bits of SHA-256)."""
        return advisory_key(f"of_work_alive:{self.space}:{owner}")

    async def hold_alive(self, owner: str) -> int:
        """``owner``'s liveness lock, held on a connection of its own until :meth:`close`; checked at each call
        (a session the database cut — a partition — is opened and locked again).

        Bounded by the backend's ``timeout``: the check, the connect and the lock
        wait. An old session of ours the server has not dropped yet (a partition
        it did not notice) still holds the key: the lock then fails with
        ``lock_timeout`` (a ``BackendUnavailable`` from the caller) instead of
        waiting for as long as that session lives."""
        key = self.alive_key(owner)
        conn = self.alive.get(owner)
        if conn is not None and not conn.closed:
            try:  # one round trip: a session the database cut would let others take us for dead
                await asyncio.wait_for(conn.execute("SELECT 1"), self.timeout)
                return key
            except (self.psycopg.Error, TimeoutError):
                with contextlib.suppress(Exception):
                    await conn.close()
            self.alive.pop(owner, None)
        conn = await self.psycopg.AsyncConnection.connect(self.dsn, autocommit=True,
                                                          connect_timeout=max(1, int(self.timeout)))
        try:
            await conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(self.timeout * 1000)}ms",))
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except BaseException:
            await conn.close()
            raise
        self.alive[owner] = conn
        return key

    def now_param(self) -> float | None:
        return None if self.clock is None else float(self.clock())

    def unavailable(self, what: str, exc: BaseException, *, certainty: str = "known") -> Exception:
        """``BackendUnavailable`` (``details['certainty']``): ``certainty="unknown"`` for a write that may have committed."""
        err: Exception = database_error(exc, _work().BackendUnavailable, f"{what}: PostgreSQL at {self.where} failed",
                                        write=certainty == "unknown", details={"space": self.space})
        return err

    @property
    def timeout(self) -> float:
        """Seconds a call waits for a pooled connection (``pg_work_backend(timeout=)``)."""
        return self._limits[1]

    async def lost(self) -> None:
        """After a database error: the pool drops its dead connections (bounded; the package's one way)."""
        if self.pool is not None:
            await drop_dead_connections(self.pool)




def work_artifact_store_name(space: str) -> str:
    """The database artifact store of work space ``space`` (apart from ``of_artifact_read``'s ``"default"``,
    as ``<data-dir>/work/artifacts`` is apart from ``<data-dir>/artifacts``)."""
    return f"work:{space}"


class PgWorkArtifacts:
    """The work space's artifact store (``ArtifactStoreProtocol``), built before the pool exists, opened with it.

    Every call awaits the backend's ``ready()`` (pool open, schemas checked),
    then is the ``PgArtifactStore``'s own: same ids, quota, digest checks and
    scope records as the file store (``openfunctions.artifacts``' rules).
    """

    def __init__(self, pg: _Pg) -> None:
        self.pg = pg

    async def _store(self) -> Any:
        await self.pg.ready()
        return self.pg.artifacts

    async def put(self, data: Any, **options: Any) -> Any:
        return await (await self._store()).put(data, **options)

    async def stat(self, artifact_id: Any) -> Any:
        return await (await self._store()).stat(artifact_id)

    async def read(self, artifact_id: Any, *args: Any, **options: Any) -> Any:
        return await (await self._store()).read(artifact_id, *args, **options)

    async def read_all(self, artifact_id: Any) -> bytes:
        return await (await self._store()).read_all(artifact_id)  # type: ignore[no-any-return]

    async def usage(self) -> dict[str, int]:
        return dict(await (await self._store()).usage())

    def close(self) -> None:
        """Nothing of its own: the backend's ``aclose`` closes the pool."""


class PgSettledReceipts:
    """The execution journals' receipts by id (``WorkBackend.settled_receipts``), read at recovery.

    What ``<data-dir>/journal`` is to the file controller: every execution
    journal in this database (one per served profile, appended to by every
    replica), read with the ``read`` it is given (``store/_pg_journal.py``'s public
    ``settled_pg_receipts``, ``(pool, ids, *, timeout)``) on the work backend's pool (read-only: nothing is
    registered or written). A failure raises (the reader's own error,
    ``SchemaOutOfDate``, ``BackendUnavailable``): the controller then leaves the
    operations ``unknown``, never guesses.
    """

    def __init__(self, pg: _Pg, read: Callable[..., Awaitable[dict[str, dict[str, Any]]]]) -> None:
        self.pg = pg
        self.read = read

    async def __call__(self, ids: set[str]) -> dict[str, dict[str, Any]]:
        await self.pg.ready()
        try:  # one loan of the pool (the reader borrows it): holding another here could starve a small pool
            return await self.read(self.pg.pool, ids, timeout=self.pg.timeout)
        except OpenFunctionsError:  # the reader's own error (named, redacted): the pool drops its dead connections
            await self.pg.lost()
            raise
        except self.pg.psycopg.Error as exc:
            await self.pg.lost()
            raise self.pg.unavailable("cannot read the execution journals' receipts", exc) from None


class PgLeaseStore:
    """The lease of one work space as a row (``LeaseBackend``)."""

    def __init__(self, pg: _Pg, *, ttl: float, owner: str | None) -> None:
        if ttl <= 0:
            raise ValueError("lease ttl must be positive")
        self.pg = pg
        self.ttl = float(ttl)
        self.owner = owner or new_id("own")

    async def acquire(self) -> Any:
        """One statement: insert the row (generation 1), or take it over (generation + 1) only where it is free,
        released, expired or already ours; nothing returned -> a live holder (``LeaseHeld``, named from the row)."""
        work = _work()
        stamped = utc_timestamp()
        async with self.pg.using("cannot take the work lease") as conn:
            key = await self.pg.hold_alive(self.owner)  # before the row names us: we never hold it without it
            me = (self.owner, self.ttl, self.ttl, stamped, stamped, socket.gethostname(), os.getpid(), key)
            cur = await conn.execute(_ACQUIRE, (self.pg.space, *me, self.pg.now_param()))
            row = await cur.fetchone()
            held = None
            if row is None:
                cur = await conn.execute(_HELD, (self.pg.now_param(), self.pg.space))
                held = await cur.fetchone()
            if row is None and held is not None and held[6] is not None:
                cur = await conn.execute(_DEAD, (held[6], held[6]))
                if (await cur.fetchone())[0]:  # its liveness lock is free: the holder's process is gone
                    cur = await conn.execute(_TAKEOVER, (self.owner, self.pg.now_param(), *me[1:], self.pg.space,
                                                         held[0], held[1]))
                    row = await cur.fetchone()
                    if row is not None:
                        log.info("work_lease_taken_over_from_dead_holder", space=self.pg.space, owner=held[0],
                                 generation=held[1], host=held[4], pid=held[3])
        if row is None:
            owner, generation, expires_at, pid, host, now, _ = held or (None, 0, 0.0, None, None, 0.0, None)
            raise work.LeaseHeld(
                f"the work space {self.pg.space!r} is leased by owner {owner} ({host} pid {pid}, generation "
                f"{generation}) for {expires_at - now:.1f}s more; another controller is acting",
                details={"owner": owner, "generation": generation, "expires_at": expires_at, "pid": pid, "host": host},
            )
        return work.Lease(self.owner, int(row[0]), float(row[1]), self.ttl)

    def _fence(self, lease: Any, owner: Any, generation: Any, expires_at: float, now: float) -> None:
        """Refuse a stale or expired generation (the same words as the file lease's)."""
        work = _work()
        if owner != lease.owner or generation != lease.generation:
            raise work.LeaseLost(
                f"lease generation {lease.generation} is stale: owner {owner} holds generation {generation} now "
                "(taken over); this controller may record no effect",
                details={"generation": lease.generation, "current_generation": generation, "current_owner": owner},
            )
        if expires_at <= now:
            raise work.LeaseLost(
                f"lease generation {lease.generation} expired {now - expires_at:.1f}s ago; this controller may record no effect",
                details={"generation": lease.generation, "expired_at": expires_at},
            )

    async def refused(self, conn: Any, lease: Any, what: str) -> NoReturn:
        """A fenced statement matched no row: ``LeaseLost`` saying why (stale or expired), from the row as it is now."""
        cur = await conn.execute(_READ_ROW, (self.pg.now_param(), self.pg.space))
        found = await cur.fetchone()
        owner, generation, expires_at, now = found if found is not None else (None, None, 0.0, 0.0)
        self._fence(lease, owner, generation, expires_at, now)
        raise _work().LeaseLost(f"lease generation {lease.generation} {what}", details={"generation": lease.generation})

    async def renew(self, lease: Any) -> Any:
        async with self.pg.using("cannot renew the work lease") as conn:
            cur = await conn.execute(_RENEW, (self.pg.now_param(), utc_timestamp(), self.pg.space, lease.owner,
                                              lease.generation, self.pg.now_param()))
            row = await cur.fetchone()
            if row is None:  # never silently re-taken: stale or expired
                await self.refused(conn, lease, "could not be renewed")
        return _work().Lease(lease.owner, lease.generation, float(row[0]), lease.ttl)

    async def release(self, lease: Any) -> None:
        try:
            async with self.pg.using("cannot release the work lease") as conn:
                await conn.execute(
                    "UPDATE of_work_leases SET expires_at = 0, renewed_at = %s WHERE space = %s AND owner = %s AND generation = %s",
                    (utc_timestamp(), self.pg.space, lease.owner, lease.generation),
                )
        except _work().BackendUnavailable as exc:  # it expires by itself
            log.warning("work_lease_release_failed", error=exc.message)

    async def check(self, lease: Any) -> dict[str, Any]:
        """Whether ``lease`` is current now (a read, no lock: the fence that counts is the append's)."""
        async with self.pg.using("cannot read the work lease") as conn:
            cur = await conn.execute(_READ_ROW, (self.pg.now_param(), self.pg.space))
            row = await cur.fetchone()
        owner, generation, expires_at, now = row if row is not None else (None, None, 0.0, 0.0)
        self._fence(lease, owner, generation, expires_at, now)
        return {"owner": owner, "generation": generation, "expires_at": expires_at}

    def abandon(self) -> None:
        return None  # nothing held between calls: the row is the whole lease

    async def read(self) -> dict[str, Any] | None:
        """The lease row (diagnostics and tests), or None before the first lease."""
        async with self.pg.connection() as conn:
            cur = await conn.execute("SELECT owner, generation, expires_at, ttl, host, pid, last_seq FROM of_work_leases "
                                     "WHERE space = %s", (self.pg.space,))
            row = await cur.fetchone()
        if row is None:
            return None
        return dict(zip(("owner", "generation", "expires_at", "ttl", "host", "pid", "last_seq"), row, strict=True))


class PgAttemptLog:
    """The attempt journal as rows, every append fenced by the lease row (``AttemptLog``)."""

    def __init__(self, pg: _Pg, leases: PgLeaseStore) -> None:
        self.pg = pg
        self.leases = leases
        self.where = pg.where

    async def open(self, lease: Any) -> None:
        return None

    async def close(self) -> None:
        return None

    async def read(self, after: int = 0) -> list[Any]:
        async with self.pg.using("cannot read the attempt records") as conn:
            rows = await read_rows(conn, ATTEMPTS_TABLE, self.pg.space, self.where, ("AND seq > %s", (int(after),)))
        expect = int(after) + 1
        for row in rows:
            if row.seq != expect:  # the fence makes the seqs contiguous: a gap is damage, never guessed over
                raise _work().WorkError(f"attempt records of {self.pg.where}: expected seq {expect}, found {row.seq}; "
                                        "refusing to fold a journal with a gap", details={"seq": row.seq})
            expect += 1
        return [Record(*row) for row in rows]

    async def append(self, lease: Any, type_: str, data: dict[str, Any]) -> Any:
        """One statement, so one transaction: the fence (an UPDATE of the lease row) locks the row and moves
        ``last_seq`` only if ``lease`` is the current, unexpired generation (re-checked on the newest row version
        if a takeover committed meanwhile); the INSERT writes the record, with that seq, only if the fence did."""
        rows = stamp([(type_, data)])
        sql, params = ATTEMPTS_TABLE.insert(self.pg.space, rows, (_FENCE, (
            self.pg.space, lease.owner, lease.generation, self.pg.now_param())), (lease.generation,))
        async with self.pg.using(f"cannot append the attempt record {type_!r}", certainty="unknown") as conn:
            row = await (await conn.execute(sql, params)).fetchone()
            if row is None:  # fenced: nothing written
                await self.leases.refused(conn, lease, "may record no effect (the lease row refused it)")
        return Record(int(row[0]), type_, rows[0].time, json.loads(canonical_json(data)))


#: "now" in POSIX seconds: the caller's clock (a test's) if it passes one, else the database's (one for every replica)
_NOW = "COALESCE(%s::float8, extract(epoch from clock_timestamp())::float8)"
_ACQUIRE = (
    "INSERT INTO of_work_leases AS l (space, owner, generation, expires_at, ttl, acquired_at, renewed_at, host, pid, "
    "alive_key) SELECT %s, %s, 1, n.now + %s, %s, %s, %s, %s, %s, %s "
    f"FROM (SELECT {_NOW} AS now) n "
    "ON CONFLICT (space) DO UPDATE SET owner = EXCLUDED.owner, generation = l.generation + 1, "
    "expires_at = EXCLUDED.expires_at, ttl = EXCLUDED.ttl, acquired_at = EXCLUDED.acquired_at, "
    "renewed_at = EXCLUDED.renewed_at, host = EXCLUDED.host, pid = EXCLUDED.pid, alive_key = EXCLUDED.alive_key "
    "WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= EXCLUDED.expires_at - EXCLUDED.ttl "
    "RETURNING generation, expires_at"
)
#: The attempt records' fence: the lease row moves ``last_seq`` (the record's seq) only for its current holder.
_FENCE = ("UPDATE of_work_leases SET last_seq = last_seq + 1 WHERE space = %s AND owner = %s AND generation = %s "
          f"AND expires_at > {_NOW} RETURNING last_seq AS seq")
_READ_ROW = f"SELECT owner, generation, expires_at, {_NOW} FROM of_work_leases WHERE space = %s"
_HELD = f"SELECT owner, generation, expires_at, pid, host, {_NOW}, alive_key FROM of_work_leases WHERE space = %s"
#: true when nobody holds the advisory lock (taken and given back at once: a pooled session keeps nothing)
_DEAD = "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN pg_advisory_unlock(%s) ELSE false END"
#: a dead holder's live lease -> ours, generation + 1; only if it is still the owner and generation we saw
_TAKEOVER = (
    f"UPDATE of_work_leases SET owner = %s, generation = generation + 1, expires_at = {_NOW} + %s, ttl = %s, "
    "acquired_at = %s, renewed_at = %s, host = %s, pid = %s, alive_key = %s "
    "WHERE space = %s AND owner = %s AND generation = %s RETURNING generation, expires_at"
)
_RENEW = (
    f"UPDATE of_work_leases SET expires_at = {_NOW} + ttl, renewed_at = %s WHERE space = %s AND owner = %s "
    f"AND generation = %s AND expires_at > {_NOW} RETURNING expires_at"
)


class PgGrantStore:
    """Grants as rows (``GrantBackend``): issued by an operator, read at every check."""

    def __init__(self, pg: _Pg) -> None:
        self.pg = pg
        self.where = pg.where

    def _grant(self, grant_id: str, record: str, revoked_at: str | None, revoked_by: str | None) -> Any:
        work = _work()
        try:
            g = work.Grant.model_validate(json.loads(record))
            return g.revoked_copy(revoked_at, revoked_by) if revoked_at else g
        except (ValueError, TypeError) as exc:
            raise work.GrantStoreCorrupt(
                f"grant {grant_id!r} in {self.where} is not a valid grant record: {str(exc)[:300]}; refusing every grant "
                "until the operator repairs it", details={"grant_id": grant_id}) from None

    _SELECT = "SELECT grant_id, record, revoked_at, revoked_by FROM of_work_grants WHERE space = %s"

    async def _rows(self, where: str = "", args: Sequence[Any] = ()) -> list[Any]:
        async with self.pg.using("cannot read the grants") as conn:
            cur = await conn.execute(self._SELECT + where + " ORDER BY ord", (self.pg.space, *args))
            rows = await cur.fetchall()
        return [self._grant(*r) for r in rows]

    async def list(self) -> list[Any]:
        return await self._rows()

    async def get(self, grant_id: str) -> Any:
        found = await self._rows(" AND grant_id = %s", (grant_id,))
        if not found:
            raise _work().GrantNotFound(f"no grant {grant_id!r} in {self.where}", details={"grant_id": grant_id})
        return found[0]

    async def for_principal(self, principal: str) -> builtins.list[Any]:  # builtins: ``list`` is a method here
        return await self._rows(" AND principal = %s", (principal,))

    async def active_for(self, principal: str, now: _dt.datetime | None = None) -> builtins.list[Any]:
        t = now or _dt.datetime.now(_dt.UTC)
        return [g for g in await self.for_principal(principal) if g.active(t)]

    def load_sync(self) -> dict[str, Any]:
        """Every grant by id, read now on a synchronous connection (the completion fence awaits nothing)."""
        return {r[0]: self._grant(*r) for r in self.pg.query_sync(self._SELECT + " ORDER BY ord", (self.pg.space,))}

    async def issue(self, *, principal: str, steps: Sequence[str], paths: Sequence[str] = (), ttl: _dt.timedelta | None = None,
                    expires_at: _dt.datetime | None = None, issuer: str | None = None, catalog_digest: str | None = None,
                    now: _dt.datetime | None = None) -> Any:
        g = _work().Grant.new(principal=principal, steps=steps, paths=paths, ttl=ttl, expires_at=expires_at, issuer=issuer,
                              catalog_digest=catalog_digest, now=now)
        async with self.pg.using("cannot issue the grant", certainty="unknown") as conn:
            await conn.execute("INSERT INTO of_work_grants (space, grant_id, principal, record) VALUES (%s, %s, %s, %s)",
                               (self.pg.space, g.grant_id, g.principal, canonical_json(g.to_record())))
        return g

    async def revoke(self, grant_id: str, *, by: str | None = None, now: _dt.datetime | None = None) -> Any:
        g = await self.get(grant_id)
        if g.revoked_at is not None:
            return g
        revoked = g.revoked_copy(now or _dt.datetime.now(_dt.UTC), by or _default_issuer())
        async with self.pg.using("cannot revoke the grant", certainty="unknown") as conn:
            await conn.execute(  # the first revocation wins
                "UPDATE of_work_grants SET revoked_at = %s, revoked_by = %s WHERE space = %s AND grant_id = %s "
                "AND revoked_at IS NULL", (revoked.describe()["revoked_at"], revoked.revoked_by, self.pg.space, grant_id))
        return await self.get(grant_id)



class PgResolutionInbox:
    """The operator's inbox as rows (``ResolutionBackend``): one seq order for every replica.

    Its rows are the resolution stream's (``work/_resolutions.py``'s ``RESOLUTIONS``) on the one
    record-table layout (:data:`RESOLUTIONS_TABLE`), folded as the file inbox folds its journal: a
    record the stream refuses (an unknown type, an unfoldable ``resolve``, data that is not JSON)
    fails the read naming it, and ``resolve`` refuses to append to an inbox it cannot read."""

    def __init__(self, pg: _Pg) -> None:
        self.pg = pg
        self.where = pg.where

    def unchanged(self) -> bool:
        return False  # no cheap change signal: the controller reads the inbox (one indexed query) per lifecycle call

    def read(self) -> list[tuple[int, dict[str, Any]]]:
        """Every ``resolve`` record as ``(seq, data)``, folded by ``RESOLUTIONS``; raises the stream's error for
        a record it refuses."""
        from ._resolutions import RESOLUTIONS

        rows = self.pg.query_sync(RESOLUTIONS_TABLE.select(), (self.pg.space,))
        return list(RESOLUTIONS.fold(decode_rows(rows, self.where), where=self.where))

    async def resolve(self, operation_id: str, *, as_: str, reason: str, by: str) -> dict[str, Any]:
        """Append one resolution (committed once this returns), after folding the inbox (refusing one it cannot
        read, as the file inbox does): a ``TableRecordLog`` over the space's rows."""
        from ._resolutions import RESOLUTIONS, RESOLVE

        data = _work().resolve_record(operation_id, as_=as_, reason=reason, by=by)
        table = await self.table()
        inbox = TableRecordLog(RESOLUTIONS, table, table.records, where=self.where)
        try:
            rec = await inbox.append(RESOLVE, data)
        finally:
            await inbox.close()
        return {**data, "seq": rec.seq}

    async def table(self) -> PgKeyTable:
        """The space's inbox rows as a ``core.records.RecordTable``, read now (every operator appends to it)."""
        async with self.pg.using("cannot read the resolution inbox") as conn:
            rows = await read_rows(conn, RESOLUTIONS_TABLE, self.pg.space, self.where)
        unavailable = _work().BackendUnavailable
        return PgKeyTable(RESOLUTIONS_TABLE, self.pg.space, rows, where=self.where, connection=self.pg.connection,
                          refused=unavailable, unavailable=unavailable)


def _default_issuer() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return f"uid:{os.getuid()}"


async def check_work_schema(conn: Any, *, where: str = "the database") -> int:
    """Refuse a ``work`` schema other than this code's (older: run ``db migrate``; newer: upgrade)."""
    return await check_schema(conn, COMPONENT, where=where)


async def migrate_work(dsn: str) -> tuple[int, int]:
    """``db migrate`` (every component, after the database's encoding check: ``migrate_components``); the ``work``
    component's ``(version before, version after)``."""
    return (await migrate_components(dsn))[COMPONENT]


def pg_work_backend(dsn: str, space: str = DEFAULT_SPACE, *, ttl: float = 30.0, owner: str | None = None,
                    clock: Callable[[], float] | None = None, pool: Any = None, max_connections: int = 4,
                    timeout: float = 10.0, artifacts: Callable[..., Awaitable[Any]] | None = None,
                    artifact_quota: int | None = None,
                    receipts: Callable[..., Awaitable[dict[str, dict[str, Any]]]] | None = None) -> Any:
    """The ``WorkBackend`` of work space ``space`` in the database at ``dsn``, connected on first use.

    Built synchronously (a server builds its profile before its loop runs);
    ``await backend.aopen()`` (the controller does, the server does at start)
    opens the pool and checks the schema: older or newer than this code ->
    ``SchemaOutOfDate`` / ``SchemaTooNew`` (never migrated here). ``clock``:
    POSIX seconds for lease expiry (default: the database's clock, one for
    every replica). ``artifacts``: an artifact store opener ``(dsn, name, *,
    quota_bytes, pool)`` (``openfunctions.store.open_pg_artifact_store``): the
    work artifacts too (``backend.artifacts``, :class:`PgWorkArtifacts`; quota
    ``artifact_quota``, default 64 MiB), so every replica reads the ids any
    other minted. ``receipts``: the execution journals' receipt reader
    ``(pool, ids, *, timeout)`` (``openfunctions.store.settled_pg_receipts``)
    recovery settles interrupted operations from; None: recovery leaves them
    ``unknown`` for the operator. Close it with ``await backend.aclose()``.
    """
    from openfunctions.artifacts import DEFAULT_QUOTA_BYTES

    quota = (artifact_quota if artifact_quota is not None else DEFAULT_QUOTA_BYTES) if artifacts else None
    pg = _Pg(dsn, pool, space, clock, max_connections=max_connections, timeout=timeout, artifact_quota=quota,
             open_artifacts=artifacts)
    leases = PgLeaseStore(pg, ttl=ttl, owner=owner)
    grants = PgGrantStore(pg)

    return _work().WorkBackend(leases=leases, attempts=PgAttemptLog(pg, leases), grants=grants, shared=True,
                               close=pg.close, open=pg.ready, resolutions=PgResolutionInbox(pg),
                               artifacts=PgWorkArtifacts(pg) if artifacts else None,
                               settled_receipts=PgSettledReceipts(pg, receipts) if receipts else None)


async def open_pg_work(dsn: str, space: str = DEFAULT_SPACE, **options: Any) -> Any:
    """:func:`pg_work_backend`, opened (schema checked): refuses an older or newer schema at once."""
    backend = pg_work_backend(dsn, space, **options)
    try:
        await backend.aopen()
    except BaseException:
        await backend.aclose()
        raise
    return backend


def verify_pg_work(dsn: str, space: str = DEFAULT_SPACE) -> list[str]:
    """Problems in a work space's records (empty: fine): seq contiguous from 1 up to the lease row's last_seq,
    generations never going back and never past the lease's, every record's ``lease_generation`` its row's."""
    psycopg, _ = _psycopg()
    problems: list[str] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        head = conn.execute("SELECT generation, last_seq FROM of_work_leases WHERE space = %s", (space,)).fetchone()
        if head is None:
            return [f"work space {space!r}: no lease row"]
        expect, last_gen = 1, 0
        for seq, gen, data in conn.execute(
                "SELECT seq, generation, data FROM of_work_records WHERE space = %s ORDER BY seq", (space,)):
            if seq != expect:
                problems.append(f"seq {seq}: expected seq {expect}")
            if gen < last_gen:
                problems.append(f"seq {seq}: generation {gen} after generation {last_gen} (a stale write)")
            if gen > head[0]:
                problems.append(f"seq {seq}: generation {gen} is newer than the lease's {head[0]}")
            try:
                if json.loads(data).get("lease_generation") != gen:
                    problems.append(f"seq {seq}: data.lease_generation is not the row's generation {gen}")
            except ValueError:
                problems.append(f"seq {seq}: data is not JSON")
            expect, last_gen = seq + 1, max(last_gen, gen)
        if expect - 1 != head[1]:
            problems.append(f"the lease row's last_seq is {head[1]} but the last record is seq {expect - 1}")
    return problems


def list_pg_work_spaces(dsn: str) -> list[str]:
    """The work spaces that hold a lease row (none if the work schema is not there)."""
    return distinct_spaces(dsn, "of_work_leases", "space")


__all__ = ["pg_work_backend", "DEFAULT_SPACE", "PgAttemptLog", "PgGrantStore", "PgLeaseStore", "PgResolutionInbox",
           "PgSettledReceipts", "PgWorkArtifacts", "check_work_schema", "list_pg_work_spaces", "migrate_work", "open_pg_work",
           "verify_pg_work", "work_artifact_store_name"]


def verify_pg_work_spaces(dsn: str) -> list[tuple[str, list[str], str]]:
    """``db verify``'s audit of the work component (its entry in ``core.postgres.COMPONENTS``): every space."""
    return [(f"work space {space}", verify_pg_work(dsn, space),
             "seq contiguous, every record fenced by a generation that never went back")
            for space in list_pg_work_spaces(dsn)]
