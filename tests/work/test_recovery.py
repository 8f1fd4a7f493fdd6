"""Recovery from the attempt journal: evidence only, in a fixed order, no tool dispatched.

Interrupted states are produced by writing exactly the records a process
would have written before dying (through the controller's own fenced
``_record``), then closing without the rest. The SIGKILL versions of these
live in test_crash.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from openfunctions.core import new_id
from openfunctions.work._recovery import replay, restore_plan

from .test_controller import CATALOG, PLAN, Counter


async def _started(env, counter):
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    ctl = await env.open(counter.tools())
    prv = await ctl.preview(PLAN, principal="agent")
    att = await ctl.start(prv["previewId"], principal="agent")
    return ctl, att


@pytest.mark.anyio
async def test_intent_without_outcome_is_unknown_and_blocks_without_dispatching(env):
    counter = Counter()
    ctl, att = await _started(env, counter)
    op_id = new_id("op")
    await ctl._record(
        "intent",
        {"attempt_id": att["attemptId"], "operation_id": op_id, "plan_index": 0, "step": "bump", "params": {},
         "effect": "write", "input_digest": "sha256:" + "0" * 64, "readback": {"reconcilable": False}},
    )
    # the executor entered the handler (without this record nothing ran: see the next test)
    await ctl._record("dispatched", {"attempt_id": att["attemptId"], "operation_id": op_id, "receipt_id": new_id("rcpt")})
    await ctl.close()  # the process "died" here: no outcome

    again = await env.open(counter.tools())
    assert counter.runs == {}, "recovery dispatches no tool"
    st = again.status(principal="agent")["attempt"]
    assert st["state"] == "blocked" and st["blockedReason"]["operations"] == [op_id]
    assert [o["status"] for o in st["operations"]] == ["unknown"]
    # reopening again does not stack another block transition
    await again.close()
    third = await env.open(counter.tools())
    hist = third.state.attempts[att["attemptId"]].history
    assert [h["to"] for h in hist].count("blocked") == 1
    assert counter.runs == {}


@pytest.mark.anyio
async def test_intent_without_dispatched_record_proves_nothing_ran(env):
    # the executor journals its start (and the controller "dispatched") before
    # the handler is entered: an intent alone means the handler never started
    counter = Counter()
    ctl, att = await _started(env, counter)
    op_id = new_id("op")
    await ctl._record(
        "intent",
        {"attempt_id": att["attemptId"], "operation_id": op_id, "plan_index": 0, "step": "bump", "params": {},
         "effect": "write", "input_digest": "sha256:" + "0" * 64, "readback": {"reconcilable": False}},
    )
    await ctl.close()
    again = await env.open(counter.tools())
    st = again.status(principal="agent")["attempt"]
    assert st["state"] == "started" and [o["status"] for o in st["operations"]] == ["not_done"]
    r = await again.run_step(principal="agent")  # the step runs, for the first time
    assert r["operation"]["status"] == "done" and counter.runs == {"bump": 1}


@pytest.mark.anyio
async def test_interrupted_verification_returns_to_running(env):
    counter = Counter()
    ctl, att = await _started(env, counter)
    await ctl.run_step(principal="agent")
    a = ctl.state.attempts[att["attemptId"]]
    async with ctl._lifecycle:
        await ctl._transition(a, "verifying")
    await ctl.close()
    again = await env.open(counter.tools())
    st = again.status(principal="agent")["attempt"]
    assert st["state"] == "running" and st["proof"] is None
    assert counter.runs == {"bump": 1}


@pytest.mark.anyio
async def test_terminal_attempts_stay_terminal_and_counts_survive(env):
    counter = Counter()
    ctl, att = await _started(env, counter)
    await ctl.cancel(principal="agent")
    prv = await ctl.preview(PLAN, principal="agent")
    att2 = await ctl.start(prv["previewId"], principal="agent")
    await ctl.close()
    again = await env.open(counter.tools())
    assert again.state.attempts[att["attemptId"]].state == "cancelled"
    assert again.state.attempt_count == 2 and again.state.active == att2["attemptId"]
    assert len(again.state.previews) == 2


def _rec(t: str, **data):
    return SimpleNamespace(type=t, data=data, time="2026-01-01T00:00:00Z", seq=0)


def test_replay_order():
    recs = [
        _rec("lease_acquired", generation=1, lease_generation=1),
        _rec("attempt_started", attempt_id="a", number=1, preview_id="p", principal="x", plan=[{"step": "s", "params": {}}],
             plan_digest="d", catalog_digest="c", lease_generation=1),
        _rec("intent", attempt_id="a", operation_id="o1", step="s", params={}, input_digest="i", effect="write",
             readback=None, plan_index=0, lease_generation=1),
        _rec("dispatched", attempt_id="a", operation_id="o1", receipt_id="rcpt_1", lease_generation=1),
        _rec("intent", attempt_id="a", operation_id="o2", step="s", params={}, input_digest="i", effect="write",
             readback=None, plan_index=0, lease_generation=1),
        _rec("outcome", attempt_id="a", operation_id="o2", step="s", status="done", receipt={"receipt_id": "rcpt_2"},
             artifacts=["art_" + "a" * 32], mutation_epoch=1, cursor=1, lease_generation=1),
    ]
    out = replay(recs)
    a = out.attempts["a"]
    assert a.operations["o1"].status == "unknown" and a.operations["o1"].dispatch_receipt_id == "rcpt_1"
    assert a.operations["o2"].status == "done" and a.cursor == 1 and a.mutation_epoch == 1
    assert out.unknown == [("a", "o1")]
    assert out.active == "a"
    plan = restore_plan(out)
    assert plan == [("a", "blocked", plan[0][2])] and plan[0][2]["operations"] == ["o1"]


def test_a_record_type_this_version_does_not_know_is_refused_by_name_not_skipped():
    """A newer writer's record may be an effect this version cannot see: the replay fails naming it
    (tests/work/test_attempts_stream.py: the controller then does not open)."""
    from openfunctions.core.records import UnknownRecordType

    recs = [_rec("lease_acquired", generation=1, lease_generation=1),
            SimpleNamespace(type="from_the_future", data={"lease_generation": 2}, time="t", seq=7)]
    with pytest.raises(UnknownRecordType, match=r"seq 7 \('from_the_future', lease generation 2\)") as e:
        replay(recs, "attempts")
    assert e.value.code == "record_type_unknown" and e.value.details["type"] == "from_the_future"


async def _died_after_write_intent(env):
    """A write_src attempt whose intent is durable and whose write never ran (the process "died" there).

    Returns ``(catalog, store)``; the controller is closed.
    """
    from openfunctions.artifacts import ArtifactStore
    from openfunctions.work._steps import create_step_tools, prepare_reconciliation

    from .test_crash import WRITE_CATALOG

    catalog = env.write_catalog(WRITE_CATALOG)
    (env.ws / "src").mkdir()
    await env.grant(["write_src", "check"], paths=["src/**"])
    store = ArtifactStore(env.work_dir / "artifacts")
    ctl = await env.open(create_step_tools(catalog, store=store), catalog=catalog)
    plan = [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}]
    prv = await ctl.preview(plan, principal="agent")
    att = await ctl.start(prv["previewId"], principal="agent")
    params = ctl.state.attempts[att["attemptId"]].plan[0]["params"]
    op_id = new_id("op")
    await ctl._record(
        "intent",
        {"attempt_id": att["attemptId"], "operation_id": op_id, "plan_index": 0, "step": "write_src",
         "params": params, "effect": "write", "input_digest": "sha256:" + "1" * 64,
         "readback": prepare_reconciliation(catalog, catalog.step("write_src"), params)},
    )
    await ctl._record("dispatched", {"attempt_id": att["attemptId"], "operation_id": op_id, "receipt_id": new_id("rcpt")})
    await ctl.close()
    return catalog, store


@pytest.mark.anyio
async def test_write_that_never_happened_reconciles_as_not_done_and_may_run_again(env):
    from openfunctions.work._steps import create_step_tools

    catalog, store = await _died_after_write_intent(env)
    again = await env.open(create_step_tools(catalog, store=store), catalog=catalog)
    assert again.status(principal="agent")["attempt"]["state"] == "blocked"
    rec = await again.reconcile(principal="agent")
    assert rec["reconciled"][0]["verdict"] == "not_applied" and rec["reconciled"][0]["status"] == "not_done"
    assert rec["state"] == "running" and not (env.ws / "src" / "a.txt").exists()
    # evidence says it did not happen: the step may run (for the first time)
    r = await again.run_step(principal="agent")
    assert r["operation"]["status"] == "done" and (env.ws / "src" / "a.txt").read_text() == "hello"
    assert (await again.verify(principal="agent"))["passed"]
    assert (await again.complete(principal="agent"))["state"] == "completed"


@pytest.mark.anyio
async def test_readback_mismatch_keeps_the_attempt_blocked(env):
    from openfunctions.work._errors import EffectUncertain, ProofInvalid
    from openfunctions.work._steps import create_step_tools

    catalog, store = await _died_after_write_intent(env)
    (env.ws / "src" / "a.txt").write_text("something else entirely")  # neither intended nor prior
    again = await env.open(create_step_tools(catalog, store=store), catalog=catalog)
    rec = await again.reconcile(principal="agent")
    assert rec["reconciled"][0]["verdict"] == "inconclusive" and rec["state"] == "blocked"
    with pytest.raises(EffectUncertain):
        await again.run_step(principal="agent")
    with pytest.raises(ProofInvalid):
        await again.complete(principal="agent")


@pytest.mark.anyio
async def test_status_reads_the_same_before_and_after_a_restart(env):
    counter = Counter()
    ctl, att = await _started(env, counter)
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.verify(principal="agent")
    await ctl.complete(principal="agent")
    before = ctl.status(principal="agent")
    await ctl.close()
    again = await env.open(counter.tools())
    assert again.status(principal="agent") == before and before["attempt"]["state"] == "completed"
    aid = before["attempt"]["attemptId"]
    assert again.attempt(aid).history == ctl.attempt(aid).history, "live start and replay build the same attempt"


@pytest.mark.anyio
async def test_an_attempt_bound_to_a_catalog_no_longer_run_fails_at_restart(env):
    # the rule for `failed` (work/_state.py): an attempt that can never go on
    from openfunctions.work._errors import InvalidTransition, OperationUncertain

    counter = Counter()
    ctl, att = await _started(env, counter)
    await ctl.run_step(principal="agent")  # bump: done
    op_id = new_id("op")
    await ctl._record(
        "intent",
        {"attempt_id": att["attemptId"], "operation_id": op_id, "plan_index": 0, "step": "bump", "params": {},
         "effect": "write", "input_digest": "sha256:" + "0" * 64, "readback": {"reconcilable": True}},
    )
    await ctl._record("dispatched", {"attempt_id": att["attemptId"], "operation_id": op_id, "receipt_id": new_id("rcpt")})
    await ctl.close()
    # the operator edits the catalog and restarts the server
    env.catalog_path.write_text(env.catalog_path.read_text().replace('description = "append a line"', 'description = "append one line"'))
    await env.grant(("bump", "look", "check"), catalog_digest=None)
    again = await env.open(counter.tools())
    st = again.status(principal="agent")["attempt"]
    assert st["state"] == "failed", st
    hist = again.state.attempts[att["attemptId"]].history
    assert hist[-1]["to"] == "failed" and hist[-1]["reason"]["code"] == "catalog_changed"
    with pytest.raises(InvalidTransition):
        await again.run_step(principal="agent")
    # failing the attempt does not discharge its uncertain write: a new plan with that step is refused,
    # and the way out it names is the operator (no reconcile: the attempt's catalog is gone)
    with pytest.raises(OperationUncertain) as ei:
        await again.preview(PLAN, principal="agent")
    assert op_id in ei.value.message and "of_work_reconcile" not in ei.value.message
    # a plan without it starts: the failed attempt is terminal, not active
    prv = await again.preview([{"step": "look"}], principal="agent")
    assert (await again.start(prv["previewId"], principal="agent"))["state"] == "started"
    # and a second restart keeps it failed without another transition
    await again.close()
    third = await env.open(counter.tools())
    assert [h["to"] for h in third.state.attempts[att["attemptId"]].history].count("failed") == 1
    assert counter.runs == {"bump": 1}


async def _died_before_outcome(env, counter, *, fail_with=None):
    """Run `bump` with the server's execution journal as the executor's sink; the controller dies
    after the executor settled the call (its receipt durable) and before the outcome record."""
    from openfunctions.core import ToolRegistry
    from openfunctions.core.journal import ExecutionJournal

    from .conftest import run_step_dying_before_its_outcome

    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    journal = await ExecutionJournal.open(env.data / "journal" / "work.journal")
    registry = ToolRegistry(counter.tools(), sink=journal)
    ctl = await env.open([], registry=registry)
    prv = await ctl.preview(PLAN, principal="agent")
    att = await ctl.start(prv["previewId"], principal="agent")
    counter.fail_with = fail_with
    await run_step_dying_before_its_outcome(ctl)
    await journal.close()
    counter.fail_with = None
    return att


@pytest.mark.anyio
async def test_a_settled_receipt_in_the_execution_journal_settles_an_interrupted_operation(env):
    counter = Counter()
    att = await _died_before_outcome(env, counter)
    assert counter.runs == {"bump": 1}
    again = await env.open(counter.tools())
    st = again.status(principal="agent")["attempt"]
    # before: blocked, the operation unknown (only an operator could settle an effect with no readback)
    assert st["state"] == "running", st
    [op] = st["operations"]
    assert op["status"] == "done" and op["certainty"] == "known" and op["outcome"] == "succeeded"
    assert st["cursor"] == 1 and st["mutationEpoch"] == 1
    outcome = [r for r in again.state.attempts[att["attemptId"]].operations.values()][0]
    assert outcome.receipt["receipt_id"] == outcome.dispatch_receipt_id
    r = await again.run_step(principal="agent")  # the plan goes on: the next step, not bump again
    assert r["operation"]["step"] == "look" and counter.runs == {"bump": 1, "look": 1}
    assert again.state.open_uncertain() == []


@pytest.mark.anyio
async def test_a_known_failure_in_the_execution_journal_counts_and_an_unknown_one_does_not(env):
    from openfunctions.core import ToolError

    counter = Counter()
    await _died_before_outcome(env, counter, fail_with=ToolError("refused", effect_happened=False))
    again = await env.open(counter.tools())
    st = again.status(principal="agent")["attempt"]
    assert st["state"] == "running" and [o["status"] for o in st["operations"]] == ["failed"]
    await again.close()

    env2_root = env.root / "second"
    env2_root.mkdir()
    from .conftest import WorkEnv

    env2 = WorkEnv(env2_root)
    counter2 = Counter()
    try:
        await _died_before_outcome(env2, counter2, fail_with=RuntimeError("boom"))  # certainty unknown
        third = await env2.open(counter2.tools())
        st = third.status(principal="agent")["attempt"]
        assert st["state"] == "blocked" and [o["status"] for o in st["operations"]] == ["unknown"]
    finally:
        for c in env2.controllers:
            await c.close()
