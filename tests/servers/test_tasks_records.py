"""The task records and their one fold (servers/_task_records.py)."""

from __future__ import annotations

import pytest

from openfunctions.core.journal import JournalLog, read_records
from openfunctions.servers import _task_records as rec


def _fold(records):
    tasks: dict[str, rec.TaskState] = {}
    for type_, data in records:
        rec.apply(tasks, type_, data)
    return tasks


def test_a_task_moves_through_its_states_and_a_terminal_status_is_final():
    tid = rec.new_task_id()
    assert len(tid) == 37 and tid.startswith("task_")
    records = [
        rec.created(tid, principal="alice", tool="t", receipt_id="rcpt_x", ttl_ms=60_000, poll_interval_ms=500),
        rec.status(tid, rec.INPUT_REQUIRED, input_requests={"k": {"method": "elicitation/create"}}),
        rec.status(tid, rec.WORKING),
        rec.settled(tid, rec.COMPLETED, result={"content": []}, receipt={"receipt_id": "rcpt_x"}, certainty="known"),
        # Anything after a terminal status is ignored.
        rec.settled(tid, rec.FAILED, error={"code": -32603, "message": "late"}),
        rec.status(tid, rec.WORKING),
    ]
    t = _fold(records)[tid]
    assert (t.status, t.result, t.error, t.certainty, t.principal) == ("completed", {"content": []}, None, "known", "alice")
    assert t.input_requests == {} and t.terminal and not t.expired()


def test_input_required_keeps_only_the_outstanding_requests():
    tid = rec.new_task_id()
    t = _fold([
        rec.created(tid, principal=None, tool="t", receipt_id=None, ttl_ms=1, poll_interval_ms=1),
        rec.status(tid, rec.INPUT_REQUIRED, input_requests={"a": {}, "b": {}}),
        rec.status(tid, rec.INPUT_REQUIRED, input_requests={"b": {}}),
    ])[tid]
    assert t.status == "input_required" and list(t.input_requests) == ["b"]


def test_builders_refuse_statuses_that_belong_to_the_other_record():
    with pytest.raises(ValueError):
        rec.status("task_x", rec.COMPLETED)
    with pytest.raises(ValueError):
        rec.settled("task_x", rec.WORKING)


def test_records_for_unknown_tasks_are_ignored():
    assert _fold([rec.settled("task_nope", rec.CANCELLED)]) == {}


def test_an_expired_task_says_so():
    tid = rec.new_task_id()
    t = _fold([rec.created(tid, principal=None, tool="t", receipt_id=None, ttl_ms=0, poll_interval_ms=1)])[tid]
    assert t.expired()


@pytest.mark.anyio
async def test_the_fold_over_the_journal_at_recovery_equals_the_live_fold(tmp_path):
    tid = rec.new_task_id()
    records = [
        rec.created(tid, principal="p", tool="t", receipt_id="rcpt_1", ttl_ms=60_000, poll_interval_ms=1000),
        rec.status(tid, rec.INPUT_REQUIRED, input_requests={"q": {"method": "elicitation/create", "params": {}}}),
        rec.settled(tid, rec.CANCELLED, message="cancelled by tasks/cancel", certainty="unknown"),
    ]
    live: dict[str, rec.TaskState] = {}
    log = await JournalLog.open(tmp_path / "t.tasks.journal", kind=rec.KIND)
    for type_, data in records:
        await log.append(type_, data)
        rec.apply(live, type_, data)
    await log.close()
    recovered: dict[str, rec.TaskState] = {}
    for r in read_records(tmp_path / "t.tasks.journal"):
        rec.apply(recovered, r.type, r.data)
    assert recovered == live and recovered[tid].status == "cancelled"
