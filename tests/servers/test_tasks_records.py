"""The task records and their one fold (servers/_task_records.py)."""

from __future__ import annotations

import dataclasses

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


def test_an_idempotent_calls_authority_and_its_rerun_are_in_the_fold_and_old_records_read_as_before():
    tid, old = rec.new_task_id(), rec.new_task_id()
    tasks = _fold([
        rec.created(tid, principal="p", tool="t", receipt_id="rcpt_1", ttl_ms=60_000, poll_interval_ms=1000,
                    arguments={"x": 1}, scopes=("b", "a")),
        rec.status(tid, rec.WORKING, message="re-running", rerun_of="rcpt_1", receipt_id="rcpt_2"),
        rec.created(old, principal="p", tool="t", receipt_id="rcpt_3", ttl_ms=60_000, poll_interval_ms=1000),
    ])
    t = tasks[tid]
    assert (t.arguments, t.scopes, t.rerun, t.rerun_of, t.receipt_id) == ({"x": 1}, ("b", "a"), True, "rcpt_1", "rcpt_2")
    o = tasks[old]
    assert (o.arguments, o.scopes, o.rerun, o.rerun_of, o.receipt_id) == (None, (), False, None, "rcpt_3")
    _, data = rec.status(old, rec.WORKING)
    assert "rerun_of" not in data and "receipt_id" not in data
    # rerun_of null (no receipt was journaled for the uncertain call) still marks the task re-run
    rec.apply(tasks, *rec.status(old, rec.WORKING, rerun_of=None, receipt_id="rcpt_4"))
    assert (tasks[old].rerun, tasks[old].rerun_of, tasks[old].receipt_id) == (True, None, "rcpt_4")


@pytest.mark.anyio
async def test_compaction_keeps_a_tasks_arguments_and_its_rerun(tmp_path, monkeypatch):
    from openfunctions.servers import _tasks_store

    tid = rec.new_task_id()
    path = tmp_path / "t.tasks.journal"
    log = await JournalLog.open(path, kind=rec.KIND)
    await log.append_many([
        rec.created(tid, principal="p", tool="t", receipt_id="rcpt_1", ttl_ms=60_000, poll_interval_ms=1000,
                    arguments={"x": 1}, scopes=["s"]),
        rec.status(tid, rec.WORKING, message="re-running", rerun_of="rcpt_1", receipt_id="rcpt_2"),
        rec.settled(tid, rec.COMPLETED, result={"content": []}, certainty="known"),
    ])
    await log.close()
    before = _fold([(r.type, r.data) for r in read_records(path)])
    monkeypatch.setattr(_tasks_store, "ROTATE_BYTES", 1)
    store = _tasks_store.FileTaskStore(path)

    async def nothing(*_a):
        raise AssertionError("nothing to recover")

    await store.open(recovered_receipts={}, find_receipts=nothing, write_receipt=nothing,
                     plan=lambda t: (_ for _ in ()).throw(AssertionError("a settled task is never planned")))
    await store.close()
    after = _fold([(r.type, r.data) for r in read_records(path)])
    # (compaction re-stamps the settled record's time: that is all that may differ)
    assert dataclasses.replace(after[tid], last_updated_at="") == dataclasses.replace(before[tid], last_updated_at="")
    assert after[tid].rerun_of == "rcpt_1" and after[tid].arguments == {"x": 1}
    assert list(tmp_path.glob("t.tasks.journal.seg-*"))  # it did compact
