"""The operator's resolution inbox as a core record stream: an inbox written by the previous code reads the
same, live fold = replayed fold, and a record it does not know (or cannot fold) is refused by name.

The fixture (tests/fixtures/records_v1/resolutions) was written by ``ResolutionInbox`` from before the port,
with what ``read()`` said beside it (see tests/fixtures/records_v1/_make_resolutions.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog
from openfunctions.core.records import FileRecordLog, RecordMalformed, UnknownRecords, UnknownRecordType, replay
from openfunctions.work._records import RESOLUTIONS_FILE, RESOLUTIONS_KIND
from openfunctions.work._resolutions import RESOLUTIONS, RESOLVE, ResolutionInbox, resolve_record

from .._datadirs import copy_data_dir

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "resolutions"

pytestmark = pytest.mark.anyio


def _pairs(inbox):
    return [[seq, data] for seq, data in inbox]


async def test_an_inbox_written_by_the_previous_code_reads_the_same_and_takes_more(tmp_path):
    data = copy_data_dir(FIXTURE, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    inbox = ResolutionInbox(data / "work")
    assert _pairs(inbox.read()) == expected and len(expected) == 3
    added = await inbox.resolve("op_" + "4" * 32, as_="not_applied", reason="checked", by="carol")
    assert _pairs(inbox.read()) == expected + [[added["seq"], {k: v for k, v in added.items() if k != "seq"}]]
    assert added["seq"] == expected[-1][0] + 1


async def _raw(work_dir: Path, records) -> Path:
    path = work_dir / RESOLUTIONS_FILE
    log = await JournalLog.open(path, kind=RESOLUTIONS_KIND)
    await log.append_many(records)
    await log.close()
    return path


async def test_a_record_type_this_version_does_not_know_makes_the_inbox_unreadable_not_partial(tmp_path):
    assert RESOLUTIONS.unknown is UnknownRecords.REFUSE
    good = resolve_record("op_" + "1" * 32, as_="applied", reason="seen", by="op")
    path = await _raw(tmp_path, [(RESOLVE, good), ("withdraw", {"v": 1, "operation_id": "op_" + "1" * 32})])
    before = path.read_bytes()
    inbox = ResolutionInbox(tmp_path)
    with pytest.raises(UnknownRecordType, match=r"resolutions\.journal.*seq 2 \('withdraw'\)") as e:
        inbox.read()
    assert e.value.code == "record_type_unknown" and e.value.details["seq"] == 2
    with pytest.raises(UnknownRecordType, match="withdraw"):  # and nothing is appended after it
        await inbox.resolve("op_" + "2" * 32, as_="applied", reason="seen", by="op")
    assert path.read_bytes() == before


async def test_a_resolve_that_cannot_be_folded_is_refused_by_name_not_skipped(tmp_path):
    await _raw(tmp_path, [(RESOLVE, {"v": 1, "operation_id": "op_1", "as": "maybe", "reason": "r", "by": "b"})])
    with pytest.raises(RecordMalformed, match=r"seq 1 \('resolve'\).*'as' one of applied, not_applied") as e:
        ResolutionInbox(tmp_path).read()
    assert e.value.code == "record_malformed"


# -- live vs replay ----------------------------------------------------------------------------

STEP = st.one_of(
    st.builds(lambda op, as_, reason: (RESOLVE, resolve_record(op, as_=as_, reason=reason, by="op")),
              st.sampled_from(["op_a", "op_b"]), st.sampled_from(["applied", "not_applied"]),
              st.text(min_size=1, max_size=20).filter(str.strip)),
    st.just(("reopen", {})),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=15))
def test_the_live_inbox_fold_equals_the_fold_replayed_from_disk(steps):
    async def main(work: Path) -> None:
        path = work / RESOLUTIONS_FILE
        log = await FileRecordLog.open(RESOLUTIONS, path)
        try:
            for type_, data in steps:
                if type_ == "reopen":
                    await log.close()
                    log = await FileRecordLog.open(RESOLUTIONS, path)
                    continue
                await log.append(type_, data)
                assert replay(RESOLUTIONS, path).state == log.state
                assert ResolutionInbox(work).read() == log.state  # what the controller copies from, lock-free
        finally:
            await log.close()
        assert [d for _, d in log.state] == [d for t, d in steps if t == RESOLVE]

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d))


async def test_a_controller_copies_nothing_from_an_inbox_it_cannot_read_and_keeps_serving(tmp_path):
    """Fail closed: a resolve followed by a record this version does not know (one that might take it back)
    is not acted on; the attempt stays blocked on its uncertain operation, and the controller keeps answering."""
    from structlog.testing import capture_logs

    from openfunctions.core import OpenFunctionsError

    from .conftest import WorkEnv
    from .test_controller import CATALOG
    from .test_fold import _Tools

    env = WorkEnv(tmp_path)
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    tools = _Tools()
    ctl = await env.open(tools.build())
    try:
        preview = (await ctl.preview([{"step": "bump"}, {"step": "look"}], principal="agent"))["previewId"]
        await ctl.start(preview, principal="agent")
        tools.mode = "unknown"
        try:
            await ctl.run_step(principal="agent", step="bump")
        except OpenFunctionsError:
            pass
        [(_, op)] = ctl.state.open_uncertain()
        await _raw(env.work_dir, [(RESOLVE, resolve_record(op.operation_id, as_="applied", reason="seen", by="op")),
                                  ("withdraw", {"v": 1, "operation_id": op.operation_id})])
        tools.mode = "ok"
        with capture_logs() as logs:
            try:
                await ctl.reconcile(principal="agent")
            except OpenFunctionsError:
                pass
        assert any(e["event"] == "resolutions_unreadable" and "withdraw" in e["error"] for e in logs), logs
        assert [o.operation_id for _, o in ctl.state.open_uncertain()] == [op.operation_id]
    finally:
        for c in env.controllers:
            await c.close()
