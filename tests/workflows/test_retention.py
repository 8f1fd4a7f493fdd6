"""Retention: finished runs past ``keep_runs``/``keep_seconds`` are compacted away; unfinished ones stay.

Also the compaction's crash cases: a crash after the rotation (before the snapshots) loses nothing; a crash
after the snapshots (before the old segment is deleted) does not bring pruned runs back.
"""

from __future__ import annotations

import pytest

from openfunctions.core.journal import JournalLog, read_records, segment_paths
from openfunctions.core.records import _file as record_files
from openfunctions.workflows import RunBlocked, WorkflowRuns, pipe, tool_step

from .test_durable import Crash, World, workflow


async def _two_unfinished_runs(tmp_path, world: World):
    """A blocked run (crashed inside the charge) and an interrupted one (crashed in a read after its charge)."""
    wf, cl = workflow(), pipe(tool_step("charge", {"n": 7}), tool_step("lookup", {"n": 1}), name="cl")
    world.crash_in = {"charge"}
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry()).run(wf, {"n": 1}, run_id="blocked")
    world.crash_in = {"lookup"}
    world.charged.clear()
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[cl], registry=world.registry()).run(cl, None, run_id="interrupted")
    world.crash_in = set()
    assert world.charged == [7]
    return wf, cl


@pytest.mark.anyio
async def test_old_finished_runs_go_and_unfinished_ones_stay(tmp_path):
    world = World()
    wf, cl = await _two_unfinished_runs(tmp_path, world)
    async with WorkflowRuns(tmp_path, workflows=[wf, cl], registry=world.registry(), keep_runs=2, compact_every=1) as runs:
        with pytest.raises(RunBlocked):
            await runs.resume("blocked")
        for i in range(5):
            assert (await runs.run(wf, {"n": i}, run_id=f"done-{i}")).ok
        assert runs.last_compaction is not None and runs.last_compaction["pruned"] >= 1
        live = {r["run_id"]: r["status"] for r in runs.list()}
    assert live == {"blocked": "blocked", "interrupted": "running", "done-3": "succeeded", "done-4": "succeeded"}
    assert segment_paths(runs.path) == []  # the compaction deleted what it replaced

    # a fresh process folds the compacted journal (snapshots) to the same runs, and the unfinished ones go on
    again = WorkflowRuns(tmp_path, workflows=[wf, cl], registry=world.registry(), keep_runs=2)
    assert {r["run_id"]: r["status"] for r in again.list()} == live
    assert again.show("done-4").result == {"n": 202 + 3}
    out = await again.resume("interrupted")
    assert out.ok and world.charged.count(7) == 1  # the settled charge is not repeated
    with pytest.raises(RunBlocked):
        await again.resume("blocked")
    # age: keep_seconds=0 drops every finished run at open; the blocked one stays
    async with WorkflowRuns(tmp_path, workflows=[wf, cl], keep_runs=None, keep_seconds=0) as aged:
        assert [r["run_id"] for r in aged.list()] == ["blocked"]


@pytest.mark.anyio
async def test_prune_compacts_on_demand_and_a_crash_in_mid_compaction_loses_nothing(tmp_path, monkeypatch):
    world = World()
    wf = workflow()
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry(), keep_runs=None, keep_seconds=None)
    for i in range(3):
        await runs.run(wf, {"n": i}, run_id=f"r{i}")

    # crash after the rotation, before the snapshots: the segment still holds everything
    log = await JournalLog.open(runs.path, kind="workflow-runs")
    await log.rotate(meta={"format": "openfunctions.workflow-runs", "version": 2})
    await log.close()
    assert len(segment_paths(runs.path)) == 1
    assert [r["run_id"] for r in runs.list()] == ["r0", "r1", "r2"]

    # crash after the snapshots, before the segments are deleted: pruned runs do not come back
    monkeypatch.setattr(record_files, "_unlink", lambda path: None)
    keep_one = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry(), keep_runs=1, keep_seconds=None)
    async with keep_one:  # an open compacts when runs are past retention
        assert keep_one.last_compaction == {"kept": 1, "pruned": 2, "segments": 2}
        assert (await keep_one.prune())["pruned"] == 0  # on demand: nothing left to drop
    monkeypatch.undo()
    assert len(segment_paths(runs.path)) >= 2  # left behind by the "crash" (the second prune's one too)
    assert [r["run_id"] for r in WorkflowRuns(tmp_path).list()] == ["r2"]
    async with WorkflowRuns(tmp_path, workflows=[wf], keep_runs=1) as reopened:  # an open finishes the job
        assert [r["run_id"] for r in reopened.list()] == ["r2"]
    assert segment_paths(runs.path) == []
    assert {r.type for r in read_records(runs.path)} == {"run_snapshot", "compacted"}


def test_retention_options_are_checked():
    from openfunctions.workflows import WorkflowDefinitionError

    with pytest.raises(WorkflowDefinitionError, match="keep_runs"):
        WorkflowRuns("/nonexistent", keep_runs=-1)
    with pytest.raises(WorkflowDefinitionError, match="keep_seconds"):
        WorkflowRuns("/nonexistent", keep_seconds="a week")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_version_1_run_file_is_migrated_into_the_shared_journal(tmp_path):
    from openfunctions.workflows._runs import run_path, runs_dir

    wf = pipe(lambda n: n + 1, name="inc")
    old = run_path(runs_dir(tmp_path), "old-1")
    log = await JournalLog.open(old, kind="workflow-run", meta={
        "format": "openfunctions.workflow-run", "version": 1, "run_id": "old-1", "workflow": "inc"})
    await log.append_many([
        ("run_started", {"run_id": "old-1", "workflow": "inc", "digest": wf.digest, "input": 1}),
        ("step_settled", {"step": "0", "name": "<lambda>", "status": "succeeded", "result": 2}),
        ("run_finished", {"status": "succeeded", "result": 2}),
    ])
    await log.close()
    async with WorkflowRuns(tmp_path, workflows=[wf]) as runs:
        assert [(r["run_id"], r["status"]) for r in runs.list()] == [("old-1", "succeeded")]
        assert (await runs.run(wf, 1, run_id="old-1")).result == 2  # its recorded outcome, not a new run
    assert not old.exists() and not (old.parent / (old.name + ".lock")).exists()
    assert WorkflowRuns(tmp_path).show("old-1").steps["0"].result == 2
