"""Agent runs as a core record stream: live fold = replayed fold, unknown records kept, and data dirs of the
previous code still read.

The fixture (tests/fixtures/records_v1/agent_runs) was written by ``RunJournal`` from before the port, with
what ``read_runs`` / ``read_history`` said for each run beside it (``expected.json``; see
tests/fixtures/records_v1/_make_agent_runs.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.adapters import Message
from openfunctions.agents import RunJournal, read_history, read_runs, runs_journal_path
from openfunctions.agents import _records as R
from openfunctions.core.journal import JournalLog
from openfunctions.core.records import Entry, RecordMalformed, UnknownRecords

from .._datadirs import copy_data_dir

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "agent_runs"

pytestmark = pytest.mark.anyio


def _runs(data_dir: Path) -> dict[str, Any]:
    return {rid: r.to_dict() for rid, r in read_runs(data_dir).items()}


def _histories(data_dir: Path, run_ids) -> dict[str, Any]:
    return {rid: [m.to_dict() for m in read_history(data_dir, rid)] for rid in run_ids}


def _files(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((data_dir / "journal").glob("runs*.journal*"))
            if not p.name.endswith(".lock")}


async def test_run_journals_written_by_the_previous_code_read_to_the_same_runs_and_conversations(tmp_path):
    data = copy_data_dir(FIXTURE, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    assert {r["status"] for r in expected["runs"].values()} == {"completed", "failed", "timeout", "interrupted"}
    assert _runs(data) == expected["runs"]  # lock-free, every segment and the live file
    assert _histories(data, expected["runs"]) == expected["history"]
    before = _files(data)

    journal = await RunJournal.open_in(data)  # the writer's open: the same fold of the live file
    try:
        assert journal.interrupted == [] and journal.unknown == []
        live = {rid: r.to_dict() for rid, r in journal.state.items()}
        # the live file holds one whole run, and a verification and fulfilment of a run started in the segment
        whole = [rid for rid, r in journal.state.items() if r.agent != "?"]
        assert whole and all(live[rid] == expected["runs"][rid] for rid in whole)
        (shipped,) = [rid for rid in live if rid not in whole]
        assert live[shipped]["fulfilment"] == expected["runs"][shipped]["fulfilment"]
    finally:
        await journal.close()
    assert _files(data) == before  # opening wrote nothing: every run was finished
    assert _runs(data) == expected["runs"]


async def _raw(data_dir: Path, records: list[tuple[str, dict[str, Any]]]) -> Path:
    path = runs_journal_path(data_dir)
    log = await JournalLog.open(path, kind=R.KIND)
    await log.append_many(records)
    await log.close()
    return path


RID = "run_" + "a" * 32


def _started(rid: str = RID, agent: str = "a") -> dict[str, Any]:
    return R.started(run_id=rid, agent=agent, provider="scripted", model="m", instructions="x", tools=[], limits={},
                     task="t", principal=None, parent_run_id=None, parent_receipt_id=None)


async def test_a_record_type_this_version_does_not_know_is_kept_unfolded_never_dropped(tmp_path):
    assert R.AGENT_RUNS.unknown is UnknownRecords.KEEP
    newer = ("run_paused", {"v": 1, "run_id": RID, "why": "a newer writer's record"})
    path = await _raw(tmp_path, [(R.STARTED, _started()), newer,
                                 (R.FINISHED, R.finished(run_id=RID, status="completed", rounds=0,
                                                         usage={}, receipts=[], text="ok"))])
    before = path.read_bytes()
    assert read_runs(tmp_path)[RID].status == "completed"  # the runs it knows still read

    journal = await RunJournal.open_in(tmp_path)
    try:
        assert journal.unknown == [newer] and journal.state[RID].status == "completed"
        await journal.append(R.STARTED, _started("run_" + "b" * 32))
        await journal.append(*newer[:1], {**newer[1], "run_id": "run_" + "b" * 32})
        assert [t for t, _ in journal.unknown] == ["run_paused", "run_paused"]
    finally:
        await journal.close()
    assert path.read_bytes().startswith(before)  # kept where it was written
    assert sum(1 for line in path.read_bytes().splitlines() if b'"run_paused"' in line) == 2


async def test_a_known_record_that_cannot_be_folded_is_refused_by_name_not_skipped(tmp_path):
    await _raw(tmp_path, [(R.STARTED, _started()), (R.ROUND, {"v": 1, "round": 1, "tool_calls": []})])
    with pytest.raises(RecordMalformed, match=r"seq 2 \('run_round'\).*runs\.journal") as e:
        read_runs(tmp_path)
    assert e.value.code == "record_malformed"
    with pytest.raises(RecordMalformed, match="run_round"):
        await RunJournal.open_in(tmp_path)


def test_a_runs_conversation_is_the_same_fold_as_its_summary() -> None:
    records = [(R.STARTED, _started()),
               (R.MESSAGES, R.messages_(run_id=RID, n=0, messages=[Message.system("s"), Message.user("u")])),
               (R.MESSAGES, {"v": 1, "run_id": RID, "round": 1, "messages": [{"role": 7}], "cut": 0, "dropped": 0}),
               (R.MESSAGES, R.messages_(run_id=RID, n=1, messages=[Message.assistant("a")]))]
    run = R.fold(records)[RID]
    assert [m.content for m in run.history()] == ["s", "u", "a"]  # the unreadable message is skipped
    assert R.history(records, RID) == run.history() and R.history(records, "run_" + "0" * 32) == []
    assert "messages" not in run.to_dict()  # the summary's shape is unchanged


# -- live vs replay ----------------------------------------------------------------------------

RUNS = st.sampled_from(["run_" + c * 32 for c in "abc"])
STATUS = st.sampled_from(R.TERMINAL[:-1])
RECORD = st.one_of(
    st.builds(lambda r: (R.STARTED, _started(r, agent=r[4])), RUNS),
    st.builds(lambda r, n: (R.ROUND, R.round_(run_id=r, n=n, model="m", stop_reason="tool_use",
                                              usage={"input_tokens": n, "output_tokens": 1},
                                              tool_calls=[{"id": "c", "name": "t", "receipt_id": f"rcpt_{n}",
                                                           "outcome": "succeeded", "error_code": None}], text="t")),
              RUNS, st.integers(1, 3)),
    st.builds(lambda r, n, text: (R.MESSAGES, R.messages_(run_id=r, n=n, messages=[Message.user(text)])),
              RUNS, st.integers(0, 3), st.text(max_size=5)),
    st.builds(lambda r, s: (R.FINISHED, R.finished(run_id=r, status=s, rounds=1, usage={}, receipts=[], text=s)),
              RUNS, STATUS),
    st.builds(lambda r: (R.CLAIM, R.claim(run_id=r, agent="a", text="done", requires_verification=["rcpt_1"])), RUNS),
    st.builds(lambda r: (R.VERIFIED, R.verified(run_id=r, claim_id="claim_" + "0" * 32, evidence={"kind": "receipt"},
                                                covers=["rcpt_1"], by=None)), RUNS),
    st.builds(lambda r: (R.FULFILLED, R.fulfilled(run_id=r, claim_ids=[], reason="op", by=None)), RUNS),
    st.builds(lambda r: ("run_paused", {"v": 1, "run_id": r}), RUNS),
    st.just(("reopen", {})),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(RECORD, st.booleans()), max_size=25))
def test_the_live_run_fold_equals_the_fold_replayed_from_disk(steps):
    async def main(data: Path) -> None:
        written: list[Entry] = []  # everything appended, as the full (conversation) view folds it live
        journal = await RunJournal.open_in(data)
        try:
            for (type_, data_), wait in steps:
                if type_ == "reopen":
                    await journal.close()
                    journal = await RunJournal.open_in(data)  # recovery: unfinished runs end interrupted
                    written += [Entry(t, d) for t, d in _recovered(journal, data)]
                    continue
                await journal.append(type_, data_, wait=wait)
                written.append(Entry(type_, data_))
                if wait:  # every earlier record is durable now
                    assert _runs(data) == {rid: r.to_dict() for rid, r in journal.state.items()}
            live = {rid: r.to_dict() for rid, r in journal.state.items()}
        finally:
            await journal.close()
        assert _runs(data) == live
        full = R.AGENT_RUNS.fold(written)
        assert _histories(data, full) == {rid: [m.to_dict() for m in r.history()] for rid, r in full.items()}
        summary = R.AGENT_RUNS.fold(e for e in written if R.in_summary(e.type))
        assert {rid: r.to_dict() for rid, r in summary.items()} == live

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d))


def _recovered(journal: RunJournal, data: Path) -> list[tuple[str, dict[str, Any]]]:
    """The ``run_finished`` records the reopen's recovery wrote: the file's last records, one group at open."""
    from openfunctions.core.journal import read_records

    if not journal.interrupted:
        return []
    out = [(r.type, r.data) for r in list(read_records(runs_journal_path(data)))[-len(journal.interrupted):]]
    assert [d["run_id"] for _, d in out] == journal.interrupted and all(d["recovered"] for _, d in out)
    return out
