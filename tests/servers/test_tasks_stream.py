"""MCP tasks as a core record stream: live fold = replayed fold, and data dirs of the previous code still read.

The fixtures (tests/fixtures/records_v1/tasks*) were written by the task store from before the port,
with the state they folded to beside them (``expected.json``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog, segment_paths
from openfunctions.core.records import FileRecordLog, UnknownRecords, replay
from openfunctions.servers import _task_records as rec
from openfunctions.servers._tasks_store import FileTaskStore, fold

from .._datadirs import copy_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"
FAR = 4102444800000  # 2100: nothing here expires

pytestmark = pytest.mark.anyio


def _copy(name: str, dest: Path) -> Path:
    """A private copy of a fixture data dir (a journal refuses a file others may write)."""
    return copy_data_dir(FIXTURES / name, dest)


def _as_json(tasks: dict[str, rec.TaskState]) -> dict:
    return json.loads(json.dumps({k: dataclasses.asdict(v) for k, v in tasks.items()}))


async def _nothing(*_a):
    raise AssertionError("every fixture task is settled: nothing to recover")


@pytest.mark.parametrize("name", ["tasks", "tasks_compacted"])
async def test_a_task_journal_written_by_the_previous_code_opens_to_the_same_tasks(tmp_path, name):
    data = _copy(name, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    path = data / "journal" / "default.tasks.journal"
    assert _as_json(replay(rec.TASKS, path).state) == expected
    store = FileTaskStore(path)
    assert await store.open(recovered_receipts={}, find_receipts=_nothing, write_receipt=_nothing) == []
    assert _as_json(store.tasks) == expected
    await store.close()
    if name == "tasks_compacted":
        assert len(segment_paths(path)) == 1  # its history stays, unread: the header says it is superseded


async def test_a_newer_servers_record_type_is_kept_through_a_compaction(tmp_path, monkeypatch):
    from openfunctions.servers import _tasks_store

    path = tmp_path / "t.tasks.journal"
    tid = rec.new_task_id()
    raw = await JournalLog.open(path, kind=rec.KIND)
    await raw.append_many([
        rec.created(tid, principal=None, tool="t", receipt_id=None, ttl_ms=1, poll_interval_ms=1, expires_at_ms=FAR),
        ("task.progress", {"task_id": tid, "at": "2099-01-01T00:00:00Z", "message": "from a newer server"}),
        rec.settled(tid, rec.COMPLETED, result={"content": []}),
    ])
    await raw.close()
    assert rec.TASKS.unknown is UnknownRecords.KEEP
    monkeypatch.setattr(_tasks_store, "ROTATE_BYTES", 1)
    store = FileTaskStore(path)
    await store.open(recovered_receipts={}, find_receipts=_nothing, write_receipt=_nothing)
    # not folded: the message is the settled record's (None), not the unknown record's
    assert store.tasks[tid].status == "completed" and store.tasks[tid].message is None
    await store.close()
    after = replay(rec.TASKS, path)
    assert [(r.type, r.data["message"]) for r in after.unknown] == [("task.progress", "from a newer server")]


@pytest.mark.parametrize("header", [{}, {"compacted": True}], ids=["this-version", "earlier-version"])
async def test_a_compaction_that_crashed_right_after_its_rotation_loses_no_task(tmp_path, header):
    path = tmp_path / "t.tasks.journal"
    tid = rec.new_task_id()
    store = FileTaskStore(path)
    await store.record(*rec.created(tid, principal="p", tool="t", receipt_id="rcpt_1", ttl_ms=1, poll_interval_ms=1,
                                    expires_at_ms=FAR))
    await store.record(*rec.settled(tid, rec.COMPLETED, result={"content": []}, certainty="known"))
    assert store.log is not None
    await store.log.log.rotate(meta=header)  # a compaction's first step (either version's header), then the crash
    await store.close()
    again = FileTaskStore(path)
    await again.open(recovered_receipts={}, find_receipts=_nothing, write_receipt=_nothing)
    assert again.tasks[tid].status == "completed" and again.tasks[tid].result == {"content": []}
    await again.close()


# -- live vs replay ----------------------------------------------------------------------------

IDS = [f"task_{i:032x}" for i in range(1, 4)]
TID = st.sampled_from(IDS)
RECORDS = st.one_of(
    st.builds(lambda t, p: rec.created(t, principal=p, tool="t", receipt_id="rcpt_" + t[5:], ttl_ms=1000,
                                       poll_interval_ms=100, expires_at_ms=FAR),
              TID, st.sampled_from([None, "alice"])),
    st.builds(lambda t, m: rec.status(t, rec.WORKING, message=m), TID, st.sampled_from([None, "half"])),
    st.builds(lambda t: rec.status(t, rec.INPUT_REQUIRED, input_requests={"k": {"method": "x"}}), TID),
    st.builds(lambda t: rec.status(t, rec.WORKING, rerun_of="rcpt_old", receipt_id="rcpt_new"), TID),
    st.builds(lambda t, s: rec.settled(t, s, result={"content": []} if s == rec.COMPLETED else None,
                                       error={"code": 1, "message": "x"} if s == rec.FAILED else None),
              TID, st.sampled_from(sorted(rec.TERMINAL))),
    st.just(("compact", {})),
    st.just(("reopen", {})),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORDS, max_size=25))
def test_the_live_task_fold_equals_the_fold_replayed_from_disk(records):
    async def main(path: Path) -> None:
        store = FileTaskStore(path)
        for type_, data in records:
            if type_ == "compact":
                if store.log is not None:
                    await store.log.compact()
            elif type_ == "reopen":
                await store.close()
                store = FileTaskStore(path)
                if os.path.exists(path):
                    store.log = await FileRecordLog.open(rec.TASKS, path)
            else:
                await store.record(type_, data)
            if os.path.exists(path):
                assert replay(rec.TASKS, path).state == store.tasks
        live = dict(store.tasks)
        await store.close()
        # the records as pairs, folded without any file, say the same (compaction only re-stamps times)
        if live:
            assert {k: dataclasses.replace(v, last_updated_at="") for k, v in replay(rec.TASKS, path).state.items()} \
                == {k: dataclasses.replace(v, last_updated_at="") for k, v in live.items()}
        plain = [r for r in records if r[0] not in ("compact", "reopen")]
        assert {k: dataclasses.replace(v, last_updated_at="") for k, v in fold(plain).items()} \
            == {k: dataclasses.replace(v, last_updated_at="") for k, v in live.items()}

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d) / "t.tasks.journal")
