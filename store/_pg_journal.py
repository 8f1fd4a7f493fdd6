"""The execution journal in PostgreSQL: an ``ExecutionObserver`` several server replicas share.

Schema (component ``"journal"`` in ``of_schema``, version 3; versioned migrations in
``store/_pg_journal_schema.py``, applied only by ``openfunctions-mcp db migrate``)::

    of_journals(                         -- one row per journal (a server profile: "tools", "work", ...)
        name      text COLLATE "C" PRIMARY KEY,
        header    text)                  -- canonical JSON, the same object as a journal file's line 1
                                         -- (format, version 2, journal_id, kind "execution", created, meta, salt)
    of_journal_streams(                  -- one per server instance that appended (a partition of the journal)
        journal   text, stream text,     -- PRIMARY KEY (journal, stream); stream = the instance id that owns it
                                         -- ("inst_" + 32 hex), or '' (the legacy stream: a journal's records
                                         -- from before schema 3, one chain in one total order)
        header    text,                  -- canonical JSON: the journal's header object with meta.stream (and
                                         -- host, pid) set, its own created and salt; the legacy stream's is
                                         -- the journal's header itself
        last_seq  bigint,                -- the seq of the stream's newest record (0: none yet)
        last_link text,                  -- its chk (before the first record: link(header))
        prev_link text)                  -- its prev (NULL before the first record)
    of_journal_records(                  -- the records, one row each, PRIMARY KEY (journal, stream, seq)
        journal text, stream text,       -- FOREIGN KEY (journal, stream) to of_journal_streams
        seq bigint,                      -- 1, 2, 3, ... per stream, no gap, no duplicate
        type    text,                    -- "start" | "receipt" (docs/formats/journal.md, execution records)
        time    text,                    -- RFC 3339 UTC time of the append (the appending process's clock)
        data    text,                    -- canonical JSON of the StartRecord / Receipt
        prev    text, chk text,          -- the chain, exactly as a v2 journal line (core/journal/_encoder.py):
                                         -- chk = sha256('{"data":…,"prev":"…","seq":N,"time":"…","type":"…"}')[:32 hex]
                                         -- prev = the previous record's chk in the stream (seq 1: link(header))
        receipt_id text,                 -- data.receipt_id; UNIQUE per journal (across all its streams)
                                         -- among "receipt" rows
        instance   text)                 -- the server process (of_journal_instances) that appended it
    of_journal_instances(                -- the live (or crashed, not yet recovered) server processes
        instance text PRIMARY KEY,       -- "inst_" + 32 hex
        journal  text, lock_key bigint,  -- the process holds pg_advisory_lock(lock_key) on a dedicated
        host text, pid int,              -- connection for its lifetime: the lock dies with the process
        started_at timestamptz)          -- (or its connection), as a journal file's flock does
    APPEND (store/_pg_journal_schema.py)
        -- one statement per record: the stream head's UPDATE (a row only its own process appends to)
        -- assigns seq and computes chk from the old link, the INSERT writes the record.

A stream is a journal file's equivalent for one process: it verifies on its
own (seq, chain, checksums from its header), and a reader that wants the
journal's history as one sequence merges the streams by ``time`` (each
stream's own order kept; :mod:`openfunctions.store._pg_journal_read`).

Promises (docs/formats/receipt.md, the same as the file backend's):

- **An append is a committed insert.** ``on_start``/``on_settled`` return only
  after the statement that inserted the record committed (autocommit; the
  server's ``synchronous_commit`` decides what "committed" means on disk:
  keep it ``on``). Concurrent appends in one process share one transaction
  and one commit, sent as one pipeline (group commit: a flusher takes
  everything queued the moment its previous commit returned), and nothing is
  acknowledged before its commit.
- **seq is a total order per stream, and replicas never take turns**: each
  process appends to its own stream (created when it registers; a process
  that registers again, after losing its lock, gets a new one), so appends
  from different replicas take no common row lock. The chain and checksums
  keep their meaning per stream, and :func:`verify_pg_journal` checks every
  stream as ``journal verify`` checks a file, plus one receipt per call
  across the streams (the unique index spans them).
- **A lost connection mid-append** raises :class:`JournalUnavailable` with
  ``certainty="unknown"`` (the commit may or may not have happened): the
  executor turns that into an ``unknown`` receipt, never a success. The next
  append takes a fresh connection.
- **Recovery reads evidence only.** A process that died left its instance row
  and its lock is free: the next server to open the journal takes the lock,
  writes one ``unknown`` receipt (``recovered_unknown``) for each of the dead
  instance's starts that has none, and deletes the row. **The recovered
  receipt goes to the stream of the start it settles** (the dead instance's
  own stream, or the legacy stream for a start written before schema 3), so
  each stream holds every call it started from start to receipt and a dead
  stream, once swept, has no open start; its ``instance`` column names the
  recovering process. A process whose lock
  connection was cut while it lives is treated the same way (its starts are
  settled ``unknown`` by another replica): its later receipts for those calls
  are refused as duplicates (the client sees ``unknown``) and its new appends
  are refused until it registers again (it does so on the next append).
  A server also sweeps every few seconds (:meth:`PgExecutionJournal.start_sweeping`;
  ``serve --database`` uses 5 s), so a surviving replica settles a dead one's
  calls without waiting for a restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

import structlog

from openfunctions.core import OpenFunctionsError, canonical_json, new_id, run_every, stop_task, utc_timestamp
from openfunctions.core.journal import recovered_receipt
from openfunctions.core.postgres import PgInstance, check_schema, database_error, drop_dead_connections

from ._errors import StoreError, StoreUnavailable
from ._pg import _psycopg, redact_dsn
from ._pg_journal_schema import APPEND, COMPONENT, RECEIPTS_INDEX, REFUSAL

log = structlog.get_logger("openfunctions.store.journal")

KIND = "execution"
START = "start"
RECEIPT = "receipt"
CHK_LEN = 32


class JournalUnavailable(StoreUnavailable):
    """The database could not take (or confirm) a journal append; ``certainty`` says whether it may have committed."""

    code = "journal_unavailable"


class DuplicateReceipt(StoreError):
    """A receipt for this call is already in the journal (another replica recovered the call as ``unknown``)."""

    code = "journal_duplicate_receipt"
    certainty = "unknown"


def link(text: str) -> str:
    """The chain link of a header (as a journal file's header line, without its newline)."""
    return sha256(text.encode("utf-8")).hexdigest()[:CHK_LEN]


def record_chk(seq: int, type: str, time: str, data_text: str, prev: str) -> str:
    """The v2 checksum of a record (core/journal/_encoder.py's format), from its canonical data text."""
    body = (f'{{"data":{data_text},"prev":"{prev}","seq":{seq:d},"time":{json.dumps(time)},'
            f'"type":{json.dumps(type)}}}')
    return sha256(body.encode("utf-8")).hexdigest()[:CHK_LEN]


@dataclass
class _Pending:
    type: str
    text: str  # the record's data, canonical JSON
    receipt_id: str | None
    future: asyncio.Future[int] = field(repr=False)
    stream: str | None = None  # None: this process's own stream; else a dead instance's (a recovered receipt)


class PgExecutionJournal:
    """Starts and receipts in PostgreSQL; open with :func:`open_pg_journal`."""

    def __init__(self, dsn: str, name: str, pool: Any, owns_pool: bool) -> None:
        self.name = name
        self.pool = pool
        self._dsn = dsn
        self._owns_pool = owns_pool
        self.where = redact_dsn(dsn)
        #: Receipts this open wrote for dead instances' unsettled starts.
        self.recovered: list[Any] = []
        self._live = PgInstance(dsn, name)  # this process's registration (core/postgres.py)
        self._header: str | None = None  # the journal's header (of_journals.header), read at open
        #: The stream this process appends to (its instance id once the stream row exists; None before).
        self.stream: str | None = None
        self._conn: Any = None  # the appends' connection (opened at the first append, replaced after a failure)
        self._queue: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._sweeping = asyncio.Lock()
        self._closed = False
        psycopg, _ = _psycopg()
        self._db_errors = (psycopg.OperationalError, psycopg.InterfaceError)
        self._psycopg = psycopg
        #: The process's cross-replica conflict-key locks (``PgKeyLocks``), when ``serve --database`` opened
        #: them beside this journal: closed with it.
        self.key_locks: Any = None
        #: Statements (commits) issued for appends, and records they carried: the group-commit ratio.
        self.commits = 0
        self.appended = 0

    @property
    def path(self) -> str:
        return f"{self.where} journal {self.name!r}"

    # -- instance registration -------------------------------------------------
    @property
    def instance(self) -> str | None:
        """This process's instance id (``None``: not registered: the next append registers)."""
        return self._live.instance

    @property
    def _lock_conn(self) -> Any:
        return self._live.lock_conn

    async def _register(self) -> None:
        await self._live.register()
        await self._open_stream()

    async def _open_stream(self) -> None:
        """Create this instance's stream (its head at seq 0, chained from its own header), once per registration."""
        instance = self._live.instance
        if instance is None or instance == self.stream:
            return
        journal_header = json.loads(self._header or "{}")
        meta = dict(journal_header.get("meta") or {})
        meta.update({"stream": instance, "host": socket.gethostname(), "pid": os.getpid()})
        header = canonical_json({**journal_header, "created": utc_timestamp(), "meta": meta,
                                 "salt": os.urandom(16).hex()})
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO of_journal_streams (journal, stream, header, last_seq, last_link) "
                "VALUES (%s, %s, %s, 0, %s) ON CONFLICT DO NOTHING", (self.name, instance, header, link(header)))
        self.stream = instance

    async def _ensure_journal(self, conn: Any) -> None:
        header = canonical_json({
            "format": "openfunctions.journal", "version": 2, "journal_id": new_id("jnl"), "kind": KIND,
            "created": utc_timestamp(), "meta": {"backend": "postgresql", "journal": self.name},
            "salt": os.urandom(16).hex(),
        })
        await conn.execute("INSERT INTO of_journals (name, header) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                           (self.name, header))
        cur = await conn.execute("SELECT header FROM of_journals WHERE name = %s", (self.name,))
        self._header = (await cur.fetchone())[0]

    # -- recovery ----------------------------------------------------------------
    async def _recover(self) -> None:
        """Settle ``unknown`` every start of a dead instance that has no receipt (reads evidence; runs nothing)."""
        await self._live.recover_dead(self.pool, self._settle_dead)

    async def _settle_dead(self, instance: str) -> None:
        async with self.pool.connection() as conn:
            # The dead instance's starts are in its own stream (or, written before schema 3, the legacy one).
            cur = await conn.execute(
                "SELECT s.stream, s.data FROM of_journal_records s WHERE s.journal = %s AND s.instance = %s "
                "AND s.type = 'start' AND NOT EXISTS (SELECT 1 FROM of_journal_records r WHERE "
                "r.journal = s.journal AND r.receipt_id = s.receipt_id AND r.type = 'receipt') "
                "ORDER BY s.stream, s.seq", (self.name, instance))
            starts = [(stream, json.loads(data)) for stream, data in await cur.fetchall()]
        receipts = [(stream, recovered_receipt(s)) for stream, s in starts]
        # Through the group-commit queue (a sweep runs beside live appends), each into the stream of the start
        # it settles; a receipt that is already there (the call settled meanwhile, or another replica got
        # there first) is skipped.
        results = await asyncio.gather(*(self._append(RECEIPT, r.to_dict(), r.receipt_id, stream=stream)
                                         for stream, r in receipts), return_exceptions=True)
        for res in results:
            if isinstance(res, BaseException) and not isinstance(res, DuplicateReceipt):
                raise res
        self.recovered.extend(r for (_, r), res in zip(receipts, results, strict=True)
                              if not isinstance(res, BaseException))

    async def sweep(self) -> list[Any]:
        """Recover dead instances now (what an open does); the receipts written by this sweep."""
        async with self._sweeping:
            before = len(self.recovered)
            await self._recover()
            return self.recovered[before:]

    def start_sweeping(self, interval: float) -> None:
        """Every ``interval`` seconds, settle the calls of replicas that died (their advisory lock is free).

        Without it a dead replica's in-flight calls stay open until a server starts.
        A failed sweep (the database away) is logged and tried again next time.
        """
        async def once() -> None:
            if self.instance is None or self._closed:
                return
            try:
                found = await self.sweep()
            except Exception:
                await drop_dead_connections(self.pool)  # a restarted server: the next sweep gets live connections
                raise
            if found:
                log.warning("journal_recovered_dead_replica", journal=self.name, receipts=len(found),
                            hint="calls of a server that died were settled unknown (not re-run)")

        # a failed sweep is retried next round; appends report their own errors
        self._sweeper = run_every(interval, once, name=f"journal-sweep-{self.name}", on_error=lambda exc: log.warning(
            "journal_sweep_failed", journal=self.name, error=f"{type(exc).__name__}: {exc}"))

    # -- appending -----------------------------------------------------------------
    async def _append_rows(self, rows: list[_Pending]) -> tuple[list[int | None], JournalUnavailable | None]:
        """Append in order in one transaction: the seqs, and why the ``None`` ones were not written.

        ``None`` with no reason: a receipt already present (a duplicate); with
        one: the journal is gone or this instance is no longer registered.

        One record: :data:`APPEND` alone (one round trip, one commit). Several
        (group commit): the same statement once per record, in one transaction,
        sent as one pipeline (one round trip, one commit).
        """
        time = utc_timestamp()
        params = [{"journal": self.name, "stream": self.stream if p.stream is None else p.stream,
                   "instance": self.instance, "type": p.type, "time": time, "data": p.text,
                   "receipt_id": p.receipt_id} for p in rows]
        committing = False
        try:
            if self._conn is None:  # one connection of its own: appends go one statement at a time anyway
                self._conn = await self._psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
            conn = self._conn
            committing = True
            if len(params) == 1:
                cur = await conn.execute(APPEND, params[0])
                row = await cur.fetchone()
                seqs = [row[0] if row else None]
            else:
                seqs = await self._append_batch(conn, params)
        except self._db_errors as exc:
            await self._drop_conn()
            await drop_dead_connections(self.pool)  # the pool's other connections died with it, likely
            raise self._unavailable(exc, committing) from None
        except self._psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != RECEIPTS_INDEX:
                raise JournalUnavailable(f"journal {self.name!r} at {self.where} refused the append: "
                                         f"{exc.diag.message_primary}", certainty="known") from None
            # A receipt committed meanwhile by another replica (not in this statement's snapshot): the
            # transaction rolled back whole; one at a time, the duplicate is found and its neighbours commit.
            if len(rows) == 1:
                return [None], None
            seqs, refusal = [], None
            for p in rows:
                one, why = await self._append_rows([p])
                seqs += one
                refusal = refusal or why
            return seqs, refusal
        self.commits += 1
        self.appended += sum(seq is not None for seq in seqs)
        return seqs, (await self._refusal(conn, params[0]) if None in seqs else None)

    async def _append_batch(self, conn: Any, params: list[dict[str, Any]]) -> list[int | None]:
        """:data:`APPEND` per record between BEGIN and COMMIT, all sent as one pipeline (one round trip)."""
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                curs = [await conn.execute(APPEND, p) for p in params]
                await conn.execute("COMMIT")
        except self._psycopg.Error:
            status = self._psycopg.pq.TransactionStatus
            if conn.info.transaction_status in (status.INTRANS, status.INERROR):
                await conn.execute("ROLLBACK")  # a failed statement left the transaction open (nothing committed)
            raise
        return [row[0] if (row := await cur.fetchone()) else None for cur in curs]

    async def _refusal(self, conn: Any, params: dict[str, Any]) -> JournalUnavailable | None:
        """Why :data:`APPEND` wrote nothing for some records: the stream, the instance, or (``None``) duplicates."""
        try:
            cur = await conn.execute(REFUSAL, params)
            stream_exists, registered = await cur.fetchone()
        except self._db_errors as exc:
            await self._drop_conn()
            raise self._unavailable(exc, committing=False) from None
        if not stream_exists:
            return JournalUnavailable(f"journal {self.name!r} at {self.where} refused the append: no stream "
                                      f"{params['stream']!r} in journal {self.name!r}", certainty="known")
        if not registered:
            self._live.instance = None  # the next append registers again
            return JournalUnavailable(f"journal {self.name!r} at {self.where} refused the append: instance "
                                      f"{params['instance']} is no longer registered (another server recovered its "
                                      "calls)", certainty="known")
        return None

    async def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    def _unavailable(self, exc: BaseException, committing: bool) -> JournalUnavailable:
        """``committing``: the append reached the server (it may have committed); before that nothing was written."""
        return database_error(exc, JournalUnavailable, f"journal {self.name!r}: PostgreSQL at {self.where} failed "
                              "mid-append", write=committing)

    async def _append(self, type: str, data: dict[str, Any], receipt_id: str | None, *,
                      stream: str | None = None) -> int:
        if self._closed:
            raise JournalUnavailable(f"journal {self.name!r} is closed", certainty="known")
        text = canonical_json(data)  # a non-JSON record is refused here, not in the shared batch
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(type, text, receipt_id, fut, stream))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await asyncio.shield(fut)

    async def _flush(self) -> None:
        """Group commit: everything queued goes in one transaction, then what queued meanwhile, until empty."""
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self.ensure_registered()
                seqs, refusal = await self._append_rows(batch)
            except BaseException as exc:
                err = exc if isinstance(exc, OpenFunctionsError) else self._unavailable(exc, True)
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                if not isinstance(exc, Exception):
                    raise
                continue
            for p, seq in zip(batch, seqs, strict=True):
                if p.future.done():
                    continue
                if seq is None and refusal is not None:
                    p.future.set_exception(refusal)
                elif seq is None:
                    p.future.set_exception(DuplicateReceipt(
                        f"call {p.receipt_id} already has a receipt in journal {self.name!r} (another server "
                        "settled it `unknown` after this one lost its database lock); this result is not recorded",
                        details={"receipt_id": p.receipt_id}))
                else:
                    p.future.set_result(seq)

    # -- ExecutionObserver ------------------------------------------------------
    async def on_start(self, record: Any) -> None:
        if getattr(record, "read_only", False):
            return
        await self._append(START, record.to_dict(), record.receipt_id)

    async def on_settled(self, receipt: Any) -> None:
        await self._append(RECEIPT, receipt.to_dict(), receipt.receipt_id)

    async def health(self) -> dict[str, Any]:
        try:
            async with self.pool.connection() as conn:
                await conn.execute("SELECT 1")
        except Exception as exc:
            await drop_dead_connections(self.pool)  # so that the next probe (and call) reconnects
            return {"status": "failed", "code": JournalUnavailable.code, "cause": str(exc),
                    "action": f"check PostgreSQL at {self.where}"}
        return {"status": "ok"}

    async def ensure_registered(self) -> str:
        """This process's live instance id (registering again, with a new stream, if the database forgot it);
        tasks carry it."""
        instance = await self._live.ensure()
        if instance != self.stream:
            await self._open_stream()
        return instance

    # -- reading -------------------------------------------------------------------
    async def find_receipts(self, ids: set[str]) -> dict[str, Any]:
        """receipt id -> the receipt in this journal, for those of ``ids`` that have one (an indexed read)."""
        from openfunctions.core import Receipt

        if not ids:
            return {}
        async with self.pool.connection() as conn:
            found = await _settled(conn, ids, self.name)
        return {rid: Receipt.model_validate(data) for rid, data in found.items()}

    def receipts(self) -> Iterator[Any]:
        """Every receipt, the streams merged by time (a blocking read on its own connection: for recovery paths
        and tools)."""
        from openfunctions.core import Receipt

        from ._pg_journal_read import read_records

        for rec in read_records(self._dsn, self.name, types=(RECEIPT,)):
            yield Receipt.model_validate(json.loads(rec.data))

    async def close(self) -> None:
        if self._closed:
            return
        await stop_task(self._sweeper)
        self._closed = True
        if self._flusher is not None:
            try:
                await self._flusher
            except Exception:
                pass
        await self._drop_conn()
        if self.key_locks is not None:
            await self.key_locks.close()
        await self._live.close(self.pool)  # a clean exit: nothing of ours is left unsettled
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> PgExecutionJournal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_pg_journal(dsn: str, name: str, *, pool: Any = None, max_connections: int = 4,
                          timeout: float = 10.0) -> PgExecutionJournal:
    """Open journal ``name`` (a profile) in the database at ``dsn``: check the schema, register, recover.

    Raises :class:`~openfunctions.store.SchemaTooNew` / :class:`SchemaOutOfDate`
    when the database's schema is not the one this code was built for (run
    ``openfunctions-mcp db migrate``), :class:`StoreUnavailable` when it cannot connect.
    """
    from ._pg import open_pool

    owns = pool is None
    if pool is None:
        pool = await open_pool(dsn, max_size=max_connections, timeout=timeout)
    journal = PgExecutionJournal(dsn, name, pool, owns)
    try:
        async with pool.connection() as conn:
            await check_schema(conn, COMPONENT, where=journal.where)
            await journal._ensure_journal(conn)
        await journal._register()
        await journal._recover()
    except BaseException:
        await journal.close()
        raise
    return journal


async def _settled(conn: Any, ids: Iterable[str], journal: str | None) -> dict[str, dict[str, Any]]:
    """receipt id -> receipt dict, among ``ids``, in ``journal`` (``None``: every journal); index reads only."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    # One index probe per (journal, id) on of_journal_receipts (journal, receipt_id) WHERE type = 'receipt'.
    cur = await conn.execute(
        "SELECT r.data FROM of_journals j JOIN LATERAL (SELECT data FROM of_journal_records r WHERE r.journal = j.name "
        "AND r.type = 'receipt' AND r.receipt_id = ANY(%s)) r ON true WHERE %s::text IS NULL OR j.name = %s",
        (wanted, journal, journal))
    out: dict[str, dict[str, Any]] = {}
    for (data,) in await cur.fetchall():
        receipt = json.loads(data)
        out[receipt["receipt_id"]] = receipt
    return out


async def settled_pg_receipts(database: Any, receipt_ids: Iterable[str], *, journal: str | None = None,
                              timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """The settled receipts among ``receipt_ids`` in the database's execution journal(s): ``{receipt_id: receipt}``.

    The database counterpart of reading ``<data-dir>/journal`` at recovery
    (work's ``settled_receipts``): for each id that has a receipt, the
    receipt as it was appended (the ``Receipt.to_dict()`` object: ``outcome``,
    ``certainty``, ``handler_started``, ...); ids without one are absent.
    ``database`` is a ``postgresql://`` URL (one connection, closed after) or
    an open psycopg ``AsyncConnectionPool`` (one loan). ``journal`` names one
    journal (a profile: ``"work"``, ``"tools"``); ``None`` reads every journal
    in the database, as the file reader reads every ``*.journal`` file.

    Read-only: no registration, no lock, no write; a live server is not
    disturbed. Only *settled* evidence is returned: a call with a start and no
    receipt is absent (its status is the caller's to conclude). Raises
    :class:`SchemaOutOfDate`/:class:`SchemaTooNew` when the journal schema is
    not this code's, :class:`StoreUnavailable` when PostgreSQL cannot be reached.
    """
    ids = set(receipt_ids)
    psycopg, _ = _psycopg()
    where = redact_dsn(database) if isinstance(database, str) else "the database"
    try:
        if isinstance(database, str):
            async with await psycopg.AsyncConnection.connect(database, autocommit=True,
                                                             connect_timeout=max(1, int(timeout))) as conn:
                await check_schema(conn, COMPONENT, where=where)
                return await _settled(conn, ids, journal)
        async with database.connection(timeout=timeout) as conn:
            await check_schema(conn, COMPONENT, where=where)
            return await _settled(conn, ids, journal)
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise database_error(exc, StoreUnavailable, f"cannot read the execution journal at {where}",
                             write=False) from None


@dataclass
class VerifyReport:
    name: str
    records: int = 0
    starts: int = 0
    receipts: int = 0
    unsettled: int = 0
    streams: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _TooMany(Exception):
    pass


def verify_pg_journal(dsn: str, name: str) -> VerifyReport:
    """Read journal ``name`` stream by stream, in seq order, and check what ``journal verify`` checks in a file.

    Per stream: seq contiguous from 1, every ``chk`` recomputed, every ``prev``
    the previous ``chk`` (seq 1: the link of the stream's header), the head's
    ``last_seq``/``last_link``/``prev_link`` at the end. Per record: ``data``
    canonical JSON, the ``receipt_id`` column its data's. Across the streams:
    at most one receipt per call. Blocking (a CLI's tool).
    """
    psycopg, _ = _psycopg()
    report = VerifyReport(name)

    def problem(text: str) -> None:
        report.problems.append(text)
        if len(report.problems) > 50:
            report.problems.append("... stopped after 50 problems")
            raise _TooMany

    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT 1 FROM of_journals WHERE name = %s", (name,)).fetchone() is None:
            report.problems.append(f"no journal named {name!r}")
            return report
        heads = {stream: (header, last_seq, last_link, prev_link) for stream, header, last_seq, last_link, prev_link
                 in conn.execute("SELECT stream, header, last_seq, last_link, prev_link FROM of_journal_streams "
                                 "WHERE journal = %s", (name,)).fetchall()}
        report.streams = len(heads)
        open_starts: set[str] = set()
        settled: set[str] = set()
        seen_streams: set[str] = set()
        stream: str | None = None
        prev: str = ""
        last_prev: str | None = None
        expected = 1

        def end_stream() -> None:
            if stream is None or stream not in heads:
                return
            _, last_seq, last_link, prev_link = heads[stream]
            if last_seq != expected - 1 or last_link != prev or prev_link != last_prev:
                problem(f"journal {name!r} stream {stream!r}: head says seq {last_seq} link {last_link} prev "
                        f"{prev_link}, records end at seq {expected - 1} link {prev} prev {last_prev}")

        try:
            cur = conn.cursor(name="of_verify")  # server-side cursor: memory stays flat however long the journal
            cur.execute("SELECT stream, seq, type, time, data, prev, chk, receipt_id FROM of_journal_records "
                        "WHERE journal = %s ORDER BY stream, seq", (name,))
            for rstream, seq, type, time, data, rprev, chk, rid in cur:
                if rstream != stream:
                    end_stream()
                    stream, expected, last_prev = rstream, 1, None
                    seen_streams.add(rstream)
                    if rstream not in heads:
                        problem(f"journal {name!r} stream {rstream!r}: records without a stream head")
                    prev = link(heads[rstream][0]) if rstream in heads else ""
                report.records += 1
                where = f"journal {name!r}" + (f" stream {rstream}" if rstream else "") + f" seq {seq}"
                if seq != expected:
                    problem(f"{where}: expected seq {expected} (gap or duplicate)")
                if rprev != prev:
                    problem(f"{where}: prev {rprev} does not match the previous link {prev}")
                if record_chk(seq, type, time, data, rprev) != chk:
                    problem(f"{where}: checksum mismatch")
                try:
                    obj = json.loads(data)
                    if canonical_json(obj) != data:
                        problem(f"{where}: data is not canonical JSON")
                    if obj.get("receipt_id") != rid:
                        problem(f"{where}: receipt_id column differs from the data's")
                except ValueError as exc:
                    problem(f"{where}: data is not JSON ({exc})")
                if type == START:
                    report.starts += 1
                    if rid not in settled:
                        open_starts.add(rid)
                elif type == RECEIPT:
                    report.receipts += 1
                    if rid in settled:
                        problem(f"{where}: a second receipt for {rid}")
                    settled.add(rid)
                    open_starts.discard(rid)
                else:
                    problem(f"{where}: unknown record type {type!r}")
                prev, last_prev = chk, rprev
                expected = seq + 1
            end_stream()
            for empty in sorted(set(heads) - seen_streams):  # streams with no record yet: the head at its header
                header, last_seq, last_link, prev_link = heads[empty]
                if last_seq != 0 or last_link != link(header) or prev_link is not None:
                    problem(f"journal {name!r} stream {empty!r}: head says seq {last_seq} link {last_link} but the "
                            "stream has no records")
        except _TooMany:
            return report
        report.unsettled = len(open_starts)
    return report


def list_pg_journals(dsn: str) -> list[str]:
    psycopg, _ = _psycopg()
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM of_journals ORDER BY name").fetchall()]


__all__ = ["DuplicateReceipt", "JournalUnavailable", "PgExecutionJournal", "VerifyReport", "list_pg_journals",
           "open_pg_journal", "record_chk", "settled_pg_receipts", "verify_pg_journal"]
