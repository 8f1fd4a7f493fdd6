"""Durable workflow runs on a real PostgreSQL (``WorkflowRuns(database=URL)``, schema ``workflows/_pg_schema.py``).

The same fold and recovery as on files (tests/workflows/test_durable.py): a crash
is a handler raising ``Crash`` in-process, or a real SIGKILL of a child process
(slow tests); a crashed write step blocks, a crashed read step resumes; one
writer per space; hostile ids, a missing schema and a bad URL are refused by name.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import anyio
import pytest

from openfunctions.store import migrate_database
from openfunctions.workflows import (
    InvalidRunId,
    RunBlocked,
    RunBusy,
    RunCorrupt,
    RunStoreUnavailable,
    WorkflowDefinitionError,
    WorkflowRuns,
    pipe,
    tool_step,
)
from openfunctions.workflows._pg import read_pg_workflow_records
from tests._pg import unique_name
from tests.workflows._proc import ROOT, assert_resumed_order_8, lines, sigkill, wait_for
from tests.workflows._proc import env as _env
from tests.workflows.test_durable import Crash, World, workflow

pytestmark = pytest.mark.anyio


@pytest.fixture
def db(pg_dsn):
    import asyncio

    asyncio.run(migrate_database(pg_dsn))
    return pg_dsn


def _runs(db, space, wf, world=None, **kw):
    return WorkflowRuns(database=db, space=space, workflows=[wf], registry=world.registry() if world else None, **kw)


async def test_a_run_is_journaled_as_rows_and_read_back_by_a_fresh_reader(db):
    space, world, wf = unique_name("wf"), World(), workflow()
    out = await _runs(db, space, wf, world).run(wf, {"n": 1}, run_id="order-1")
    assert out.ok and out.result == {"n": 202}
    rows = read_pg_workflow_records(db, space)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert [r.type for r in rows] == ["run_started", "step_settled", "step_settled", "step_started", "step_settled",
                                      "step_settled", "run_finished"]
    assert all(r.data["run_id"] == "order-1" for r in rows)
    reader = _runs(db, space, wf)  # another "process": lock-free read
    assert reader.show("order-1").status == "succeeded"
    assert [r["run_id"] for r in reader.list()] == ["order-1"]
    again = await _runs(db, space, wf, world).run(wf, {"n": 1}, run_id="order-1")
    assert again.result == out.result and world.charged == [102]  # the recorded outcome, nothing re-run
    assert _runs(db, unique_name("wf"), wf).list() == []  # spaces are apart


async def test_a_crash_in_a_read_step_resumes_after_the_last_settled_step(db):
    space, world, wf = unique_name("wf"), World(), workflow()
    crashing = world.lookup_crashing_at(2)  # the second lookup (step 3), after the write step settled
    first = _runs(db, space, wf)
    with pytest.raises(Crash):
        await first.run(wf, {"n": 1}, run_id="r", registry=crashing)
    await first.close()  # the dead process's connection goes (and its lock with it)
    state = _runs(db, space, wf).show("r")
    assert state.status == "running" and state.uncertain_steps() == []
    [out] = await _runs(db, space, wf, world).resume_interrupted()
    assert out.ok and out.resumed and out.result == {"n": 202}
    assert world.charged == [102]  # the settled write step was skipped


async def test_a_crash_in_a_write_step_blocks_until_resolved(db):
    space, world, wf = unique_name("wf"), World(), workflow()
    world.crash_in = {"charge"}
    first = _runs(db, space, wf, world)
    with pytest.raises(Crash):
        await first.run(wf, {"n": 1}, run_id="r")
    await first.close()
    world.crash_in = set()
    runs = _runs(db, space, wf, world)
    with pytest.raises(RunBlocked) as ei:
        await runs.resume("r")
    assert ei.value.details["steps"] == ["2"] and world.charged == [102]
    assert runs.show("r").status == "blocked"
    await runs.resolve("r", "2", applied=True, result={"n": 102, "charged": True}, by="ops")
    out = await runs.resume("r")
    assert out.ok and out.result == {"n": 202} and world.charged == [102]


async def test_two_writers_on_one_space_the_second_is_busy(db):
    space, wf = unique_name("wf"), workflow()
    async with _runs(db, space, wf) as held:
        with pytest.raises(RunBusy) as ei:
            await _runs(db, space, wf).open()
        assert space in ei.value.message and "another process" in ei.value.message
        async with _runs(db, unique_name("wf"), wf):  # another space: its own writer
            pass
        assert held.list() == []  # the holder reads its own fold
    async with _runs(db, space, wf):  # released on close
        pass


async def test_hostile_run_ids_and_spaces_are_refused(db):
    space, wf = unique_name("wf"), workflow()
    runs = _runs(db, space, wf, World())
    for bad in ["../x", "", "a b", "x" * 200, "r'; DROP TABLE of_workflow_records; --"]:
        with pytest.raises(InvalidRunId):
            await runs.run(wf, {"n": 1}, run_id=bad)
        with pytest.raises(InvalidRunId):
            runs.show(bad)
    with pytest.raises(WorkflowDefinitionError):
        WorkflowRuns(database=db, space="a'; --")
    with pytest.raises(WorkflowDefinitionError, match="not both"):
        WorkflowRuns("some-dir", database=db)
    with pytest.raises(WorkflowDefinitionError, match="a server serving their workflow tool gives them its own"):
        WorkflowRuns().list()  # no location: only a serving host places it
    assert read_pg_workflow_records(db, space) == []


async def test_retention_compacts_the_space_in_one_transaction(db):
    space, world, wf = unique_name("wf"), World(), workflow()
    async with _runs(db, space, wf, world, keep_runs=2) as runs:  # held open: compacts only when told (or 16 over)
        for i in range(4):
            assert (await runs.run(wf, {"n": i}, run_id=f"r{i}")).ok
        done = await runs.prune()
    assert done["kept"] == 2 and done["pruned"] == 2
    rows = read_pg_workflow_records(db, space)
    assert [r.type for r in rows] == ["run_snapshot", "run_snapshot", "compacted"]
    assert [r["run_id"] for r in _runs(db, space, wf).list()] == ["r2", "r3"]
    out = await _runs(db, space, wf, world).run(wf, {"n": 3}, run_id="r3")  # a snapshot folds as the run
    assert out.ok and out.result == {"n": 204} and len(world.charged) == 4


async def test_a_malformed_row_fails_closed_naming_its_seq(db):
    import psycopg

    space, world, wf = unique_name("wf"), World(), workflow()
    assert (await _runs(db, space, wf, world).run(wf, {"n": 1}, run_id="r")).ok
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE of_workflow_records SET data = '{\"run_id\": \"r\"}' WHERE space = %s AND seq = 2", (space,))
    with pytest.raises(RunCorrupt) as ei:
        _runs(db, space, wf).show("r")
    assert "seq 2" in ei.value.message and space in ei.value.message
    with pytest.raises(RunCorrupt):
        await _runs(db, space, wf).open()


async def test_a_missing_schema_names_db_migrate(fresh_db):
    wf = workflow()
    with pytest.raises(RunStoreUnavailable) as ei:
        await _runs(fresh_db, "default", wf).open()
    assert "db migrate" in ei.value.message and "workflows schema" in ei.value.message
    with pytest.raises(RunStoreUnavailable):
        _runs(fresh_db, "default", wf).list()


def _cli(tmp, url, *args, **extra):
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", "workflows", *args], cwd=ROOT,
                          env=_env(tmp, OPENFUNCTIONS_DATABASE_URL=url, **extra), capture_output=True, text=True,
                          timeout=120)


def test_the_cli_refuses_a_bad_url_with_its_password_redacted(tmp_path, fresh_db):
    bad = "postgresql://me:s3cret@127.0.0.1:1/nowhere"
    out = _cli(tmp_path, bad, "list")
    assert out.returncode == 2 and "s3cret" not in out.stderr and "cannot connect" in out.stderr
    assert "127.0.0.1" in out.stderr
    out = _cli(tmp_path, "", "list", "--database", fresh_db)
    assert out.returncode == 2 and "db migrate" in out.stderr
    out = _cli(tmp_path, "", "list", "--database", fresh_db, "--data-dir", str(tmp_path))
    assert out.returncode == 2 and "not both" in out.stderr
    # --data-dir wins over $OPENFUNCTIONS_DATABASE_URL: the files, not the (bad) database
    out = _cli(tmp_path, bad, "list", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 0 and out.stdout.strip() == "no workflow runs"
    out = _cli(tmp_path, fresh_db, "show", "../../etc/passwd")
    assert out.returncode == 2 and "run id '../../etc/passwd' is invalid" in out.stderr
    out = _cli(tmp_path, fresh_db, "list", "--space", "x; DROP TABLE of_schema")
    assert out.returncode == 2 and "space" in out.stderr and "invalid" in out.stderr


# -- real processes: SIGKILL a runner on the database --------------------------------------------------------


def _start_child(tmp, db, space, *args, **env):
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "workflows" / "_child.py"), space, *args], cwd=ROOT,
                            env=_env(tmp, WF_TEST_DATABASE=db, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_sigkill_during_a_write_step_blocks_and_never_reruns(tmp_path, db):
    space = unique_name("wf")
    charges = tmp_path / "charges.txt"
    child = _start_child(tmp_path, db, space, "run", "order-7", json.dumps({"amount": 30}),
                         WF_TEST_SLEEP_IN="charge", WF_TEST_SLEEP="120")
    try:
        wait_for(lambda: len(lines(charges)) == 1, "the charge to start")
    finally:
        sigkill(child)
    shown = _cli(tmp_path, db, "show", "order-7", "--json", "--space", space)  # $OPENFUNCTIONS_DATABASE_URL
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["status"] == "running" and state["uncertain"] == ["1"]
    # the dead runner's lock went with its connection: resume opens the space, and refuses the run
    resumed = _cli(tmp_path, "", "resume", "order-7", "--module", "tests.workflows._app:workflows", "--database", db,
                   "--space", space)
    assert resumed.returncode == 2, resumed.stderr
    assert "run order-7 is blocked: step(s) 1 (charge, tool charge)" in resumed.stderr
    assert len(lines(charges)) == 1  # never re-run blindly
    [row] = json.loads(_cli(tmp_path, db, "list", "--json", "--space", space).stdout)
    assert row["status"] == "blocked" and row["uncertain"] == ["1"]
    res = _cli(tmp_path, db, "resolve", "order-7", "1", "--applied", "--result", '{"charged": 30}', "--by", "ops",
               "--space", space)
    assert res.returncode == 0, res.stderr
    done = _cli(tmp_path, db, "resume", "order-7", "--module", "tests.workflows._app:workflows", "--json", "--space", space)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "succeeded" and out["result"] == {"ok": True, "balance": 70}
    assert len(lines(charges)) == 1


@pytest.mark.slow
def test_sigkill_during_a_read_step_resumes_on_the_next_start(tmp_path, db):
    space = unique_name("wf")
    charges, reads = tmp_path / "charges.txt", tmp_path / "reads.txt"
    child = _start_child(tmp_path, db, space, "run", "order-8", json.dumps({"amount": 5}),
                         WF_TEST_SLEEP_IN="slow_read", WF_TEST_SLEEP="120")
    try:
        wait_for(lambda: len(lines(reads)) == 1, "the read to start")
        # while it runs, it holds the space: another writer is busy
        busy = _start_child(tmp_path, db, space, "resume-all")
        _, err = busy.communicate(timeout=120)
        assert busy.returncode != 0 and "RunBusy" in err and "another process" in err
    finally:
        sigkill(child)
    assert len(lines(charges)) == 1
    assert_resumed_order_8(_start_child(tmp_path, db, space, "resume-all"), tmp_path)


async def test_a_held_writer_whose_connection_dies_reopens_the_space_on_its_next_call(db):
    import psycopg

    from openfunctions.store import StoreUnavailable

    space, world, wf = unique_name("wf"), World(), workflow()
    async with _runs(db, space, wf, world) as runs:
        assert (await runs.run(wf, {"n": 1}, run_id="a")).ok
        with psycopg.connect(db, autocommit=True) as conn:  # the database drops the writer's connection
            [(n,)] = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE application_name = %s", (f"openfunctions-workflows:{space}",)).fetchall()
        assert n == 1
        with pytest.raises(StoreUnavailable) as ei:  # the run's first write fails: nothing of it is committed
            await runs.run(wf, {"n": 2}, run_id="b")
        assert ei.value.certainty == "unknown" and world.looked == [1, 102, 2]
        out = await runs.run(wf, {"n": 2}, run_id="b")  # reopened: rows read again, lock taken again
        assert out.ok and out.result == {"n": 203}
        assert world.charged == [102, 103]  # the failed attempt's write step never ran (its start was not durable)
        with pytest.raises(RunBusy):
            await _runs(db, space, wf).open()
    assert [r["status"] for r in _runs(db, space, wf).list()] == ["succeeded", "succeeded"]


@pytest.mark.slow
def test_a_served_durable_workflow_on_the_database_resumes_when_the_server_starts_again(tmp_path, db):
    """`serve --module tests.workflows._app:durable` with its runs in PostgreSQL: SIGKILLed inside the read
    step, started again with no call, it finishes the run by itself (the charge not repeated)."""
    from tests.workflows.test_server_resume import _call_checkout, _serve, _stop

    space, data = unique_name("wf"), tmp_path / "data"
    reader = WorkflowRuns(database=db, space=space)
    proc = _serve(tmp_path, data, WF_TEST_DATABASE=db, WF_TEST_SPACE=space, WF_TEST_SLEEP_IN="slow_read",
                  WF_TEST_SLEEP="60")
    _call_checkout(proc)
    wait_for(lambda: lines(tmp_path / "reads.txt"), "slow_read to start")
    with pytest.raises(RunBusy):  # the server holds the space
        anyio.run(WorkflowRuns(database=db, space=space).open)
    sigkill(proc)
    [run] = reader.list()
    assert run["status"] == "running" and run["workflow"] == "checkout"
    proc = _serve(tmp_path, data, WF_TEST_DATABASE=db, WF_TEST_SPACE=space)
    try:
        wait_for(lambda: reader.list()[0]["status"] == "succeeded", "the restarted server to finish the run")
    finally:
        _stop(proc)
    assert reader.show(run["run_id"]).result == {"ok": True, "balance": 90}
    assert len(lines(tmp_path / "charges.txt")) == 1 and len(lines(tmp_path / "reads.txt")) == 2


async def test_concurrent_runs_and_parallel_branches_share_one_writer_in_seq_order(db):
    space, world = unique_name("wf"), World()
    wf = (pipe(name="fan").parallel(tool_step("charge"), tool_step("lookup"), tool_step("charge", lambda r: {"n": r["n"] + 1}))
          .then(lambda rs: sum(r["n"] for r in rs)))
    async with WorkflowRuns(database=db, space=space, workflows=[wf], registry=world.registry()) as runs:
        outs = await asyncio.gather(*(runs.run(wf, {"n": i}, run_id=f"r{i}") for i in range(8)))
    assert all(o.ok for o in outs) and [o.result for o in outs] == [3 * i + 101 for i in range(8)]
    rows = read_pg_workflow_records(db, space)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    again = WorkflowRuns(database=db, space=space)
    assert sorted(r["status"] for r in again.list()) == ["succeeded"] * 8
