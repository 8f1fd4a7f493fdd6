"""``serve --profile work|all --database URL``: the work controller's lease, attempts and grants in PostgreSQL.

The rows are the work package's own (``work/_pg.py``: schema and promises at
its top); this module composes them with what lives in the store package's
tables, which work does not import: the execution journals' receipts that
recovery settles interrupted operations from (``settled_pg_receipts``) and
the database artifact store (``open_pg_artifact_store``).
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

from openfunctions.work._pg import DEFAULT_SPACE

#: the one work space every replica of a deployment shares: work's default, the one ``grant|work --database`` open
WORK_SPACE = DEFAULT_SPACE


def database_work_backend(url: str, *, lease_ttl: float) -> Any:
    """The shared ``WorkBackend`` in the database at ``url``, with its artifacts (connected and checked at start)."""
    from openfunctions.store import open_pg_artifact_store, settled_pg_receipts
    from openfunctions.work._pg import pg_work_backend

    return pg_work_backend(url, WORK_SPACE, ttl=lease_ttl, artifacts=open_pg_artifact_store,
                           receipts=settled_pg_receipts)


__all__ = ["WORK_SPACE", "database_work_backend"]
