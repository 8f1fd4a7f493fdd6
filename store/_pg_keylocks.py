"""Conflict keys held across server replicas: PostgreSQL advisory locks (the core's ``KeyLocks``).

A server's scheduler keeps writes that share a conflict key one at a time
inside one process (``core/_scheduler.py``); with replicas behind a balancer
two processes could still run them at once. :class:`PgKeyLocks` is the
executor's ``key_locks`` hook (``ToolExecutor.key_locks``, set by
``serve --database``): after a call's local admission, its keys are taken in
the database too, and held until the call's reservation is released.

How a grant is held:

- **One connection per grant, one transaction.** ``acquire`` borrows a
  connection from a pool of its own (``max_connections``, default 16: that
  many calls with keys may hold or await them at once per process; more wait
  for a connection, holding no key meanwhile, up to ``connection_timeout``,
  default 60 s, after which the call is refused ``key_locks_failed``, known:
  nothing ran), opens a transaction and takes one
  transaction-scoped advisory lock per key: ``pg_advisory_xact_lock_shared``
  for a read (``shared=True``: reads of a key run together), the exclusive
  ``pg_advisory_xact_lock`` for a write. Release ends the transaction
  (``ROLLBACK``: nothing was written), which drops every lock at once.
- **A crash frees the keys.** The locks belong to the connection's
  transaction: when the process dies (SIGKILL included) its connections
  close and PostgreSQL releases them; another replica's waiting call then
  runs. The flip side: a connection cut while the call runs (a network
  partition, ``idle_in_transaction_session_timeout``) frees the keys while
  the handler may still be running. The release notices (its ``ROLLBACK``
  fails) and logs ``key_lock_lost``; the guarantee is as strong as that
  connection, so leave ``idle_in_transaction_session_timeout`` unset (or
  longer than any call) for these sessions.
- **Keys in their own lock space.** A key is hashed (SHA-256 of the namespace
  and the key, first 4 bytes) into the two-``int4`` form of the advisory
  lock functions, ``(classid, objid)``, with ``classid`` derived from the
  namespace (default ``"openfunctions.keys"``). The instance locks of
  ``core/postgres.py``'s ``PgInstance`` and the other advisory locks of this package
  use the one-``bigint`` form, which PostgreSQL keeps apart from the
  two-``int4`` form: they cannot collide. Two different keys may hash to the
  same ``objid`` (2^-32 per pair): they then take turns, never overlap
  wrongly — a false conflict costs waiting, not safety.
- **No deadlock between replicas.** A call's keys are locked in ascending
  order of their lock ids (duplicates once), so two calls wanting
  overlapping key sets always meet at the lowest shared id first.
- **A cancelled wait leaves nothing.** If the call is cancelled (or the
  database fails) while waiting, the connection is closed, not returned to
  the pool: its transaction and any lock already taken go with it.

Keys are global to the database (with one namespace): two profiles or two
tools that name one key conflict, which is what a key means (a resource).
A registry-wide barrier (an unclassified tool, a write with neither keys
nor ``parallel_safe``) is **per process**: it is not taken across replicas.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from openfunctions.core.postgres import classify, drop_dead_connections

from ._errors import StoreUnavailable
from ._pg import _psycopg, redact_dsn

log = structlog.get_logger("openfunctions.store.keylocks")

DEFAULT_NAMESPACE = "openfunctions.keys"


def _int4(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest()[:4], "big", signed=True)


def lock_ids(namespace: str, keys: Iterable[str]) -> tuple[int, list[int]]:
    """``(classid, sorted objids)`` of ``keys`` in ``namespace``: the arguments of the two-int4 advisory locks."""
    classid = _int4(b"openfunctions.keylocks\0" + namespace.encode("utf-8"))
    objids = sorted({_int4(namespace.encode("utf-8") + b"\0" + k.encode("utf-8")) for k in keys})
    return classid, objids


class PgKeyLocks:
    """Conflict keys across replicas (``KeyLocks``): advisory locks in PostgreSQL; open with :meth:`open`."""

    def __init__(self, dsn: str, pool: Any, namespace: str, connection_timeout: float = 60.0) -> None:
        self.where = redact_dsn(dsn)
        self.connection_timeout = connection_timeout
        self.namespace = namespace
        self._pool = pool
        self._releases: set[asyncio.Task[None]] = set()
        self._closed = False
        psycopg, _ = _psycopg()
        self._psycopg = psycopg
        #: Grants given and grants whose connection was lost while held (the guarantee lapsed).
        self.granted = 0
        self.lost = 0

    @classmethod
    async def open(cls, dsn: str, *, namespace: str = DEFAULT_NAMESPACE, max_connections: int = 16,
                   timeout: float = 10.0, connection_timeout: float = 60.0) -> PgKeyLocks:
        """Open the pool (its connections are not autocommit: a grant is one transaction).

        ``timeout``: to connect at open; ``connection_timeout``: how long a call waits for a free connection.
        """
        _, psycopg_pool = _psycopg()
        pool = psycopg_pool.AsyncConnectionPool(dsn, min_size=1, max_size=max_connections, timeout=timeout,
                                                open=False, name="openfunctions-keylocks")
        try:
            await pool.open(wait=True, timeout=timeout)
        except Exception as exc:
            await pool.close()
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {redact_dsn(dsn)} for key locks: {exc}") from None
        return cls(dsn, pool, namespace, connection_timeout)

    async def acquire(self, keys: frozenset[str], *, shared: bool) -> Callable[[], None]:
        """Wait until every key is held (shared or exclusive); the release callable (sync, idempotent)."""
        if self._closed:
            raise StoreUnavailable("the key locks are closed")
        classid, objids = lock_ids(self.namespace, keys)
        fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        conn = await self._pool.getconn(timeout=self.connection_timeout)
        try:
            for objid in objids:  # ascending: no two grants wait on each other in a cycle
                await conn.execute(f"SELECT {fn}(%s, %s)", (classid, objid))
        except BaseException as exc:
            # Cancelled or failed mid-way: the connection goes, with its transaction and the locks taken so far.
            await self._discard(conn)
            if isinstance(exc, Exception) and classify(exc, write=False) is not None:
                await drop_dead_connections(self._pool)  # a restarted server broke the others too
            raise
        self.granted += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            try:
                task = asyncio.get_running_loop().create_task(self._end(conn, keys))
            except RuntimeError:  # no running loop (interpreter shutdown): closing the socket frees the locks
                conn.pgconn.finish()
                return
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

        return release

    async def _end(self, conn: Any, keys: frozenset[str]) -> None:
        try:
            await conn.rollback()
        except Exception as exc:
            self.lost += 1
            log.warning("key_lock_lost", keys=sorted(keys)[:8], database=self.where,
                        error=f"{type(exc).__name__}: {str(exc)[:200]}",
                        hint="the connection holding these keys failed while the call ran: another replica may "
                             "have run a call with the same key meanwhile")
            await self._discard(conn)
            return
        try:
            await self._pool.putconn(conn)
        except Exception:  # the pool closed meanwhile (shutdown): the connection goes
            await self._discard(conn)

    async def _discard(self, conn: Any) -> None:
        try:
            await conn.close()
        except Exception:
            pass
        try:
            await self._pool.putconn(conn)  # a closed connection is dropped by the pool
        except Exception:
            pass

    async def close(self) -> None:
        """Release what is pending, then close the pool (a grant still held is dropped with its connection)."""
        self._closed = True
        if self._releases:
            await asyncio.gather(*list(self._releases), return_exceptions=True)
        await self._pool.close()


__all__ = ["DEFAULT_NAMESPACE", "PgKeyLocks", "lock_ids"]
