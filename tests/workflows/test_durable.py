"""Durable runs in one process: journaling, replay, uncertain steps, resolution, bad input.

A crash is simulated by a handler raising ``Crash`` (a BaseException the
executor and the engine do not handle): nothing more is recorded, exactly as
if the process had died there; the next "process" builds a fresh registry
(the dead one's scheduler reservation is never released). Real SIGKILLs are
in test_crash.py.
"""

from __future__ import annotations

import anyio
import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import read_records
from openfunctions.workflows import (
    InvalidInput,
    InvalidRunId,
    NonDeterministic,
    NotUncertain,
    RunBlocked,
    RunBusy,
    RunCorrupt,
    WorkflowChanged,
    WorkflowRunNotFound,
    WorkflowRuns,
    WorkflowUnknown,
    llm_step,
    pipe,
    tool_step,
    transform,
)


class Crash(BaseException):
    """Stands for the process dying mid-step."""


class World:
    """Tools with an effect we can count, and a switch that makes one of them 'crash'."""

    def __init__(self) -> None:
        self.charged: list[int] = []
        self.looked: list[int] = []
        self.crash_in: set[str] = set()

    def registry(self) -> ToolRegistry:
        async def charge(p, ctx):
            self.charged.append(p["n"])
            if "charge" in self.crash_in:
                raise Crash()
            return {"n": p["n"], "charged": True}

        async def lookup(p, ctx):
            self.looked.append(p["n"])
            if "lookup" in self.crash_in:
                raise Crash()
            return {"n": p["n"] + 100}

        return ToolRegistry([
            define_tool(name="charge", description="a write", handler=charge, capability={"effect": "write"}),
            define_tool(name="lookup", description="a read", handler=lookup, capability={"effect": "read", "parallel_safe": True}),
        ])

    def lookup_crashing_at(self, nth: int) -> ToolRegistry:
        """The registry, but its ``nth`` lookup call 'crashes' (the process dies in a read step)."""
        reg = self.registry()
        calls = {"n": 0}
        real = reg.get("lookup").handler

        async def lookup_then_crash(p, ctx):
            calls["n"] += 1
            if calls["n"] == nth:
                raise Crash()
            return await real(p, ctx)

        return ToolRegistry([reg.get("charge"), define_tool(name="lookup", description="a read", handler=lookup_then_crash,
                                                            capability={"effect": "read", "parallel_safe": True})])


async def crashed_in_charge(tmp_path, world, wf, run_id="r"):
    """Run ``wf`` until its ``charge`` step crashes the "process" (an uncertain write), then the runs of
    "the next start" (a new WorkflowRuns on the same data dir, nothing crashing any more)."""
    world.crash_in = {"charge"}
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry()).run(wf, {"n": 1}, run_id=run_id)
    world.crash_in = set()
    return WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())


def workflow(name="order"):
    return pipe(
        tool_step("lookup"),
        transform(lambda r: {"n": r["n"] + 1}, name="inc"),
        tool_step("charge"),
        tool_step("lookup", lambda r: {"n": r["n"]}, name="lookup_again"),
        name=name,
    )


@pytest.mark.anyio
async def test_a_durable_run_journals_each_step_and_its_outcome(tmp_path):
    world = World()
    wf = workflow()
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())
    out = await runs.run(wf, {"n": 1}, run_id="order-1")
    assert out.ok and out.result == {"n": 202} and out.run_id == "order-1"
    types = [r.type for r in read_records(runs.path) if r.data["run_id"] == "order-1"]
    assert types == ["run_started", "step_settled", "step_settled", "step_started", "step_settled", "step_settled", "run_finished"]
    # the same run id again: the recorded outcome, nothing re-run
    again = await runs.run(wf, {"n": 1}, run_id="order-1")
    assert again.result == out.result and world.charged == [102] and world.looked == [1, 102]
    state = runs.show("order-1")
    assert state.status == "succeeded" and [s.step for s in state.steps.values()] == ["0", "1", "2", "3"]
    assert [r["run_id"] for r in runs.list()] == ["order-1"]


@pytest.mark.anyio
async def test_crash_during_a_read_step_resumes_after_the_last_settled_step(tmp_path):
    world = World()
    wf = workflow()
    first = WorkflowRuns(tmp_path, workflows=[wf])
    crashing = world.lookup_crashing_at(2)  # crash in the *second* lookup (step 3), after the write step settled
    with pytest.raises(Crash):
        await first.run(wf, {"n": 1}, run_id="r", registry=crashing)
    assert world.charged == [102]
    state = first.show("r")
    assert state.status == "running" and state.uncertain_steps() == []

    second = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())  # "the next start"
    [out] = await second.resume_interrupted()
    assert out.ok and out.resumed and out.result == {"n": 202}
    assert world.charged == [102]  # the settled write step was not re-run


@pytest.mark.anyio
async def test_crash_during_a_write_step_blocks_the_run_until_resolved(tmp_path):
    world = World()
    runs = await crashed_in_charge(tmp_path, world, workflow())
    with pytest.raises(RunBlocked) as ei:
        await runs.resume("r")
    assert ei.value.details["steps"] == ["2"]
    assert "2 (charge, tool charge)" in ei.value.message and "workflows resolve r STEP" in ei.value.message
    assert world.charged == [102]  # never re-run
    [blocked] = await runs.resume_interrupted()
    assert isinstance(blocked, RunBlocked) and world.charged == [102]
    assert runs.show("r").status == "blocked"
    with pytest.raises(NotUncertain):
        await runs.resolve("r", "0", applied=True)

    await runs.resolve("r", "2", applied=True, result={"n": 102, "charged": True, "by": "hand"}, by="ops")
    out = await runs.resume("r")
    assert out.ok and out.result == {"n": 202}
    assert world.charged == [102]
    assert runs.show("r").resolutions == [{"step": "2", "applied": True, "by": "ops"}]


@pytest.mark.anyio
async def test_resolving_not_applied_runs_the_step_again(tmp_path):
    world = World()
    runs = await crashed_in_charge(tmp_path, world, workflow())
    await runs.resolve("r", "2", applied=False, by="ops")
    out = await runs.resume("r")
    assert out.ok and world.charged == [102, 102]  # the operator said it had not happened: it ran once more


@pytest.mark.anyio
async def test_a_failed_step_fails_the_run_and_the_failure_is_recorded(tmp_path):
    wf = pipe(lambda x: x, transform(lambda x: 1 / 0, name="divide"), name="f")
    runs = WorkflowRuns(tmp_path, workflows=[wf])
    out = await runs.run(wf, 1, run_id="f1")
    assert out.status == "failed" and out.error["code"] == "workflow_step_failed"
    assert out.error["details"]["step"] == "1"
    with pytest.raises(Exception) as ei:
        out.unwrap()
    assert getattr(ei.value, "code", None) == "workflow_step_failed"
    assert runs.show("f1").error["message"].startswith("step 1 (divide) raised ZeroDivisionError")


@pytest.mark.anyio
async def test_cancelling_a_durable_run_records_it_cancelled(tmp_path):
    entered = anyio.Event()

    async def hang(p, ctx):
        entered.set()
        await anyio.sleep_forever()

    reg = ToolRegistry([define_tool(name="hang", description="", handler=hang, capability={"effect": "read"})])
    wf = pipe(tool_step("hang"), name="h", registry=reg)
    runs = WorkflowRuns(tmp_path, workflows=[wf])
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: runs.run(wf, {}, run_id="h1"))
        await entered.wait()
        tg.cancel_scope.cancel()
    state = runs.show("h1")
    assert state.status == "cancelled"
    assert state.steps["0"].status == "cancelled"


@pytest.mark.anyio
async def test_a_running_run_is_busy_for_everyone_else(tmp_path):
    entered, release = anyio.Event(), anyio.Event()

    async def gate(p, ctx):
        entered.set()
        await release.wait()
        return {}

    reg = ToolRegistry([define_tool(name="gate", description="", handler=gate, capability={"effect": "read"})])
    wf = pipe(tool_step("gate"), name="g", registry=reg)
    runs = WorkflowRuns(tmp_path, workflows=[wf])
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: runs.run(wf, {}, run_id="g1"))
        await entered.wait()
        with pytest.raises(RunBusy, match="run g1 is being run"):
            await runs.resume("g1")
        # a run of reads has fsynced nothing yet (its first records ride along later): nothing to show
        with pytest.raises(WorkflowRunNotFound):
            runs.show("g1")
        release.set()
    assert runs.show("g1").status == "succeeded"


@pytest.mark.anyio
async def test_unknown_and_hostile_run_ids(tmp_path):
    runs = WorkflowRuns(tmp_path, workflows=[workflow()])
    with pytest.raises(WorkflowRunNotFound, match="no workflow run 'nope'"):
        await runs.resume("nope")
    with pytest.raises(WorkflowRunNotFound):
        runs.show("nope")
    for bad in ("../../etc/passwd", "", "a" * 200, "x\x00y", 7):
        with pytest.raises(InvalidRunId):
            await runs.resume(bad)  # type: ignore[arg-type]
    assert not any(tmp_path.rglob("passwd"))


@pytest.mark.anyio
async def test_a_crash_before_the_first_fsync_leaves_a_run_that_never_started(tmp_path):
    world = World()
    wf = workflow()
    world.crash_in = {"lookup"}  # step 0, a read: nothing has been fsynced yet
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry()).run(wf, {"n": 1}, run_id="n1")
    world.crash_in = set()
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())
    with pytest.raises(WorkflowRunNotFound):
        runs.show("n1")
    with pytest.raises(WorkflowRunNotFound, match="no workflow run 'n1'"):
        await runs.resume("n1")
    assert await runs.resume_interrupted() == []
    out = await runs.run(wf, {"n": 1}, run_id="n1")  # the same id starts it afresh
    assert out.ok and world.charged == [102]


@pytest.mark.anyio
async def test_non_json_input_is_refused_before_anything_is_written(tmp_path):
    wf = pipe(lambda x: x, name="id")
    runs = WorkflowRuns(tmp_path, workflows=[wf])
    with pytest.raises(InvalidInput, match=r"\$\.when"):
        await runs.run(wf, {"when": object()}, run_id="x")
    assert runs.list() == []


@pytest.mark.anyio
async def test_a_step_returning_non_json_fails_the_durable_run_naming_the_step(tmp_path):
    wf = pipe(lambda x: {"b": b"bytes"}, name="nj")
    runs = WorkflowRuns(tmp_path, workflows=[wf])
    out = await runs.run(wf, None, run_id="nj")
    assert out.status == "failed" and out.error["code"] == "workflow_step_output_invalid"
    assert "step 0" in out.error["message"] and "$.b" in out.error["message"]


@pytest.mark.anyio
async def test_a_corrupted_run_journal_fails_closed_naming_the_file(tmp_path):
    world = World()
    wf = workflow()
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())
    world.crash_in = {"charge"}
    with pytest.raises(Crash):
        await runs.run(wf, {"n": 1}, run_id="c")
    path = runs.path
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"inc"')
    raw[i + 1] = ord("X")  # one flipped byte in an interior record
    path.write_bytes(bytes(raw))
    before = path.read_bytes()
    with pytest.raises(RunCorrupt) as ei:
        await runs.resume("c")
    assert str(path) in ei.value.message
    with pytest.raises(RunCorrupt):
        runs.show("c")
    with pytest.raises(RunCorrupt, match="corrupt"):
        runs.list()
    assert path.read_bytes() == before  # left untouched
    assert world.charged == [102]


@pytest.mark.anyio
async def test_a_changed_workflow_or_an_unknown_one_is_refused(tmp_path):
    world = World()
    await crashed_in_charge(tmp_path, world, workflow(), run_id="v1")
    changed = workflow().then(transform(lambda r: r, name="extra"))
    with pytest.raises(WorkflowChanged, match="different version"):
        await WorkflowRuns(tmp_path, workflows=[changed], registry=world.registry()).resume("v1")
    with pytest.raises(WorkflowUnknown, match="'order', which is not registered"):
        await WorkflowRuns(tmp_path, registry=world.registry()).resume("v1")


@pytest.mark.anyio
async def test_a_branch_predicate_that_changes_its_answer_on_replay_is_caught(tmp_path):
    flip = {"v": True}
    world = World()
    wf = pipe(tool_step("lookup"), name="b").branch(
        lambda r: flip["v"], tool_step("lookup", lambda r: {"n": 1}), tool_step("lookup", lambda r: {"n": 2}),
        name="flip",
    ).then(tool_step("charge", lambda r: {"n": 0}))
    runs = await crashed_in_charge(tmp_path, world, wf, run_id="b1")
    await runs.resolve("b1", "2", applied=False)
    flip["v"] = False
    with pytest.raises(NonDeterministic, match=r"step 1 \(branch flip\): the predicate now answers False"):
        await runs.resume("b1")
    # an error in the code, not the run's failure: the run stays unfinished, and resumes once the code is fixed
    assert runs.show("b1").status == "running"
    flip["v"] = True
    out = await runs.resume("b1")
    assert out.ok and world.charged == [0, 0]


@pytest.mark.anyio
async def test_parallel_branches_are_journaled_and_replayed(tmp_path):
    world = World()
    wf = pipe(name="p").parallel(tool_step("lookup", {"n": 1}), tool_step("charge", {"n": 2}), transform(lambda x: "t", name="t"))
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())
    out = await runs.run(wf, None, run_id="p1")
    assert out.result == [{"n": 101}, {"n": 2, "charged": True}, "t"]
    assert sorted(runs.show("p1").steps) == ["0.0", "0.1", "0.2"]
    assert {r.data["run_id"] for r in read_records(runs.path)} == {"p1"}


@pytest.mark.anyio
async def test_a_settled_llm_answer_is_replayed_never_asked_again(tmp_path):
    from openfunctions.adapters import ScriptedAdapter

    world = World()
    wf = pipe(
        llm_step("How much? {input}", output_schema={"type": "object", "required": ["n"]}, name="ask"),
        tool_step("charge"),
        name="llm",
    )
    first_model = ScriptedAdapter(['{"n": 5}'])
    world.crash_in = {"charge"}
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry(), adapter=first_model).run(wf, "order", run_id="l1")
    assert first_model.remaining == 0
    world.crash_in = set()
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry(), adapter=ScriptedAdapter([]))  # no reply left
    assert runs.show("l1").steps["0"].result == {"n": 5}
    await runs.resolve("l1", "1", applied=False)
    out = await runs.resume("l1")  # would raise ScriptExhausted (a failed step) if the model were asked again
    assert out.ok and out.result == {"n": 5, "charged": True}
    assert world.charged == [5, 5]


@pytest.mark.anyio
async def test_oversized_results_and_inputs_are_refused_with_their_size(tmp_path):
    wf = pipe(lambda x: "y" * 5000, name="big")
    runs = WorkflowRuns(tmp_path, workflows=[wf], max_result_bytes=4096)
    out = await runs.run(wf, "x", run_id="big1")
    assert out.status == "failed" and out.error["code"] == "workflow_step_output_invalid"
    assert "5002 bytes of JSON, over the 4096-byte limit" in out.error["message"]
    with pytest.raises(InvalidInput, match="over the 4096-byte limit"):
        await runs.run(wf, "z" * 5000, run_id="big2")


@pytest.mark.anyio
async def test_a_missing_adapter_leaves_the_run_unfinished_to_resume_once_configured(tmp_path):
    from openfunctions.adapters import ScriptedAdapter
    from openfunctions.workflows import WorkflowDefinitionError

    world = World()
    wf = pipe(tool_step("charge", {"n": 3}), llm_step("why?", name="explain"), name="cfg")
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry())
    with pytest.raises(WorkflowDefinitionError, match="no adapter"):
        await runs.run(wf, None, run_id="cfg1")
    assert runs.show("cfg1").status == "running"
    out = await WorkflowRuns(tmp_path, workflows=[wf], registry=world.registry(),
                             adapter=ScriptedAdapter(["because"])).resume("cfg1")
    assert out.ok and out.result == "because" and world.charged == [3]


@pytest.mark.anyio
async def test_a_failing_parallel_branch_cancels_its_siblings_in_a_durable_run(tmp_path):
    started = anyio.Event()
    finished_sibling = []

    async def hang(p, ctx):
        started.set()
        await anyio.sleep_forever()
        finished_sibling.append(True)

    reg = ToolRegistry([define_tool(name="hang", description="", handler=hang, capability={"effect": "write"})])

    async def fail(x):
        await started.wait()
        raise RuntimeError("branch 1 broke")

    wf = pipe(name="par").parallel(tool_step("hang"), transform(fail, name="fail"))
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=reg)
    out = await runs.run(wf, {}, run_id="par1")
    assert out.status == "failed" and out.error["details"]["step"] == "0.1"
    state = runs.show("par1")
    assert state.steps["0.0"].status == "cancelled" and state.steps["0.0"].is_uncertain
    assert state.status == "failed" and finished_sibling == []


@pytest.mark.anyio
async def test_a_step_refused_because_the_host_shuts_down_leaves_the_run_unfinished(tmp_path):
    """A server closing its scheduler (shutting down) while a run is between steps: the next step is refused
    before it runs; that is not the run's failure, so the run stays unfinished and the next start resumes it."""
    from openfunctions.workflows import StepInterrupted

    charged, release, charges = anyio.Event(), anyio.Event(), []

    async def charge(params, ctx):
        charges.append(params)
        charged.set()
        await release.wait()
        return {"charged": 10}

    async def balance(params, ctx):
        return {"balance": 100 - params["charged"]}

    def registry():
        return ToolRegistry([
            define_tool(name="charge", description="charge", handler=charge, capability={"effect": "external"}),
            define_tool(name="balance", description="read", handler=balance, capability={"effect": "read"}),
        ])

    reg = registry()
    wf = pipe(tool_step("charge", {}), tool_step("balance"), name="pay", registry=reg)
    async with WorkflowRuns(tmp_path, workflows=[wf]) as runs:
        failures = []

        async def run():
            try:
                await runs.run(wf, None, run_id="r1")
            except StepInterrupted as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await charged.wait()
            reg.executor.scheduler.close("the server is shutting down")  # what a server's drain does
            release.set()
        [exc] = failures
        assert exc.details["step"] == "1" and "shutting down" in exc.message
        state = runs.show("r1")
        assert state.status == "running" and state.steps["0"].status == "succeeded" and "1" not in state.steps
    # the next start (a fresh registry: a new scheduler) finishes it without charging again
    wf2 = wf.bind(registry=registry())
    async with WorkflowRuns(tmp_path, workflows=[wf2]) as runs:
        [outcome] = await runs.resume_interrupted()
    assert outcome.ok and outcome.result == {"balance": 90} and len(charges) == 1
