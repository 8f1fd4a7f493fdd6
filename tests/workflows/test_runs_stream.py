"""Workflow runs as a core record stream: live fold = replayed fold, and data dirs of the previous code still read.

The fixtures (tests/fixtures/records_v1/workflows*) were written by ``WorkflowRuns`` from before the port,
with what ``show(run).to_dict()`` said for each run beside them (``expected.json``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog, segment_paths
from openfunctions.core.records import Entry, FileRecordLog, UnknownRecords, replay
from openfunctions.workflows import RunCorrupt, WorkflowRuns
from openfunctions.workflows._runlog import WORKFLOW_RUNS

from .._datadirs import copy_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"

pytestmark = pytest.mark.anyio


def _copy(name: str, dest: Path) -> Path:
    """A private copy of a fixture data dir (a journal refuses a file others may write)."""
    return copy_data_dir(FIXTURES / name, dest)


@pytest.mark.parametrize("name", ["workflows", "workflows_compacted"])
async def test_a_run_journal_written_by_the_previous_code_opens_to_the_same_runs(tmp_path, name):
    data = _copy(name, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    runs = WorkflowRuns(data, keep_runs=None, keep_seconds=None)
    assert {s["run_id"]: runs.show(s["run_id"]).to_dict() for s in runs.list()} == expected  # lock-free
    async with runs:  # the writer's open: the same fold
        assert {s["run_id"]: runs.show(s["run_id"]).to_dict() for s in runs.list()} == expected
        await runs.prune()  # and a compaction by this code keeps every run as it was
    assert {s["run_id"]: runs.show(s["run_id"]).to_dict() for s in runs.list()} == expected
    assert segment_paths(runs.path) == []


async def test_a_record_type_this_version_does_not_know_makes_the_journal_unreadable_not_partial(tmp_path):
    assert WORKFLOW_RUNS.unknown is UnknownRecords.REFUSE
    path = tmp_path / "workflows" / "runs.journal"
    raw = await JournalLog.open(path, kind="workflow-runs", meta={"format": "openfunctions.workflow-runs", "version": 2})
    await raw.append_many([("run_started", {"run_id": "r", "workflow": "w", "digest": "sha256:x", "input": None}),
                           ("step_paused", {"run_id": "r", "step": "0"})])
    await raw.close()
    before = path.read_bytes()
    with pytest.raises(RunCorrupt, match=r"seq 2 \(line 3\).*unknown record type 'step_paused'"):
        WorkflowRuns(tmp_path).list()
    with pytest.raises(RunCorrupt, match="unknown record type 'step_paused'"):
        await WorkflowRuns(tmp_path).open()
    assert path.read_bytes() == before


# -- live vs replay ----------------------------------------------------------------------------

RUNS = st.sampled_from(["a", "b", "c"])
STEPS = st.sampled_from(["0", "1"])
RECORD = st.one_of(
    st.builds(lambda r: ("run_started", {"run_id": r, "workflow": "w", "digest": "sha256:d", "input": {"r": r}}), RUNS),
    st.builds(lambda r, p: ("step_started", {"run_id": r, "step": p, "name": "s" + p, "tool": "t", "params": {}}),
              RUNS, STEPS),
    st.builds(lambda r, p, status, v: ("step_settled", {
        "run_id": r, "step": p, "name": "s" + p, "status": status, "result": 1 if status == "succeeded" else None,
        **({"requires_verification": True} if v and status == "succeeded" else {}),
        **({"uncertain": True} if status != "succeeded" else {})}),
        RUNS, STEPS, st.sampled_from(["succeeded", "failed", "cancelled"]), st.booleans()),
    st.builds(lambda r, p: ("run_blocked", {"run_id": r, "steps": [p], "reason": "uncertain"}), RUNS, STEPS),
    st.builds(lambda r, p, a: ("step_resolved", {"run_id": r, "step": p, "applied": a, "by": "op",
                                                 **({"result": 2} if a else {})}), RUNS, STEPS, st.booleans()),
    st.builds(lambda r, p: ("step_verified", {"run_id": r, "step": p, "receipt_id": "rcpt_v", "tool": "v", "by": None}),
              RUNS, STEPS),
    st.builds(lambda r, status: ("run_finished", {"run_id": r, "status": status}), RUNS,
              st.sampled_from(["succeeded", "failed", "cancelled"])),
    st.builds(lambda r: ("compact", {"drop": r}), RUNS),
    st.just(("reopen", {})),
)


def _valid(states: dict, type_: str, data: dict) -> bool:
    """Whether a writer could have written this record now (the fold refuses what no writer writes)."""
    try:
        WORKFLOW_RUNS.fold([Entry(type_, data, time="2026-01-01T00:00:00Z")], {k: _copy_state(v) for k, v in states.items()})
    except RunCorrupt:
        return False
    return True


def _copy_state(state):
    import copy

    return copy.deepcopy(state)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, max_size=30))
def test_the_live_run_fold_equals_the_fold_replayed_from_disk(records):
    async def main(path: Path) -> None:
        log = await FileRecordLog.open(WORKFLOW_RUNS, path)
        try:
            for type_, data in records:
                if type_ == "compact":  # retention: the named run is dropped, if finished
                    keep = [(t, d) for t, d in WORKFLOW_RUNS.snapshot(log.state)
                            if not (d["run_id"] == data["drop"] and log.state[d["run_id"]].terminal)]
                    await log.compact(keep, kept=len(keep), pruned=len(log.state) - len(keep))
                elif type_ == "reopen":
                    await log.close()
                    log = await FileRecordLog.open(WORKFLOW_RUNS, path)
                elif _valid(log.state, type_, data):
                    await log.append(type_, data)
                assert replay(WORKFLOW_RUNS, path).state == log.state
        finally:
            await log.close()
        assert WorkflowRuns(path.parent.parent)._read() == log.state  # what list/show read, lock-free

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d) / "workflows" / "runs.journal")
