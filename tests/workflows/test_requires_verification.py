"""A step whose tool declares ``requires_verification`` succeeds, but its run is not completed until verified."""

from __future__ import annotations

import pytest

from openfunctions.core import ToolError, ToolRegistry, define_tool
from openfunctions.workflows import VerificationRefused, WorkflowRunNotFound, WorkflowRuns, pipe, tool_step

pytestmark = pytest.mark.anyio


def registry(state: dict) -> ToolRegistry:
    async def deploy(p, ctx):
        state["deployed"] = True
        return {"version": p["version"]}

    async def health(p, ctx):
        if not state.get("deployed"):
            raise ToolError("down", effect_happened=False)
        return {"up": True}

    return ToolRegistry([
        define_tool(name="deploy", description="deploy a version", handler=deploy,
                    capability={"effect": "write", "requires_verification": True}),
        define_tool(name="health", description="health check", handler=health,
                    capability={"effect": "read", "parallel_safe": True}),
    ])


async def test_a_succeeded_run_awaits_verification_of_its_flagged_step_then_completes(tmp_path) -> None:
    state: dict = {}
    reg = registry(state)
    wf = pipe(tool_step("deploy"), tool_step("health", lambda r: {}), name="release")
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=reg)
    out = await runs.run(wf, {"version": 3}, run_id="rel-1")
    assert out.ok and not out.completed and out.awaiting_verification == ["0"]
    assert out.to_dict()["awaiting_verification"] == ["0"]
    shown = runs.show("rel-1")
    assert shown.summary()["awaiting_verification"] == ["0"] and shown.summary()["completed"] is False
    own = shown.steps["0"].receipt_id

    with pytest.raises(VerificationRefused):  # a step that needs none
        await runs.verify("rel-1", "1", receipt={"receipt_id": "rcpt_x", "outcome": "succeeded"})
    with pytest.raises(VerificationRefused):  # the step's own call
        await runs.verify("rel-1", "0", receipt={"receipt_id": own, "outcome": "succeeded"})
    state["deployed"] = False
    failed = (await reg.execute_detailed("health", {})).receipt
    with pytest.raises(VerificationRefused):  # a verifier that failed
        await runs.verify("rel-1", "0", receipt=failed)
    with pytest.raises(WorkflowRunNotFound):
        await runs.verify("rel-2", "0", receipt=failed)
    state["deployed"] = True
    check = (await reg.execute_detailed("health", {})).receipt
    await runs.verify("rel-1", "0", receipt=check, by="ci")

    again = WorkflowRuns(tmp_path, workflows=[wf], registry=registry(state)).show("rel-1")  # folded from the file
    assert again.completed and again.awaiting_verification() == []
    assert again.steps["0"].verification == {"receipt_id": check.receipt_id, "tool": "health", "by": "ci"}
    assert again.to_dict()["steps"][0]["verification"]["receipt_id"] == check.receipt_id


async def test_a_run_awaiting_verification_survives_compaction_and_is_not_pruned(tmp_path) -> None:
    reg = registry({})
    wf = pipe(tool_step("deploy"), name="release")
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=reg, keep_runs=0)
    await runs.run(wf, {"version": 1}, run_id="rel-1")
    await runs.prune()
    assert runs.show("rel-1").awaiting_verification() == ["0"]  # kept: nobody has checked the deploy yet
