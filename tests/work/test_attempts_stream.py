"""The attempt journal as a core record stream: a data dir written by the previous code opens to the same
state, the live fold equals the fold replayed from disk across fenced appends and takeovers, and a record
this version does not know (or cannot fold) stops the controller by name instead of being skipped.

The fixture (tests/fixtures/records_v1/work_attempts) was written by the controller from before the port,
with its live state beside it (see tests/fixtures/records_v1/_make_work_attempts.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog, read_records
from openfunctions.core.records import RecordMalformed, RecordStreamError, UnknownRecords, UnknownRecordType
from openfunctions.work import records as R
from openfunctions.work._backend import FileAttemptLog
from openfunctions.work._errors import LeaseLost
from openfunctions.work._lease import LeaseStore
from openfunctions.work._state import ATTEMPTS, STATES, WorkState, fold

from .._datadirs import copy_data_dir
from ..servers.conftest import server_env
from .conftest import WorkEnv
from .test_fold import _Tools

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "work_attempts"

pytestmark = pytest.mark.anyio


def _norm(state: WorkState) -> Any:
    return json.loads(json.dumps(state.snapshot(), sort_keys=True, default=str))


def _fixture_env(tmp_path: Path) -> WorkEnv:
    env = WorkEnv(tmp_path)
    shutil.copy(FIXTURE / "catalog.toml", env.catalog_path)
    copy_data_dir(FIXTURE / "data", env.data)
    return env


async def test_a_data_dir_written_by_the_previous_code_opens_to_the_same_state_and_goes_on(tmp_path):
    env = _fixture_env(tmp_path)
    expected = json.loads((FIXTURE / "expected.json").read_text())
    assert {a["state"] for a in expected["attempts"].values()} == {"cancelled", "completed", "blocked"}
    assert _norm(FileAttemptLog(env.work_dir).fold_sync()) == expected  # lock-free, as `work attempts` reads
    tools = _Tools()
    ctl = await env.open(tools.build())
    try:
        assert ctl.lease is not None and ctl.lease.generation == 5  # the fixture's lease file goes on counting
        new = env.work_dir / "attempts" / "g0000000005.jsonl"
        with open(new, "rb") as f:  # the format keeps its version: the same header kind and meta
            header = json.loads(f.readline())
        assert header["kind"] == "attempt" and header["meta"] == {}
        # The catalog's digest covers its workspace's path, which moved with the copy: recovery fails the
        # blocked attempt (an attempt bound to another catalog can never go on). Nothing else changed.
        [blocked] = [k for k, a in expected["attempts"].items() if a["state"] == "blocked"]
        assert [(r.type, r.data.get("to"), (r.data.get("reason") or {}).get("code")) for r in read_records(new)] == [
            ("lease_acquired", None, None), ("transition", "failed", "catalog_changed")]
        now = _norm(ctl.state)
        assert now["attempts"][blocked]["state"] == "failed"
        now["attempts"][blocked] = expected["attempts"][blocked]
        assert now == expected
        prv = (await ctl.preview([{"step": "look"}], principal="agent"))["previewId"]
        assert prv in ctl.state.previews
        # the backend's durable fold, the controller's and a replay from disk agree
        assert _norm(ctl.custody.log.state) == _norm(ctl.state) == _norm(FileAttemptLog(env.work_dir).fold_sync())
        segments = sorted((env.work_dir / "attempts").glob("g*.jsonl"))
        assert _norm(fold(r for p in segments for r in read_records(p))) == _norm(ctl.state)
    finally:
        await ctl.close()


async def _append_raw(seg: Path, records: list[tuple[str, dict[str, Any]]]) -> None:
    log = await JournalLog.open(seg, kind="attempt")
    await log.append_many(records)
    await log.close()


async def test_a_record_type_this_version_does_not_know_stops_the_controller_by_name(tmp_path):
    assert ATTEMPTS.unknown is UnknownRecords.REFUSE
    env = _fixture_env(tmp_path)
    last = env.work_dir / "attempts" / "g0000000004.jsonl"
    await _append_raw(last, [("intent_v2", {"attempt_id": "att_x", "lease_generation": 4})])  # a newer version's
    before = last.read_bytes()
    for _ in range(2):  # refused every time, and the refusal holds no lease: the second try is refused the same
        with pytest.raises(UnknownRecordType, match=r"g0000000004\.jsonl.*seq 2 \('intent_v2', lease generation 4\)") as e:
            await env.open(_Tools().build())
        assert e.value.code == "record_type_unknown" and e.value.details["type"] == "intent_v2"
    assert [p.name for p in sorted((env.work_dir / "attempts").glob("g*.jsonl"))][-1] == "g0000000004.jsonl", \
        "no generation's file was made after a record it cannot read"
    assert last.read_bytes() == before
    # the operator's view refuses the same way, naming the record (exit 1, no traceback)
    cli = subprocess.run([sys.executable, "-m", "openfunctions.servers", "work", "list-uncertain", "--data-dir",
                          str(env.data)], env=server_env(), capture_output=True, text=True, timeout=60)
    assert cli.returncode == 1 and "seq 2 ('intent_v2', lease generation 4)" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr


async def test_a_known_record_that_cannot_be_folded_is_refused_by_name(tmp_path):
    env = _fixture_env(tmp_path)
    last = env.work_dir / "attempts" / "g0000000004.jsonl"
    await _append_raw(last, [("attempt_started", {"attempt_id": "att_x", "lease_generation": 4})])  # no number, no plan
    with pytest.raises(RecordMalformed, match=r"g0000000004\.jsonl.*seq 2 \('attempt_started'.*KeyError") as e:
        FileAttemptLog(env.work_dir).fold_sync()
    assert e.value.code == "record_malformed"
    with pytest.raises(RecordMalformed):
        await env.open(_Tools().build())


async def test_the_journal_never_compacts(tmp_path):
    leases = LeaseStore(tmp_path, ttl=10)
    log = FileAttemptLog(tmp_path).bind(leases)
    await log.open(await leases.acquire())
    assert log.log is not None
    with pytest.raises(RecordStreamError, match="does not compact"):
        await log.log.compact()
    await log.close()


# -- live vs replay ----------------------------------------------------------------------------

ATT = st.sampled_from(["att_a", "att_b"])
OP = st.sampled_from(["op_1", "op_2", "op_3"])
EPOCH = st.integers(0, 3)
PLAN = st.just([{"step": "s", "params": {}}])


def _verification(attempt_id: str, passed: bool, n: int) -> R.Rec:
    return R.verification(attempt_id=attempt_id, outcome={
        "verificationId": f"ver_{n}", "passed": passed, "accepted": passed, "checks": [], "mutation_epoch": n,
        "proof": {"epoch": n} if passed else None, "artifacts": [f"art_{n}"]})


RECORD = st.one_of(
    st.builds(lambda g: R.lease_acquired(owner="own", generation=g, pid=1, catalog_digest="c"), st.integers(1, 9)),
    st.builds(lambda p: R.preview_saved(preview_id=p, principal="agent", plan=[{"step": "s", "params": {}}],
                                        plan_digest="d", catalog_digest="c", artifact_id=None, created_at="t"),
              st.sampled_from(["prv_1", "prv_2"])),
    st.builds(lambda a, n, plan: R.attempt_started(attempt_id=a, number=n, preview_id="prv_1", principal="agent",
                                                   plan=plan, plan_digest="d", catalog_digest="c"),
              ATT, st.integers(1, 3), PLAN),
    st.builds(lambda a, o, effect, idem, rerun: R.intent(
        attempt_id=a, operation_id=o, plan_index=0, step="s", params={"o": o}, effect=effect, idempotent=idem,
        input_digest="i", readback=None, rerunnable=rerun), ATT, OP, st.sampled_from(["write", "external"]),
        st.booleans(), st.booleans()),
    st.builds(lambda a, o: R.dispatched(attempt_id=a, operation_id=o, receipt_id=f"rcpt_{o}"), ATT, OP),
    st.builds(lambda a, o: R.spawned(attempt_id=a, operation_id=o, pid=7, pgid=7, start_ticks=None, boot_id=None),
              ATT, OP),
    st.builds(lambda a, o, status, e, c: R.outcome(
        attempt_id=a, operation_id=o, plan_index=0, step="s", effect="write", params={}, input_digest="i",
        status=status, receipt={"receipt_id": f"rcpt_{o}"}, artifacts=[f"art_{o}"], mutation_epoch=e, cursor=c,
        cancelled=False), ATT, OP, st.sampled_from(["done", "failed", "not_done", "unknown"]), EPOCH, EPOCH),
    st.builds(lambda a, to, e: R.transition(attempt_id=a, from_="x", to=to, reason={"code": "c"} if to == "blocked"
                                            else None, mutation_epoch=e), ATT, st.sampled_from(STATES),
              st.one_of(st.none(), EPOCH)),
    st.builds(_verification, ATT, st.booleans(), EPOCH),
    st.builds(lambda a, o, status, e: R.reconciliation(
        attempt_id=a, operation_id=o, step="s", verdict="applied", status=status, evidence=None, receipt=None,
        linked_receipt_id=None, mutation_epoch=e, cursor=e), ATT, OP, st.sampled_from(["done", "not_done", "unknown"]),
        EPOCH),
    st.builds(lambda a, o, as_, seq: R.resolution(
        attempt_id=a, operation_id=o, as_=as_, reason="r", by="op", at="t", inbox_seq=seq, mutation_epoch=1, cursor=1),
        ATT, OP, st.sampled_from(["applied", "not_applied"]), st.integers(1, 5)),
    st.builds(lambda u, n: R.recovered(restored=[], unknown_operations=u, not_started_operations=n),
              st.lists(OP, max_size=2), st.lists(OP, max_size=2)),
)
STEP = st.one_of(RECORD, st.just(("restart", {})), st.just(("takeover", {})))


class _Holder:
    """One controller's custody of the journal: its lease store and its generation's fenced log."""

    def __init__(self, root: Path, clock: Any) -> None:
        self.leases = LeaseStore(root, ttl=10, clock=clock)
        self.log = FileAttemptLog(root).bind(self.leases)
        self.lease: Any = None

    async def take(self) -> None:
        self.lease = await self.leases.acquire()
        await self.log.open(self.lease)

    async def append(self, rec: R.Rec) -> Any:
        type_, data = rec
        return await self.log.append(self.lease, type_, {**data, "lease_generation": self.lease.generation})

    async def give_up(self) -> None:
        await self.log.close()
        await self.leases.release(self.lease)
        self.leases.abandon()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=20))
def test_the_live_fold_equals_the_fold_replayed_from_disk_across_fenced_appends_and_takeovers(steps):
    async def main(root: Path) -> None:
        now = [1_000_000.0]
        holder = _Holder(root, lambda: now[0])
        await holder.take()
        live = WorkState()  # what the controller holds: each record the log returns, applied (Custody does this)
        stale: list[_Holder] = []
        try:
            for type_, data in steps:
                if type_ == "restart":
                    await holder.give_up()
                    holder = _Holder(root, lambda: now[0])
                    await holder.take()
                elif type_ == "takeover":  # the holder stops answering; its lease expires; another takes over
                    now[0] += 11
                    old, holder = holder, _Holder(root, lambda: now[0])
                    await holder.take()
                    before = [p.read_bytes() for p in holder.log.segments()]
                    with pytest.raises(LeaseLost, match="stale"):
                        await old.append(R.transition(attempt_id="att_a", from_="x", to="cancelled"))
                    assert [p.read_bytes() for p in holder.log.segments()] == before, "the stale write never landed"
                    stale.append(old)
                else:
                    live.apply(await holder.append((type_, data)))
                assert holder.log.state is not None
                replayed = holder.log.fold_sync()
                assert _norm(holder.log.state) == _norm(live) == _norm(replayed)
                assert _norm(fold(await holder.log.read(0))) == _norm(live)
        finally:
            await holder.log.close()
            for old in stale:
                await old.log.close()
                old.leases.abandon()

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d))
