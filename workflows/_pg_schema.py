"""Schema component ``"workflows"``: durable workflow runs in PostgreSQL (format written here, once).

``MIGRATIONS[i]`` brings the component from version ``i`` to ``i + 1``;
**append, never edit** a released entry. Applied only by ``openfunctions-mcp
db migrate`` (registered in ``core/postgres.py``'s ``COMPONENTS``); opening a space
refuses a version other than ``len(MIGRATIONS)``. Written by
``workflows/_pg.py``; read by ``workflows/_runs.py``
(``WorkflowRuns(database=URL)``).

Table, version 1::

    of_workflow_records(
        space text COLLATE "C",   -- the run space: one per deployment by default ("default");
                                  -- the database's counterpart of one data directory's runs.journal
        seq   bigint,             -- 1, 2, 3, ... per space, no gaps; the fold order
        type  text,               -- the record type (run_started, step_started, step_settled, run_blocked,
                                  -- step_resolved, run_finished, run_snapshot, compacted)
        time  text,               -- when it was written, RFC 3339 UTC with microseconds (a journal line's "time")
        data  text,               -- the record's data as canonical JSON: exactly what the file journal's
                                  -- line holds under "data" (fields: workflows/_runlog.py, docs/formats/workflow-runs.md)
        PRIMARY KEY (space, seq))

Meaning: the rows of a space, in ``seq`` order, are the records of a workflow run
journal (format version 2; the records and the fold are ``workflows/_runlog.py``'s),
folded by the same ``fold``. Promises (``workflows/_pg.py``):

- **one writer per space**: the writer holds a session advisory lock (key:
  the first 8 bytes of ``sha256("openfunctions.workflows:" + space)``, signed)
  on one connection for as long as it is open, and writes only on that
  connection, so a writer whose connection died can no longer write; a second
  writer gets ``busy`` (after waiting up to ``LOCK_WAIT`` = 2 s, time for the
  database to see a killed holder's connection close; the file journal's flock);
- **a batch is one statement**: the records handed to one append (a run's
  ``step_started`` with what was buffered before it, or ``run_finished``) are
  one multi-row ``INSERT``, committed before the append returns (the fsync of
  the file journal);
- **compaction is one transaction**: delete the space's rows, insert a
  ``run_snapshot`` per kept run and a ``compacted`` record (``{segments: [],
  kept, pruned}``), seq continuing; a crash leaves the old rows or the new;
- readers (``workflows list|show``) take no lock and write nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

COMPONENT = "workflows"

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: the records of every run space
        """CREATE TABLE of_workflow_records (
            space text COLLATE "C" NOT NULL,
            seq bigint NOT NULL,
            type text NOT NULL,
            time text NOT NULL,
            data text NOT NULL,
            PRIMARY KEY (space, seq))""",
    ),
]

__all__ = ["COMPONENT", "MIGRATIONS"]
