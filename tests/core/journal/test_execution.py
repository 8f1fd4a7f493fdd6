"""ExecutionJournal: the executor's sink, and recovery of calls killed mid-flight."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.core import ToolError, ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal, read_records

from ._proc import kill9, readline, spawn

pytestmark = pytest.mark.anyio


def _tool(handler, name="t"):
    return define_tool(name=name, description="d", input_schema={"type": "object"}, handler=handler)


async def test_start_before_handler_and_receipt_on_settle(tmp_path):
    p = tmp_path / "exec.jsonl"
    j = await ExecutionJournal.open(p)
    seen_in_handler: list[list[str]] = []

    async def h(params, ctx):
        seen_in_handler.append([r.type for r in read_records(p)])
        return {"ok": True}

    async def bad(params, ctx):
        raise ToolError("nope", effect_happened=False)

    reg = ToolRegistry([_tool(h), _tool(bad, "bad")], sink=j)
    d1 = await reg.execute_detailed("t", {})
    d2 = await reg.execute_detailed("bad", {})
    assert seen_in_handler == [["start"]]
    recs = list(read_records(p))
    assert [r.type for r in recs] == ["start", "receipt", "start", "receipt"]
    assert recs[1].data == d1.receipt.to_dict()
    assert recs[3].data["outcome"] == d2.receipt.outcome == "failed"
    assert [r.receipt_id for r in j.receipts()] == [d1.receipt.receipt_id, d2.receipt.receipt_id]
    assert j.recovered == []
    await j.close()
    j = await ExecutionJournal.open(p)
    assert j.recovered == []
    await j.close()


async def test_unsettled_start_is_recovered_once(tmp_path):
    p = tmp_path / "exec.jsonl"
    j = await ExecutionJournal.open(p)
    entered = anyio.Event()

    async def hang(params, ctx):
        entered.set()
        await anyio.sleep_forever()

    reg = ToolRegistry([_tool(hang)], sink=j)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute_detailed, "t", {"a": 1})
        await entered.wait()
        # Simulate the process dying: drop the journal without settling.
        j.log._close_now()
        tg.cancel_scope.cancel()

    j = await ExecutionJournal.open(p)
    assert len(j.recovered) == 1
    r = j.recovered[0]
    assert (r.outcome, r.certainty, r.recovered, r.handler_started) == ("unknown", "unknown", True, True)
    assert r.error is not None and r.error.code == "recovered_unknown"
    await j.close()
    j = await ExecutionJournal.open(p)
    assert j.recovered == []
    assert sum(1 for rec in read_records(p) if rec.data.get("recovered")) == 1
    await j.close()


async def test_many_unsettled_starts_are_recovered_together_in_start_order(tmp_path):
    from openfunctions.core.journal import JournalLog

    p = tmp_path / "exec.jsonl"
    log = await JournalLog.open(p, kind="execution")
    starts = [
        {"v": 1, "receipt_id": f"rcpt_{i}", "tool": "t", "spec_sha256": None, "params_sha256": None,
         "started_at": "2026-11-30T00:00:00.000000Z", "principal": None, "parent_receipt_id": None}
        for i in range(5)
    ]
    for s in starts:
        await log.append("start", s)
    await log.append("receipt", {"receipt_id": "rcpt_2"})  # this one settled
    await log.close()

    j = await ExecutionJournal.open(p)
    assert [r.receipt_id for r in j.recovered] == ["rcpt_0", "rcpt_1", "rcpt_3", "rcpt_4"]
    assert all(r.outcome == "unknown" and r.recovered for r in j.recovered)
    await j.close()
    written = [r for r in read_records(p) if r.data.get("recovered")]
    assert [r.data["receipt_id"] for r in written] == ["rcpt_0", "rcpt_1", "rcpt_3", "rcpt_4"]
    assert [r.seq for r in written] == [7, 8, 9, 10]
    j = await ExecutionJournal.open(p)  # idempotent
    assert j.recovered == []
    await j.close()


@pytest.mark.slow
def test_handler_process_killed_mid_call_leaves_unknown_receipt(tmp_path):
    p = tmp_path / "exec.jsonl"
    proc = spawn("exec", p)
    line = readline(proc)
    assert line.startswith("started ")
    rid = line.split()[1]
    kill9(proc)

    async def recover():
        j = await ExecutionJournal.open(p)
        rec = list(j.recovered)
        await j.close()
        j2 = await ExecutionJournal.open(p)
        again = list(j2.recovered)
        receipts = list(j2.receipts())
        await j2.close()
        return rec, again, receipts

    rec, again, receipts = anyio.run(recover)
    assert [r.receipt_id for r in rec] == [rid]
    assert rec[0].tool == "charge_card"
    assert (rec[0].outcome, rec[0].certainty, rec[0].recovered) == ("unknown", "unknown", True)
    assert again == []
    assert [r.receipt_id for r in receipts] == [rid]


async def test_the_receipt_line_holds_the_receipt_s_own_canonical_text(tmp_path):
    # The journal appends Receipt.canonical_json() pre-encoded; a reply can reuse the same text.
    p = tmp_path / "exec.jsonl"
    j = await ExecutionJournal.open(p)

    async def h(params, ctx):
        return {"ok": "é"}

    d = await ToolRegistry([_tool(h)], sink=j).execute_detailed("t", {"x": 1})
    await j.close()
    line = p.read_bytes().splitlines()[-1]
    text = d.receipt.canonical_json()
    assert b'"data":' + text.encode("utf-8") + b',"prev":' in line
    assert [r.data for r in read_records(p) if r.type == "receipt"] == [d.receipt.to_dict()]
