"""Liveness of server processes on PostgreSQL: one registration per process, its death seen by the others.

A process registers an *instance* (a row of ``of_journal_instances``, the
execution journal's table, ``store/_pg_journal.py``) and holds a session
advisory lock on a dedicated connection for life: the database's equivalent
of a journal file's ``flock``, which dies with the process (or its
connection). Another process that can take that lock knows the instance is
dead; :meth:`PgInstance.recover_dead` hands each dead instance of a scope to a
settle callback while holding its lock, then deletes its row. The execution
journal (scope: the profile) and the run records (scope ``runs:<store>``) use
this one mechanism; MCP tasks carry the journal's instance and become orphans
once its row is gone.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from openfunctions.core import new_id

from ._pg import _psycopg


class PgInstance:
    """This process's registration under ``scope`` (``of_journal_instances.journal``)."""

    def __init__(self, dsn: str, scope: str) -> None:
        self.dsn = dsn
        self.scope = scope
        self.instance: str | None = None
        self.lock_conn: Any = None
        self._psycopg, _ = _psycopg()
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


__all__ = ["PgInstance"]
