"""`db verify` audits workflow run rows (workflows/_pg.py), as it audits journals and work spaces.

A private database (``fresh_db``: other tests corrupt rows of the shared one on purpose), real runs written
by ``WorkflowRuns(database=...)``, then rows damaged with SQL as an operator's mistake or a bad restore would:
verify names the space and the seq, and leaves the other spaces ok.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import psycopg
import pytest

from openfunctions.store import migrate_database
from openfunctions.workflows import WorkflowRuns
from openfunctions.workflows._pg import verify_pg_workflows
from openfunctions.workflows.cli import check_run_records
from tests.workflows.test_durable import World, workflow


@pytest.fixture
def db(fresh_db):
    asyncio.run(migrate_database(fresh_db))
    return fresh_db


def _write_runs(db: str, space: str, n: int, **kw) -> None:
    world, wf = World(), workflow()

    async def main() -> None:
        async with WorkflowRuns(database=db, space=space, workflows=[wf], registry=world.registry(), **kw) as runs:
            for i in range(n):
                assert (await runs.run(wf, {"n": i}, run_id=f"r{i}")).ok
            if kw:
                await runs.prune()

    asyncio.run(main())


def _sql(db: str, statement: str, *params) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(statement, params)


def test_verify_names_each_damaged_row_by_space_and_seq(db) -> None:
    _write_runs(db, "a", 2)
    _write_runs(db, "b", 1)
    _write_runs(db, "compacted", 4, keep_runs=1)  # rows from a compaction on: seq does not start at 1
    for space in ("a", "b", "compacted"):
        assert verify_pg_workflows(db, space, fold=check_run_records) == []
    _sql(db, "UPDATE of_workflow_records SET data = '{\"run_id\": \"r0\"}' WHERE space = 'a' AND seq = 2")
    _sql(db, "DELETE FROM of_workflow_records WHERE space = 'b' AND seq = 3")
    _sql(db, "UPDATE of_workflow_records SET data = '{oops' WHERE space = 'compacted' AND seq = "
             "(SELECT min(seq) FROM of_workflow_records WHERE space = 'compacted')")
    [fold] = verify_pg_workflows(db, "a", fold=check_run_records)  # well-formed, but does not fold
    assert "record seq 2" in fold and "space 'a'" in fold
    assert verify_pg_workflows(db, "a") == []  # without the workflows' fold only the form is checked
    assert verify_pg_workflows(db, "b") == ["seq 4: expected seq 3 (rows missing)"]
    [bad] = verify_pg_workflows(db, "compacted")
    assert bad.startswith("seq ") and "data is not JSON" in bad
    _sql(db, "DELETE FROM of_workflow_records WHERE space = 'b' AND seq < 3")  # the head gone: not a compaction's
    assert verify_pg_workflows(db, "b")[0].startswith("seq 4: the first row is a 'step_started' record, not seq 1")


@pytest.mark.slow
def test_db_verify_fails_naming_the_workflow_space_and_seq(db) -> None:
    def verify() -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env.pop("OPENFUNCTIONS_DATABASE_URL", None)
        return subprocess.run([sys.executable, "-m", "openfunctions.servers", "db", "verify", "--database", db],
                              capture_output=True, text=True, timeout=120, env=env)

    _write_runs(db, "shop", 2)
    _write_runs(db, "other", 1)
    ok = verify()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "workflow space shop: ok: seq contiguous, time and data well-formed, every row folds into its run" in ok.stdout
    _sql(db, "UPDATE of_workflow_records SET time = 'yesterday' WHERE space = 'shop' AND seq = 5")
    _sql(db, "UPDATE of_workflow_records SET data = '{\"run_id\": \"r1\"}' WHERE space = 'other' AND seq = 2")
    bad = verify()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "workflow space shop: 1 problem(s):\n  seq 5: time 'yesterday' is not an RFC 3339 UTC stamp" in bad.stdout
    assert "workflow space other: 1 problem(s):" in bad.stdout and "record seq 2" in bad.stdout
