"""The controller in-process: lifecycle, one selected attempt, durable intents, authority, proof, lease loss.

Steps are bound to small test tools (``of_step.<name>``) so each test
controls what a step does; the journal, lease, grants and catalog are real.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from openfunctions.core import ToolError, define_tool
from openfunctions.core.journal import read_records
from openfunctions.work._errors import (
    AttemptActive,
    EffectUncertain,
    GrantDenied,
    GrantRevoked,
    LeaseLost,
    OperationUncertain,
    PlanInvalid,
    ProofInvalid,
    UnknownStep,
)
from openfunctions.work._lease import LeaseStore

CATALOG = """
[steps.bump]
kind = "command"
description = "append a line"
argv = ["true"]
effect = "write"

[steps.look]
kind = "command"
description = "read something"
argv = ["true"]
effect = "read"

[steps.check]
kind = "command"
description = "the test suite"
argv = ["true"]
effect = "external"
verifier = true
"""


class Counter:
    """Test step tools that count their runs and can be told to block or fail."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()
        self.fail_with: BaseException | None = None
        self.seen_ctx: list[Any] = []
        self.check_exit = 0

    def tools(self) -> list:
        def make(name: str, effect: str):
            async def handler(params: dict, ctx) -> dict:
                self.runs[name] = self.runs.get(name, 0) + 1
                self.seen_ctx.append(ctx)
                self.entered.set()
                if self.gate is not None and name == "bump":
                    await self.gate.wait()
                if self.fail_with is not None and name == "bump":
                    raise self.fail_with
                return {"exit_code": self.check_exit if name == "check" else 0, "step": name}

            cap = {"effect": effect, "parallel_safe": effect == "read"}
            return define_tool(name=f"of_step.{name}", description=name, input_schema={"type": "object"}, handler=handler, capability=cap)

        return [make("bump", "write"), make("look", "read"), make("check", "external")]


PLAN = [{"step": "bump"}, {"step": "look"}]


async def _ready(env, counter: Counter, *, steps=("bump", "look", "check"), **kw):
    env.write_catalog(CATALOG)
    await env.grant(steps)
    return await env.open(counter.tools(), **kw)


def _records(env) -> list:
    out = []
    for seg in sorted((env.work_dir / "attempts").glob("g*.jsonl")):
        out.extend(read_records(seg))
    return out


@pytest.mark.anyio
async def test_lifecycle_preview_start_steps_verify_complete_and_restart(env):
    counter = Counter()
    ctl = await _ready(env, counter)
    prv = await ctl.preview(PLAN, principal="agent")
    assert counter.runs == {}, "a preview runs nothing"
    assert prv["allGranted"] and [s["step"] for s in prv["steps"]] == ["bump", "look"]
    assert prv["steps"][0]["argv"] == ["true"]
    att = await ctl.start(prv["previewId"], principal="agent")
    assert att["state"] == "started" and att["number"] == 1
    r1 = await ctl.run_step(principal="agent")
    assert r1["operation"]["status"] == "done" and r1["state"] == "running"
    r2 = await ctl.run_step(principal="agent")
    assert r2["remaining"] == 0
    with pytest.raises(PlanInvalid, match="every step of the plan has run"):
        await ctl.run_step(principal="agent")
    v = await ctl.verify(principal="agent")
    assert v["passed"] and v["state"] == "verified" and v["checks"][0]["step"] == "check"
    done = await ctl.complete(principal="agent")
    assert done["state"] == "completed"
    assert counter.runs == {"bump": 1, "look": 1, "check": 1}
    await ctl.close()

    again = await env.open(counter.tools())
    assert again.lease.generation == 2
    old = again.status(principal="agent", attempt_id=att["attemptId"])["attempt"]
    assert old["state"] == "completed" and len([o for o in old["operations"] if o.get("purpose") != "verify"]) == 2
    # the verifier (effect "external") ran as an operation of its own: intent, then outcome
    [ver] = [o for o in old["operations"] if o.get("purpose") == "verify"]
    assert ver["step"] == "check" and ver["status"] == "done"
    assert again.state.attempt_count == 1
    # the attempt count and ids move on; ids are never reused
    prv2 = await again.preview(PLAN, principal="agent")
    att2 = await again.start(prv2["previewId"], principal="agent")
    assert att2["number"] == 2 and att2["attemptId"] != att["attemptId"]


@pytest.mark.anyio
async def test_second_start_refused_naming_the_active_attempt(env):
    ctl = await _ready(env, Counter())
    prv = await ctl.preview(PLAN, principal="agent")
    att = await ctl.start(prv["previewId"], principal="agent")
    with pytest.raises(AttemptActive) as err:
        await ctl.start(prv["previewId"], principal="agent")
    assert att["attemptId"] in err.value.message and err.value.details["attempt_id"] == att["attemptId"]
    await ctl.cancel(principal="agent")
    att2 = await ctl.start(prv["previewId"], principal="agent")  # a terminal attempt no longer blocks
    assert att2["attemptId"] != att["attemptId"]


@pytest.mark.anyio
async def test_intent_is_durable_before_the_step_runs(env):
    counter = Counter()
    counter.gate = anyio.Event()
    ctl = await _ready(env, counter)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: ctl.run_step(principal="agent"))
        await counter.entered.wait()
        # the step is running: its intent is on disk, its outcome is not
        recs = _records(env)
        intents = [r for r in recs if r.type == "intent"]
        assert len(intents) == 1 and not [r for r in recs if r.type == "outcome"]
        d = intents[0].data
        assert d["step"] == "bump" and d["lease_generation"] == 1 and d["input_digest"].startswith("sha256:")
        assert d["operation_id"] == counter.seen_ctx[0].work.operation_id
        counter.gate.set()
    outcome = [r for r in _records(env) if r.type == "outcome"][0].data
    assert outcome["operation_id"] == d["operation_id"] and outcome["status"] == "done"
    assert outcome["receipt"]["tool"] == "of_step.bump" and outcome["receipt"]["certainty"] == "known"


@pytest.mark.anyio
async def test_uncertain_outcome_blocks_the_attempt_and_refuses_further_steps(env):
    counter = Counter()
    counter.fail_with = RuntimeError("disk vanished mid-write")
    ctl = await _ready(env, counter)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["status"] == "unknown" and r["state"] == "blocked"
    assert r["operation"]["certainty"] == "unknown"
    with pytest.raises(EffectUncertain, match="blocked"):
        await ctl.run_step(principal="agent", step="look")
    assert counter.runs == {"bump": 1}
    # a failure the tool declares effect-free is a known failure, not a block
    env2_counter = Counter()
    env2_counter.fail_with = ToolError("refused: nothing written", effect_happened=False)
    op_id = r["operation"]["operationId"]
    await ctl.cancel(principal="agent")
    await ctl.close()
    ctl2 = await env.open(env2_counter.tools())
    # the cancelled attempt's uncertain write outlives it: a plan running 'bump' again is refused ...
    with pytest.raises(OperationUncertain, match=op_id):
        await ctl2.preview(PLAN, principal="agent")
    # ... until an operator resolves it (the inbox is read at the next call)
    from openfunctions.work._resolutions import ResolutionInbox

    await ResolutionInbox(env.work_dir).resolve(op_id, as_="not_applied", reason="checked: nothing was appended", by="test")
    prv = await ctl2.preview(PLAN, principal="agent")
    await ctl2.start(prv["previewId"], principal="agent")
    r = await ctl2.run_step(principal="agent")
    assert r["operation"]["status"] == "failed" and r["state"] == "running" and r["cursor"] == 0


@pytest.mark.anyio
async def test_bad_plans_get_clear_errors(env):
    ctl = await _ready(env, Counter())
    with pytest.raises(UnknownStep, match="did you mean 'bump'"):
        await ctl.preview([{"step": "bumpp"}], principal="agent")
    with pytest.raises(PlanInvalid, match="non-empty list"):
        await ctl.preview([], principal="agent")
    with pytest.raises(PlanInvalid, match=r"plan\[0\]"):
        await ctl.preview([{"step": "bump", "params": {"argv": ["rm", "-rf", "/"]}}], principal="agent")
    with pytest.raises(PlanInvalid, match="unknown field"):
        await ctl.preview([{"step": "bump", "tool": "of_step.bump"}], principal="agent")
    with pytest.raises(PlanInvalid, match="no saved preview"):
        await ctl.start("prv_" + "0" * 32, principal="agent")


@pytest.mark.anyio
async def test_step_outside_the_grant_is_refused_and_nothing_runs(env):
    counter = Counter()
    ctl = await _ready(env, counter, steps=("look",))
    prv = await ctl.preview(PLAN, principal="agent")
    assert not prv["allGranted"] and prv["grants"][0]["code"] == "grant_denied"
    with pytest.raises(GrantDenied, match="no grant for step 'bump'"):
        await ctl.start(prv["previewId"], principal="agent")
    assert counter.runs == {}
    # another principal cannot drive someone else's preview or attempt
    with pytest.raises(GrantDenied):
        await ctl.start(prv["previewId"], principal="intruder")


@pytest.mark.anyio
async def test_grant_revoked_mid_attempt_blocks_and_nothing_runs(env):
    counter = Counter()
    env.write_catalog(CATALOG)
    g = await env.grant(("bump", "look", "check"))
    ctl = await env.open(counter.tools())
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await env.grants().revoke(g.grant_id, by="operator")
    with pytest.raises(GrantRevoked):
        await ctl.run_step(principal="agent")
    assert counter.runs == {}
    st = ctl.status(principal="agent")["attempt"]
    assert st["state"] == "blocked" and st["blockedReason"]["code"] == "grant_revoked"


@pytest.mark.anyio
async def test_write_after_verification_invalidates_the_proof(env):
    counter = Counter()
    ctl = await _ready(env, counter)
    prv = await ctl.preview([{"step": "bump"}, {"step": "bump"}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    v = await ctl.verify(principal="agent")
    assert v["state"] == "verified"
    r = await ctl.run_step(principal="agent")  # a write after verification
    assert r["state"] == "running"
    with pytest.raises(ProofInvalid, match="verify"):
        await ctl.complete(principal="agent")
    v2 = await ctl.verify(principal="agent")
    assert v2["proof"]["mutation_epoch"] == v["proof"]["mutation_epoch"] + 1
    assert (await ctl.complete(principal="agent"))["state"] == "completed"


@pytest.mark.anyio
async def test_failing_verifier_leaves_the_attempt_running_without_proof(env):
    counter = Counter()
    counter.check_exit = 1
    ctl = await _ready(env, counter)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    v = await ctl.verify(principal="agent")
    assert not v["passed"] and v["state"] == "running"
    assert v["proof"]["tests_passed"] is False and v["proof"]["accepted"] is True  # separate facts
    assert ctl.status(principal="agent")["attempt"]["proof"] is None
    assert v["checks"][0]["accepted"] is True and v["checks"][0]["passed"] is False  # separate facts
    with pytest.raises(ProofInvalid):
        await ctl.complete(principal="agent")


@pytest.mark.anyio
async def test_lost_lease_stops_effects_and_blocks(env):
    counter = Counter()
    ctl = await _ready(env, counter, lease_ttl=60)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    # another owner takes the lease over (its clock says ours expired)
    thief = LeaseStore(env.work_dir, ttl=60, clock=lambda: 10**12)
    stolen = await thief.acquire()
    assert stolen.generation == ctl.lease.generation + 1
    with pytest.raises(LeaseLost, match="stale"):
        await ctl.run_step(principal="agent")
    assert counter.runs == {}
    st = ctl.status(principal="agent")
    assert st["controller"]["leaseLost"] and st["attempt"]["state"] == "blocked"
    assert st["attempt"]["blockedReason"]["code"] == "lease_lost"
    # the in-memory block goes through the one transition path: history and updatedAt agree
    last = ctl.attempt(st["attempt"]["attemptId"]).history[-1]
    assert last["to"] == "blocked" and last["reason"]["code"] == "lease_lost"
    assert st["attempt"]["updatedAt"] == last["at"] != st["attempt"]["createdAt"]
    before = len(_records(env))
    with pytest.raises(LeaseLost):
        await ctl.cancel(principal="agent")
    assert len(_records(env)) == before, "a fenced controller wrote nothing"


@pytest.mark.anyio
async def test_renewal_runs_on_its_own_task_during_a_long_step(env):
    counter = Counter()
    counter.gate = anyio.Event()
    ctl = await _ready(env, counter, lease_ttl=30, renew_every=0.01)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: ctl.run_step(principal="agent"))
        await counter.entered.wait()
        start = ctl._renewals
        while ctl._renewals < start + 3:  # renewals progress while the step is parked
            await anyio.sleep(0.01)
        counter.gate.set()
    rec = json.loads((env.work_dir / "lease.json").read_text())
    assert rec["generation"] == ctl.lease.generation and rec["expires_at"] == ctl.lease.expires_at


@pytest.mark.anyio
async def test_expired_grant_blocks_and_nothing_runs(env):
    import time

    counter = Counter()
    env.write_catalog(CATALOG)
    g = await env.grant(("bump", "look", "check"), ttl_s=1.0)
    ctl = await env.open(counter.tools())
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    while time.time() < g.expires_at.timestamp():  # wait for the wall clock to pass the expiry
        await anyio.sleep(0.05)
    from openfunctions.work._errors import GrantExpired

    with pytest.raises(GrantExpired, match="expired"):
        await ctl.run_step(principal="agent")
    assert counter.runs == {}
    assert ctl.status(principal="agent")["attempt"]["blockedReason"]["code"] == "grant_expired"


@pytest.mark.anyio
async def test_a_step_call_made_outside_the_controller_does_not_wedge_it(env):
    # Replaces the old "settled observer" test: an in-memory flag set by any
    # uncertain of_step.* receipt (also a verifier's, also one the controller
    # never dispatched) refused every later step with "reconcile first", while
    # reconcile found nothing. Uncertainty is now only
    # what the journal says about the controller's own operations.
    counter = Counter()
    ctl = await _ready(env, counter)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    counter.fail_with = RuntimeError("lost the reply")
    dr = await ctl.registry.execute_detailed("of_step.bump", {})
    assert dr.receipt.certainty == "unknown"
    counter.fail_with = None
    r = await ctl.run_step(principal="agent", step="look")
    assert r["operation"]["status"] == "done" and r["state"] == "running"


@pytest.mark.anyio
async def test_renewal_waits_for_a_transition_in_progress(env):
    # renewals and transitions share one lock: while a transition holds it, no renewal happens
    ctl = await _ready(env, Counter(), lease_ttl=30, renew_every=0.01)
    while ctl._renewals < 1:
        await anyio.sleep(0.01)
    async with ctl._lifecycle:
        held = ctl._renewals
        for _ in range(10):
            await anyio.sleep(0.01)
        assert ctl._renewals == held
    while ctl._renewals == held:
        await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_grant_revoked_after_verification_refuses_completion_and_blocks(env):
    counter = Counter()
    env.write_catalog(CATALOG)
    # the written step and the rest under separate grants: revoking the one
    # for a step that already ran must still stop the completion
    g_bump = await env.grant(("bump",))
    await env.grant(("look", "check"))
    ctl = await env.open(counter.tools())
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    assert (await ctl.verify(principal="agent"))["state"] == "verified"
    await env.grants().revoke(g_bump.grant_id, by="operator")
    with pytest.raises(GrantRevoked):
        await ctl.complete(principal="agent")
    st = ctl.status(principal="agent")["attempt"]
    assert st["state"] == "blocked" and st["blockedReason"]["code"] == "grant_revoked"


@pytest.mark.anyio
async def test_completion_checks_each_distinct_plan_step_once(env):
    from openfunctions.work._authority import Authority

    class CountingAuthority(Authority):
        def __init__(self, *a: Any) -> None:
            super().__init__(*a)
            self.checked: list[str] = []

        async def check(self, *, step, **kw):
            self.checked.append(step.name)
            return await super().check(step=step, **kw)

    counter = Counter()
    catalog = env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    authority = CountingAuthority(env.grants(), catalog)
    ctl = await env.open(counter.tools(), catalog=catalog, authority=authority)
    prv = await ctl.preview([{"step": "bump"}, {"step": "bump"}, {"step": "look"}, {"step": "bump"}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    for _ in range(4):
        await ctl.run_step(principal="agent")
    await ctl.verify(principal="agent")
    authority.checked.clear()
    done = await ctl.complete(principal="agent")
    assert done["state"] == "completed"
    assert sorted(authority.checked) == ["bump", "look"], "a repeated (step, paths) is checked once"
