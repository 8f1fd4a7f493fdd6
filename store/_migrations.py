"""Versioned migrations of the schema in PostgreSQL, applied only by ``openfunctions-mcp db migrate``.

The version of each component lives in ``of_schema`` (``store/_pg.py`` made
the table; the key-value store migrates its own component ``"store"`` when it
opens). Component ``"journal"`` (its list: ``store/_pg_journal_schema.py``):
``MIGRATIONS[i]`` brings it from version ``i`` to ``i + 1``; **append, never
edit** a released entry. A server never
migrates: :func:`check_schema` refuses a database whose version differs from
``len(MIGRATIONS)`` (older: run ``db migrate``; newer: upgrade the code), so
replicas of two releases never write one journal with two meanings.
Other components (:data:`COMPONENTS`: MCP tasks, ...) keep their own
migration list in their own module, under the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import SchemaTooNew, StoreError
from ._pg_journal_schema import MIGRATIONS  # the journal's own list lives beside the module that writes it

COMPONENT = "journal"

#: The other schema components ``db migrate`` applies after the journal's, each with its own migration
#: list in its own module (one registration line each): component -> "module:attribute".
COMPONENTS: dict[str, str] = {
    "tasks": "openfunctions.store._pg_tasks:MIGRATIONS",  # MCP tasks shared by replicas (pgshared)
    "work": "openfunctions.store._pg_work_schema:MIGRATIONS",  # work lease, attempts, grants, inbox (pgwork)
    "artifacts": "openfunctions.store._pg_artifacts:MIGRATIONS",  # artifact index and blobs (pgshared)
    "runs": "openfunctions.store._pg_runs:MIGRATIONS",  # agents' run records (pgshared)
    "workflows": "openfunctions.store._pg_workflows_schema:MIGRATIONS",  # durable workflow runs (pgflows)
}


def migrations_of(component: str) -> Sequence[Sequence[str]]:
    """The migration list of ``component`` (``"journal"`` or one of :data:`COMPONENTS`)."""
    if component == COMPONENT:
        return MIGRATIONS
    import importlib

    module, _, attr = COMPONENTS[component].partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


class SchemaOutOfDate(StoreError):
    """The database's schema is older than this code: run ``openfunctions-mcp db migrate``."""

    code = "schema_out_of_date"


_HAS_SCHEMA = "SELECT to_regclass('of_schema') IS NOT NULL"
_VERSION = "SELECT coalesce((SELECT version FROM of_schema WHERE component = %s), 0)"


async def schema_version(conn: Any, component: str = COMPONENT) -> int:
    """``component``'s schema version in the database (0: none yet)."""
    if not (await (await conn.execute(_HAS_SCHEMA)).fetchone())[0]:
        return 0
    return int((await (await conn.execute(_VERSION, (component,))).fetchone())[0])


def schema_version_sync(conn: Any, component: str = COMPONENT) -> int:
    """:func:`schema_version` on a synchronous connection (lock-free command-line readers)."""
    if not conn.execute(_HAS_SCHEMA).fetchone()[0]:
        return 0
    return int(conn.execute(_VERSION, (component,)).fetchone()[0])


def schema_problem(component: str, found: int, *, where: str = "the database") -> StoreError | None:
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


async def check_schema(conn: Any, component: str = COMPONENT, *, where: str = "the database") -> int:
    """Refuse (:func:`schema_problem`) a schema other than this code's; return it."""
    found = await schema_version(conn, component)
    problem = schema_problem(component, found, where=where)
    if problem is not None:
        raise problem
    return found


async def check_encoding(conn: Any) -> None:
    cur = await conn.execute("SHOW server_encoding")
    enc = (await cur.fetchone())[0]
    if enc.upper() not in ("UTF8", "UTF-8"):
        raise StoreError(f"the database's encoding is {enc}; the journal needs a UTF8 database "
                         "(CREATE DATABASE ... ENCODING 'UTF8')", details={"encoding": enc})


async def migrate(dsn: str) -> tuple[int, int]:
    """Apply every migration this code knows; the journal's ``(version before, version after)``."""
    return (await migrate_components(dsn))[COMPONENT]


async def migrate_components(dsn: str) -> dict[str, tuple[int, int]]:
    """Apply the journal's migrations, then each of :data:`COMPONENTS`'; component -> (before, after)."""
    from ._pg import _psycopg, apply_migrations, redact_dsn

    psycopg, _ = _psycopg()
    out: dict[str, tuple[int, int]] = {}
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await check_encoding(conn)
            for component in (COMPONENT, *COMPONENTS):
                migrations = migrations_of(component)
                found = await apply_migrations(conn, component, migrations)
                out[component] = (found, max(found, len(migrations)))
    except psycopg.OperationalError as exc:
        from ._errors import StoreUnavailable

        raise StoreUnavailable(f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {exc}") from None
    return out


__all__ = ["COMPONENT", "COMPONENTS", "MIGRATIONS", "SchemaOutOfDate", "check_schema", "migrate", "migrate_components",
           "migrations_of", "schema_version"]
