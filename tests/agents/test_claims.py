"""Claim -> verification -> fulfilment: three linked records, on a real registry, executor and journals.

Also the two capability flags an agent run acts on: ``requires_verification`` (a claim resting on such a
call stays unverified until a verification covers it) and ``idempotent`` (a call whose effect is unknown
is run once more, and the round record says which receipt it re-runs).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import (
    ClaimNotFound,
    ClaimUnverified,
    MemoryRunLog,
    RunJournal,
    VerificationInvalid,
    define_agent,
    fulfil_task,
    read_runs,
    run_agent,
    verify_claim,
)
from openfunctions.agents import _records as R
from openfunctions.core import MemoryJournalSink, ToolError, ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal
from openfunctions.servers.cli import main as cli

pytestmark = pytest.mark.anyio


def tools(state: dict) -> list:
    def deploy(p, c):
        state["deployed"] = state.get("deployed", 0) + 1
        return {"deployed": True}

    def check(p, c):
        if not state.get("deployed"):
            raise ToolError("nothing is deployed", effect_happened=False)
        return {"healthy": True}

    def note(p, c):
        return {"ok": True}

    return [
        define_tool(name="deploy", description="deploy", handler=deploy,
                    capability={"effect": "write", "requires_verification": True}),
        define_tool(name="check", description="health check", handler=check,
                    capability={"effect": "read", "parallel_safe": True}),
        define_tool(name="note", description="note", handler=note, capability={"effect": "write"}),
    ]


def deployer(tool: str = "deploy") -> object:
    return define_agent("ops", "Deploy.", tools=[tool],
                        adapter=ScriptedAdapter([{"tool": tool, "arguments": {}}, "deployed"]))


async def test_a_claim_on_a_call_that_requires_verification_is_fulfilled_only_after_a_verifier_succeeds() -> None:
    state: dict = {}
    reg, runs = ToolRegistry(tools(state), sink=MemoryJournalSink()), MemoryRunLog()
    r = await run_agent(deployer(), "ship it", registry=reg, runs=runs)
    run = runs.get(r.run_id)
    (claim,) = run.claims
    (deploy_receipt,) = [x for x in r.receipts]
    assert claim["requires_verification"] == [deploy_receipt]
    assert run.rounds[0]["tool_calls"][0]["requires_verification"] is True
    assert not run.claim_verified(claim["claim_id"]) and not run.fulfilled
    with pytest.raises(ClaimUnverified) as e:
        await fulfil_task(runs, r.run_id)
    assert e.value.code == "claim_unverified" and e.value.details["unverified"] == {claim["claim_id"]: [deploy_receipt]}

    state["deployed"] = 0  # the verifier fails: a failed call verifies nothing
    failed = (await reg.execute_detailed("check", {})).receipt
    with pytest.raises(VerificationInvalid):
        await verify_claim(runs, r.run_id, claim["claim_id"], receipt=failed)
    with pytest.raises(VerificationInvalid):  # a call cannot verify itself
        await verify_claim(runs, r.run_id, claim["claim_id"], receipt={"receipt_id": deploy_receipt, "outcome": "succeeded"})
    with pytest.raises(ClaimNotFound):
        await verify_claim(runs, r.run_id, "claim_" + "0" * 32, receipt=failed.model_copy(update={"outcome": "succeeded"}))
    assert runs.get(r.run_id).verifications == []

    state["deployed"] = 1
    good = (await reg.execute_detailed("check", {})).receipt
    ver = await verify_claim(runs, r.run_id, claim["claim_id"], receipt=good, by="ci")
    assert ver["covers"] == [deploy_receipt] and ver["evidence"]["receipt_id"] == good.receipt_id
    assert runs.get(r.run_id).claim_verified(claim["claim_id"])
    ful = await fulfil_task(runs, r.run_id, by="ci")
    assert ful["reason"] is None and ful["claim_ids"] == [claim["claim_id"]]
    assert runs.get(r.run_id).chain() == [{"claim_id": claim["claim_id"], "verified": True, "pending": [],
                                           "verifications": [ver["verification_id"]],
                                           "fulfilled_by": ful["fulfilment_id"]}]
    assert await fulfil_task(runs, r.run_id) == ful  # the first fulfilment counts


async def test_a_verification_that_covers_other_calls_leaves_the_claim_unverified() -> None:
    state: dict = {"deployed": 1}
    reg, runs = ToolRegistry(tools(state), sink=MemoryJournalSink()), MemoryRunLog()
    r = await run_agent(deployer(), "ship it", registry=reg, runs=runs)
    cid = runs.get(r.run_id).claims[0]["claim_id"]
    good = (await reg.execute_detailed("check", {})).receipt
    await verify_claim(runs, r.run_id, cid, receipt=good, covers=[])
    assert runs.get(r.run_id).pending(cid) == r.receipts and not runs.get(r.run_id).claim_verified(cid)
    with pytest.raises(VerificationInvalid):  # a receipt of no call of this run
        await verify_claim(runs, r.run_id, cid, receipt=good, covers=[good.receipt_id + "x"])


async def test_without_the_flag_one_verification_verifies_and_a_reason_fulfils_without_one() -> None:
    reg, runs = ToolRegistry(tools({}), sink=MemoryJournalSink()), MemoryRunLog()
    r = await run_agent(deployer("note"), "write a note", registry=reg, runs=runs)
    run = runs.get(r.run_id)
    assert run.claims[0]["requires_verification"] == [] and "requires_verification" not in run.rounds[0]["tool_calls"][0]
    assert not run.claim_verified(run.claims[0]["claim_id"])  # a claim is never its own verification
    with pytest.raises(VerificationInvalid):
        await fulfil_task(runs, r.run_id, reason="  ")
    ful = await fulfil_task(runs, r.run_id, reason="checked by hand", by="op")
    assert runs.get(r.run_id).fulfilment == ful and ful["reason"] == "checked by hand"


def flaky(name: str, *, idempotent: bool, calls: list) -> object:
    def handler(p, c):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("connection reset after the request was sent")  # effect unknown
        return {"done": True}

    return define_tool(name=name, description=name, handler=handler,
                       capability={"effect": "write", "idempotent": idempotent})


async def test_an_idempotent_call_whose_effect_is_unknown_is_run_again_and_says_so() -> None:
    calls: list = []
    sink = MemoryJournalSink()
    reg, runs = ToolRegistry([flaky("put", idempotent=True, calls=calls)], sink=sink), MemoryRunLog()
    agent = define_agent("a", "x", tools=["put"], adapter=ScriptedAdapter([{"tool": "put", "arguments": {}}, "ok"]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    (entry,) = runs.get(r.run_id).rounds[0]["tool_calls"]
    first = next(x for x in sink.receipts if x.tool == "put" and x.outcome == "failed")
    assert calls == ["put", "put"] and entry["outcome"] == "succeeded" and entry["rerun_of"] == first.receipt_id
    assert first.certainty == "unknown" and r.receipts == [first.receipt_id, entry["receipt_id"]]


async def test_a_call_of_a_tool_not_declared_idempotent_is_not_run_again() -> None:
    calls: list = []
    reg, runs = ToolRegistry([flaky("send", idempotent=False, calls=calls)], sink=MemoryJournalSink()), MemoryRunLog()
    agent = define_agent("a", "x", tools=["send"], adapter=ScriptedAdapter([{"tool": "send", "arguments": {}}, "ok"]))
    r = await run_agent(agent, "go", registry=reg, runs=runs)
    (entry,) = runs.get(r.run_id).rounds[0]["tool_calls"]
    assert calls == ["send"] and entry["outcome"] == "failed" and "rerun_of" not in entry


def test_cli_verify_fulfil_and_show_the_chain_from_the_journals(tmp_path: Path, capsys) -> None:
    async def serve() -> tuple:
        execution = await ExecutionJournal.open(tmp_path / "journal" / "default.journal")
        runs = await RunJournal.open_in(tmp_path)
        reg = ToolRegistry(tools({"deployed": 1}), sink=execution)
        r = await run_agent(deployer(), "ship it", registry=reg, runs=runs)
        good = (await reg.execute_detailed("check", {})).receipt
        await runs.close()  # the server stopped, or not: the CLI takes the next free slot either way
        await execution.close()
        return r, good

    r, good = anyio.run(serve)
    cid = read_runs(tmp_path)[r.run_id].claims[0]["claim_id"]
    d = ["--data-dir", str(tmp_path)]
    assert cli(["runs", "fulfil", r.run_id, *d]) == 2
    assert "claim_unverified" in capsys.readouterr().err
    assert cli(["runs", "verify", r.run_id, cid, "--receipt", "rcpt_nope", *d]) == 1
    assert cli(["runs", "verify", r.run_id, cid, "--receipt", good.receipt_id, "--by", "ci", *d]) == 0
    assert cli(["runs", "fulfil", r.run_id, *d]) == 0
    capsys.readouterr()
    assert cli(["runs", "show", r.run_id, *d]) == 0
    out = capsys.readouterr().out
    assert f"claim      {cid} verified" in out and f"receipt {good.receipt_id} (check)" in out
    assert "(every claim verified)" in out
    assert cli(["runs", "show", r.run_id, "--json", *d]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["chain"][0]["verified"] and shown["fulfilment"]["claim_ids"] == [cid]


# -- the fold: live state equals the fold of the file, whatever records came in whatever order -------

RUN_IDS = ["run_" + c * 32 for c in "abc"]
CLAIM_IDS = ["claim_" + c * 32 for c in "de"]
RECEIPTS = ["rcpt_" + c * 32 for c in "fg"]


def _record(kind: str, run: int, claim: int, receipts: list[int]) -> tuple[str, dict]:
    rid, cid, rs = RUN_IDS[run], CLAIM_IDS[claim], [RECEIPTS[i] for i in receipts]
    if kind == R.STARTED:
        return kind, R.started(run_id=rid, agent="a", provider="p", model="m", instructions="i", tools=[], limits={},
                               task="t", principal=None, parent_run_id=None, parent_receipt_id=None)
    if kind == R.ROUND:
        return kind, R.round_(run_id=rid, n=1, model="m", stop_reason="tool_use", usage={},
                              tool_calls=[{"id": "c", "name": "x", "receipt_id": x, "outcome": "succeeded",
                                           "error_code": None, "requires_verification": True} for x in rs], text=None)
    if kind == R.FINISHED:
        return kind, R.finished(run_id=rid, status="completed", rounds=1, usage={}, receipts=rs, text="t")
    if kind == R.CLAIM:
        return kind, {**R.claim(run_id=rid, agent="a", text="t", requires_verification=rs), "claim_id": cid}
    if kind == R.VERIFIED:
        return kind, R.verified(run_id=rid, claim_id=cid, evidence={"kind": "receipt", "receipt_id": "rcpt_v"},
                                covers=rs, by=None)
    if kind == R.FULFILLED:
        return kind, R.fulfilled(run_id=rid, claim_ids=[cid], reason=None if claim else "why", by=None)
    return kind, {"v": 1, "run_id": rid, "something": "newer"}  # a kind this version does not know: skipped


RECORD = st.builds(_record, st.sampled_from([R.STARTED, R.ROUND, R.FINISHED, R.CLAIM, R.VERIFIED, R.FULFILLED,
                                             "run_annotated"]),
                   st.integers(0, 2), st.integers(0, 1), st.lists(st.integers(0, 1), max_size=2))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, min_size=1, max_size=14))
def test_claim_verification_fulfilment_fold_from_disk_equals_live_state(records: list) -> None:
    async def main(tmp: str) -> None:
        journal = await RunJournal.open_in(tmp)
        for rtype, data in records:
            await journal.append(rtype, data)
        live = {k: v.to_dict() for k, v in journal.state.items()}
        await journal.close()
        assert {k: v.to_dict() for k, v in read_runs(tmp).items()} == live
        for run in read_runs(tmp).values():  # the chain is computed from the links alone
            for c in run.chain():
                covered = {x for v in run.verifications if v["claim_id"] == c["claim_id"] for x in v["covers"]}
                claim = next(x for x in run.claims if x["claim_id"] == c["claim_id"])
                assert c["verified"] == (bool(c["verifications"]) and set(claim["requires_verification"]) <= covered)

    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, tmp)
