"""``db migrate`` from the store package: every component's migrations (``openfunctions.core.postgres``).

The versions, the registry of components (:data:`~openfunctions.core.postgres.COMPONENTS`:
the journal, MCP tasks, work, artifacts, agent runs, workflow runs, each with its
migration list beside the module that writes its rows) and the one check every
server runs live in ``core/postgres.py``. This module keeps the execution
journal's component name and list (``store/_pg_journal_schema.py``) at hand for
the journal's modules, and :func:`migrate`, the store's public entry point.
"""

from __future__ import annotations

from openfunctions.core.postgres import (
    COMPONENTS,
    SchemaOutOfDate,
    check_encoding,
    check_schema,
    migrate_components,
    migrations_of,
    schema_problem,
    schema_version,
    schema_version_sync,
)

from ._pg_journal_schema import COMPONENT, MIGRATIONS  # the journal's own, beside the module that writes it


async def migrate(dsn: str) -> tuple[int, int]:
    """Apply every migration this code knows (every component); the journal's ``(version before, version after)``."""
    return (await migrate_components(dsn))[COMPONENT]


__all__ = ["COMPONENT", "COMPONENTS", "MIGRATIONS", "SchemaOutOfDate", "check_encoding", "check_schema", "migrate",
           "migrate_components", "migrations_of", "schema_problem", "schema_version", "schema_version_sync"]
