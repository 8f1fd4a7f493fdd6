"""What the PostgreSQL record stores (tasks, runs, artifacts) share: opening with a schema check, one statement.

Each store keeps its schema and promises at the top of its own module; this
module only holds the two steps they do alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from openfunctions.core.postgres import check_schema, connection_or, database_error

from ._errors import StoreUnavailable
from ._pg import _psycopg, open_pool, redact_dsn

T = TypeVar("T")


class PgRows:
    """A store over a connection pool: :meth:`_run` is one statement, its failure a :class:`StoreUnavailable`."""

    what = "rows"  # what the rows are, for error messages ("tasks", "run records", ...)

    def __init__(self, dsn: str, pool: Any, owns_pool: bool) -> None:
        self.pool = pool
        self.where = redact_dsn(dsn)
        self._dsn = dsn
        self._owns_pool = owns_pool
        self._psycopg, _ = _psycopg()

    async def _run(self, sql: str, params: tuple[Any, ...], *, fetch: bool = False, write: bool = True) -> Any:
        """One statement (autocommit): its rows (``fetch``) or its row count. ``certainty`` says if a write may have happened."""
        def fail(exc: BaseException) -> Exception:
            return database_error(exc, StoreUnavailable, f"{self.what} in PostgreSQL at {self.where}", write=write)

        async with connection_or(self.pool, self.pool.connection(), fail) as conn:
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if fetch else cur.rowcount

    async def _close_pool(self) -> None:
        if self._owns_pool:
            await self.pool.close()


async def open_checked(dsn: str, component: str, make: Callable[[Any, bool], T], *, pool: Any, max_connections: int,
                       timeout: float, then: Callable[[T], Awaitable[None]] | None = None,
                       close: Callable[[T], Awaitable[None]]) -> T:
    """``make(pool, owns_pool)`` on ``pool`` (or a new one), after refusing a ``component`` schema not this code's."""
    owns = pool is None
    if pool is None:
        pool = await open_pool(dsn, max_size=max_connections, timeout=timeout)
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


__all__ = ["PgRows", "open_checked"]
