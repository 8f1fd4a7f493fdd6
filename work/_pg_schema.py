"""Schema component ``"work"``: the work controller's lease, attempt records and grants in PostgreSQL.

``MIGRATIONS[i]`` brings the component from version ``i`` to ``i + 1``;
**append, never edit** a released entry. Applied only by ``openfunctions-mcp
db migrate`` (registered in ``core/postgres.py``'s ``COMPONENTS``); ``serve --database``
refuses a version other than ``len(MIGRATIONS)``. The tables and what each
column means are written once, at the top of ``work/_pg.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

COMPONENT = "work"

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: lease row, attempt records, grants
        """CREATE TABLE of_work_leases (
            space text COLLATE "C" PRIMARY KEY,
            owner text,
            generation bigint NOT NULL DEFAULT 0,
            expires_at double precision NOT NULL DEFAULT 0,
            ttl double precision NOT NULL DEFAULT 0,
            acquired_at text,
            renewed_at text,
            host text,
            pid integer,
            last_seq bigint NOT NULL DEFAULT 0)""",
        """CREATE TABLE of_work_records (
            space text COLLATE "C" NOT NULL REFERENCES of_work_leases (space),
            seq bigint NOT NULL,
            generation bigint NOT NULL,
            type text NOT NULL,
            time text NOT NULL,
            data text NOT NULL,
            PRIMARY KEY (space, seq))""",
        """CREATE TABLE of_work_grants (
            space text COLLATE "C" NOT NULL,
            grant_id text NOT NULL,
            ord bigint GENERATED ALWAYS AS IDENTITY,
            principal text NOT NULL,
            record text NOT NULL,
            revoked_at text,
            revoked_by text,
            PRIMARY KEY (space, grant_id))""",
        "CREATE INDEX of_work_grants_principal ON of_work_grants (space, principal)",
    ),
    (  # 2: the operator's resolution inbox (work resolve --database), one seq order for every replica
        """CREATE TABLE of_work_resolutions (
            space text COLLATE "C" NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            type text NOT NULL,
            data text NOT NULL,
            PRIMARY KEY (space, seq))""",
    ),
    (  # 3: the holder's liveness lock (a session advisory lock key): a dead holder's lease is taken over at once
        "ALTER TABLE of_work_leases ADD COLUMN alive_key bigint",
    ),
    (  # 4: the resolution inbox on the one record-table layout (core/_pg_records.py): each record's time
        "ALTER TABLE of_work_resolutions ADD COLUMN time text NOT NULL DEFAULT ''",
        "ALTER TABLE of_work_resolutions ALTER COLUMN time SET DEFAULT "
        "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    ),
]

__all__ = ["COMPONENT", "MIGRATIONS"]
