"""``serve --profile work|all --database URL``: the work controller's lease, attempts and grants in PostgreSQL.

The rows are the store package's (``openfunctions.store.pg_work_backend``;
schema and promises at the top of ``store/_pg_work.py``); the work package
takes them through its ``WorkBackend`` interface and never imports store.
Every replica serving ``--profile work`` on one database uses one work space
(:data:`WORK_SPACE`): a controller takes the lease for each lifecycle call,
so an attempt started through one replica continues through any other, and
when a replica dies holding the lease another takes it over (at once: its
liveness lock died with it; an unresponsive one after expiry)
(``--work-lease-ttl``) with a higher generation. The schema is checked when
the server starts (the profile's starter): older or newer than the code ->
refused, naming ``openfunctions-mcp db migrate``.

The work artifacts (previews, command output and large replies projected to
an artifact id) are in the database too (artifact store ``"work:work"``, on
the backend's pool): an id minted through one replica reads through
``of_work_artifact_read`` on any other, under the same quota, digest and
scope rules as ``<data-dir>/work/artifacts``.
"""

from __future__ import annotations

from typing import Any

#: the one work space every replica of a deployment shares
WORK_SPACE = "work"


def database_work_backend(url: str, *, lease_ttl: float) -> Any:
    """The shared ``WorkBackend`` in the database at ``url``, with its artifacts (connected and checked at start)."""
    from openfunctions.store import pg_work_backend

    return pg_work_backend(url, WORK_SPACE, ttl=lease_ttl, artifacts=True)


async def open_database_work(url: str) -> Any:
    """The opened backend ``openfunctions-mcp grant|work ... --database URL`` use (grants; attempts and the inbox)."""
    from openfunctions.store import open_pg_work

    return await open_pg_work(url, WORK_SPACE)


__all__ = ["WORK_SPACE", "database_work_backend", "open_database_work"]
