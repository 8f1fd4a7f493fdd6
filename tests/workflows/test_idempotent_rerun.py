"""An uncertain step whose tool declares ``capability.idempotent`` is re-run on resume, not blocked.

The crash is simulated as in test_durable.py (a handler raising a BaseException: nothing more is
recorded); the real SIGKILL is in test_crash.py.
"""

from __future__ import annotations

import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.workflows import RunBlocked, WorkflowRuns, pipe, tool_step

from .test_durable import Crash

pytestmark = pytest.mark.anyio


def registry(calls: list, *, crash: bool, idempotent: bool) -> ToolRegistry:
    async def put(p, ctx):
        calls.append(p["n"])
        if crash:
            raise Crash()
        return {"stored": p["n"]}

    async def charge(p, ctx):
        return {"charged": p["stored"]}

    return ToolRegistry([
        define_tool(name="put", description="store a value (same value, same outcome)", handler=put,
                    capability={"effect": "write", "idempotent": idempotent}),
        define_tool(name="charge", description="a write", handler=charge, capability={"effect": "write"}),
    ])


def workflow():
    return pipe(tool_step("put"), tool_step("charge"), name="store")


async def test_an_uncertain_step_of_an_idempotent_tool_runs_again_and_its_record_says_so(tmp_path) -> None:
    calls: list = []
    wf = workflow()
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=registry(calls, crash=True, idempotent=True)).run(
            wf, {"n": 7}, run_id="r")
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=registry(calls, crash=False, idempotent=True))
    assert runs.show("r").uncertain_steps() == ["0"]
    [out] = await runs.resume_interrupted()
    assert out.ok and out.result == {"charged": 7} and calls == [7, 7]
    state = runs.show("r")
    step = state.steps["0"]
    assert (step.status, step.rerun, step.rerun_of) == ("succeeded", True, None)  # died before its receipt existed
    assert step.to_dict()["rerun"] is True and "rerun" not in state.steps["1"].to_dict()
    assert state.resolutions == [{"step": "0", "applied": False, "by": None, "rerun": True, "rerun_of": None}]


async def test_an_uncertain_step_of_a_tool_not_declared_idempotent_still_blocks(tmp_path) -> None:
    calls: list = []
    wf = workflow()
    with pytest.raises(Crash):
        await WorkflowRuns(tmp_path, workflows=[wf], registry=registry(calls, crash=True, idempotent=False)).run(
            wf, {"n": 7}, run_id="r")
    runs = WorkflowRuns(tmp_path, workflows=[wf], registry=registry(calls, crash=False, idempotent=False))
    [blocked] = await runs.resume_interrupted()
    assert isinstance(blocked, RunBlocked) and calls == [7] and runs.show("r").resolutions == []


async def test_on_postgresql_the_idempotent_rerun_is_recorded_as_on_files(pg_dsn) -> None:
    from openfunctions.store import migrate_database
    from tests._pg import unique_name

    await migrate_database(pg_dsn)
    space = unique_name("rerun")
    calls: list = []
    wf = workflow()
    with pytest.raises(Crash):
        await WorkflowRuns(database=pg_dsn, space=space, workflows=[wf],
                           registry=registry(calls, crash=True, idempotent=True)).run(wf, {"n": 7}, run_id="r")
    runs = WorkflowRuns(database=pg_dsn, space=space, workflows=[wf], registry=registry(calls, crash=False, idempotent=True))
    try:
        [out] = await runs.resume_interrupted()
        assert out.ok and calls == [7, 7]
        again = WorkflowRuns(database=pg_dsn, space=space, workflows=[wf])
        try:
            assert again.show("r").steps["0"].rerun is True
        finally:
            await again.close()
    finally:
        await runs.close()
