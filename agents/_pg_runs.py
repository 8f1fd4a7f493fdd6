"""Agent run records in PostgreSQL: the run log that server replicas share.

The records are the run journal's (``agents/_records.py`` builds them and its
``apply`` folds them; docs/formats): this module stores them as rows, in
order, and knows only which record starts a run and which finishes it.
Schema (component ``"runs"`` in ``of_schema``; :data:`MIGRATIONS`, applied only
by ``openfunctions-mcp db migrate``; it needs the ``journal`` component's
``of_journal_instances``)::

    of_runs(run_id text PRIMARY KEY,     -- "run_" + 32 hex
        space    text,                   -- the run log's name ("default": one per deployment)
        agent    text,
        instance text,                   -- the process running it (of_journal_instances, scope "runs:<space>")
        finished boolean)                -- its run_finished record is in (only the first one counts)
    of_run_records(                      -- the one record-table layout (core/_pg_records.py): key run_id,
        run_id text,                     -- seq "serial"
        seq bigserial PRIMARY KEY,       -- one order over every run (``runs tail`` follows it)
        type text,
        time text,                       -- v3: RFC 3339 UTC, stamped by the writer; the rows of v2 keep their
                                         -- ``at`` (the transaction's time) here, those before v2 ""
        data text)                       -- canonical JSON, the record's data as in a run journal line

Promises: every append is one committed statement through the run's table
(``PgKeyedRows.table``/``write``: the one guarded insert). A run's first record
inserts its ``of_runs`` row in the same statement; a ``run_finished`` is
written only while the run is unfinished, and marks it finished (so a
replica's late finish after another replica's recovery wrote ``interrupted``
is refused, and the recovery's record stands); every other record is written
only while the run is unfinished, except a claim, a verification and a
fulfilment, written while the run is this space's (they follow its end).
Recovery is evidence only: :meth:`PgRunLog.recover_dead` hands each unfinished
run of a dead process (its advisory lock free,
:class:`openfunctions.core.postgres.PgInstance`) to a callback that replays its
rows and appends the ``interrupted`` record; nothing is resumed or re-run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from openfunctions.core.postgres import (
    Guard,
    PgInstance,
    PgKeyedRows,
    RecordTableSpec,
    drop_dead_connections,
    open_checked,
)
from openfunctions.store import StoreFailed, StoreUnavailable

COMPONENT = "runs"
Record = tuple[str, dict[str, Any]]

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: runs and their records
        """CREATE TABLE of_runs (
            run_id text COLLATE "C" PRIMARY KEY,
            space text COLLATE "C" NOT NULL,
            agent text,
            instance text,
            finished boolean NOT NULL DEFAULT false)""",
        "CREATE INDEX of_runs_open ON of_runs (space, instance) WHERE NOT finished",
        """CREATE TABLE of_run_records (
            seq bigserial PRIMARY KEY,
            run_id text COLLATE "C" NOT NULL,
            type text NOT NULL,
            data text NOT NULL)""",
        "CREATE INDEX of_run_records_run ON of_run_records (run_id, seq)",
    ),
    (  # 2: when each record was written (``runs tail --database`` prints it); older rows keep NULL
        "ALTER TABLE of_run_records ADD COLUMN at timestamptz",
        "ALTER TABLE of_run_records ALTER COLUMN at SET DEFAULT now()",
    ),
    (  # 3: the one record-table layout (core/_pg_records.py): ``time`` as text, ``at``'s value moved into it
        "ALTER TABLE of_run_records ADD COLUMN time text NOT NULL DEFAULT ''",
        "UPDATE of_run_records SET time = to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
        "WHERE at IS NOT NULL",
        "ALTER TABLE of_run_records ALTER COLUMN time SET DEFAULT "
        "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        "ALTER TABLE of_run_records DROP COLUMN at",
    ),
]

#: The records' table: key ``run_id``; seq from the database's sequence (a recovering replica writes a run's end).
TABLE = RecordTableSpec("of_run_records", "run_id", seq="serial")

#: A record as ``tail`` reads it: seq, type, the time written (RFC 3339 UTC, as a journal line's; None before v2), data.
TailRow = tuple[int, str, str | None, dict[str, Any]]
_TAIL = "SELECT r.seq, r.type, r.time, r.data FROM of_run_records r JOIN of_runs s USING (run_id) WHERE s.space = %s"


class PgRunLog(PgKeyedRows):
    """Run records of one space in PostgreSQL; open with :func:`open_pg_run_log`.

    ``rows``/``records(run_id)``: a run's rows in order (``[]``: no such run in this space);
    ``table(run_id)``: its ``RecordTable`` (appends guarded as ``PgKeyedRows`` says: a claim's after the end)."""

    what = "run records"
    error = StoreUnavailable
    spec = TABLE
    head = ("of_runs", "space", "finished")
    refused = StoreFailed
    refusal = "the run is finished (or not this space's)"
    last = "run_finished"  # only the first finish of a run is written, and sets ``finished``
    #: what a run takes after its finish: its claim, their verifications, its fulfilment
    after_end = frozenset({"outcome_claim", "claim_verified", "task_fulfilled"})

    def __init__(self, dsn: str, space: str, pool: Any, owns_pool: bool) -> None:
        super().__init__(dsn, pool, owns_pool)
        self.space = self.partition = space
        self.live = PgInstance(dsn, f"runs:{space}")

    async def new_run(self, run_id: str, agent: str | None) -> Guard:
        """The guard of a run's first record (``table(run_id, create=...)``): its row, carrying this process's
        instance, in the same statement (nothing is written if the run exists)."""
        instance = await self.live.ensure()
        return ("INSERT INTO of_runs (run_id, space, agent, instance) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING run_id", (run_id, self.space, agent, instance))

    async def start(self, run_id: str, agent: str | None, record: Record) -> bool:
        """The run's row and its start record, in one statement; ``False``: the run exists (nothing written)."""
        return await self.write(run_id, record, create=await self.new_run(run_id, agent))

    async def append(self, run_id: str, record: Record) -> bool:
        """A record of an unfinished run of this space (or a claim's, of any run of it); ``False``: refused,
        nothing written. A ``run_finished`` is the run's one finish: ``False`` if it already has one."""
        return await self.write(run_id, record)

    finish = append

    async def all_records(self, limit_runs: int = 1000) -> list[Record]:
        """The records of the newest ``limit_runs`` runs, in order (for listings)."""
        rows = await self._run(
            "SELECT r.type, r.data FROM of_run_records r WHERE r.run_id IN (SELECT run_id FROM of_run_records "
            "WHERE type = 'run_started' ORDER BY seq DESC LIMIT %s) ORDER BY r.seq", (limit_runs,),
            fetch=True, write=False)
        return [(t, json.loads(d)) for t, d in rows]

    async def tail(self, *, last: int | None = None, after: int | None = None, limit: int = 10_000) -> list[TailRow]:
        """Records of this space in seq order: the newest ``last`` of them, or those with seq above ``after``.

        seq is the insertion order, not quite the commit order: replicas' concurrent
        appends may commit a lower seq after a higher one is visible, so a follower
        reads again a little below the newest seq it has seen (``runs tail -f``).
        """
        if last is not None:
            rows = await self._run(_TAIL + " ORDER BY r.seq DESC LIMIT %s", (self.space, last), fetch=True, write=False)
            rows.reverse()
        else:
            rows = await self._run(_TAIL + " AND r.seq > %s ORDER BY r.seq LIMIT %s", (self.space, after or 0, limit),
                                   fetch=True, write=False)
        return [(seq, t, at or None, json.loads(d)) for seq, t, at, d in rows]

    async def recover_dead(self, finish: Callable[[str], Awaitable[bool]]) -> list[str]:
        """``finish(run_id)`` every unfinished run of a dead process (``True``: it wrote the run's end); the run ids."""
        done: list[str] = []

        async def settle(instance: str) -> None:
            rows = await self._run("SELECT run_id FROM of_runs WHERE space = %s AND instance = %s AND NOT finished",
                                   (self.space, instance), fetch=True, write=False)
            for (run_id,) in rows:
                if await finish(run_id):
                    done.append(run_id)

        try:
            await self.live.ensure()
            await self.live.recover_dead(self.pool, settle)
        except Exception:
            await drop_dead_connections(self.pool)  # a restarted server: the next sweep gets live connections
            raise
        return done

    async def close(self) -> None:
        await self.live.close(self.pool)
        await self._close_pool()


async def open_pg_run_log(dsn: str, space: str = "default", *, pool: Any = None, max_connections: int = 4,
                          timeout: float = 10.0, register: bool = True) -> PgRunLog:
    """Run records of ``space`` at ``dsn``, this process registered; refuses a ``runs`` schema not this code's.

    ``register=False``: a reader (the ``runs`` CLI) that writes nothing and takes no lock.
    """
    async def register_(log: PgRunLog) -> None:
        if register:
            await log.live.register()

    return await open_checked(dsn, COMPONENT, lambda p, owns: PgRunLog(dsn, space, p, owns), pool=pool,
                              max_connections=max_connections, timeout=timeout, then=register_, close=PgRunLog.close,
                              unavailable=StoreUnavailable)


__all__ = ["MIGRATIONS", "PgRunLog", "TailRow", "open_pg_run_log"]
