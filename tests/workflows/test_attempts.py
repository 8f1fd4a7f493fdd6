"""Per-step timeouts and retries: retried only when repeating is safe; a timed-out write is never retried."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.core import MemoryJournalSink, ToolError, ToolRegistry, define_tool
from openfunctions.core.journal import read_records
from openfunctions.workflows import StepFailed, WorkflowDefinitionError, WorkflowRuns, llm_step, pipe, tool_step


class Flaky:
    """Tools that fail their first ``fail`` calls, and one that hangs until released."""

    def __init__(self, fail: int, *, known: bool) -> None:
        self.fail, self.known = fail, known
        self.calls: list[str] = []
        self.release = anyio.Event()

    def registry(self, sink=None) -> ToolRegistry:
        async def flaky(p, ctx):
            self.calls.append("flaky")
            if len(self.calls) <= self.fail:
                raise ToolError("the service said 503", code="unavailable", effect_happened=False if self.known else None)
            return {"ok": len(self.calls)}

        async def hang(p, ctx):
            self.calls.append("hang")
            await self.release.wait()
            return {"ok": True}

        tools = [
            define_tool(name="read_flaky", description="", handler=flaky, capability={"effect": "read"}),
            define_tool(name="write_flaky", description="", handler=flaky, capability={"effect": "write"}),
            define_tool(name="read_hang", description="", handler=hang, capability={"effect": "read"}),
            define_tool(name="write_hang", description="", handler=hang, capability={"effect": "write"}),
        ]
        return ToolRegistry(tools, sink=sink)


@pytest.mark.anyio
async def test_a_read_step_is_retried_until_it_succeeds_and_each_attempt_has_a_receipt():
    world = Flaky(2, known=False)
    sink = MemoryJournalSink()
    wf = pipe(tool_step("read_flaky", {}, retries=2), name="r", registry=world.registry(sink))
    assert await wf.run() == {"ok": 3}
    assert [r.outcome for r in sink.receipts] == ["failed", "failed", "succeeded"]


@pytest.mark.anyio
async def test_retries_run_out_and_the_step_fails_naming_the_attempts():
    world = Flaky(5, known=True)
    wf = pipe(tool_step("read_flaky", {}, retries=1), name="r", registry=world.registry())
    with pytest.raises(StepFailed) as ei:
        await wf.run()
    assert ei.value.details["attempts"] == 2 and ei.value.details["cause"] == "unavailable" and len(world.calls) == 2


@pytest.mark.anyio
async def test_a_write_is_retried_only_when_its_effect_certainly_did_not_happen():
    known = Flaky(1, known=True)  # ToolError(effect_happened=False): certainty known
    assert await pipe(tool_step("write_flaky", {}, retries=3), registry=known.registry()).run() == {"ok": 2}
    unknown = Flaky(1, known=False)  # effect unknown: never repeated
    with pytest.raises(StepFailed) as ei:
        await pipe(tool_step("write_flaky", {}, retries=3), registry=unknown.registry()).run()
    assert len(unknown.calls) == 1 and ei.value.details["certainty"] == "unknown"


@pytest.mark.anyio
async def test_a_rejected_call_is_not_retried():
    world = Flaky(0, known=True)
    reg = world.registry()
    reg.register(define_tool(name="typed", description="", handler=lambda p, c: p,
                             input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    with pytest.raises(StepFailed) as ei:
        await pipe(tool_step("typed", {"n": "x"}, retries=3), registry=reg).run()
    assert ei.value.details["attempts"] == 1


@pytest.mark.anyio
async def test_a_timed_out_read_is_retried_and_a_timed_out_write_fails_uncertain(tmp_path):
    world = Flaky(0, known=True)
    sink = MemoryJournalSink()
    reg = world.registry(sink)
    with pytest.raises(StepFailed) as ei:
        await pipe(tool_step("read_hang", {}, timeout=0.2, retries=2), registry=reg).run()
    assert ei.value.details["cause"] == "workflow_step_timeout" and ei.value.details["attempts"] == 3
    assert [r.outcome for r in sink.receipts] == ["cancelled"] * 3  # three attempts, each cancelled

    world.calls.clear()
    wf = pipe(tool_step("write_hang", {}, timeout=0.5, retries=2), name="w", registry=reg)
    out = await WorkflowRuns(tmp_path, workflows=[wf]).run(wf, None, run_id="w1")
    # one attempt only (under heavy load the timeout may even beat the handler's start: still never retried)
    assert out.status == "failed" and out.error["code"] == "workflow_step_failed" and len(world.calls) <= 1
    assert [r.outcome for r in sink.receipts[3:]] == ["cancelled"]
    [settled] = [r.data for r in read_records(tmp_path / "workflows" / "runs.journal") if r.type == "step_settled"]
    assert settled["uncertain"] is True and settled["error"]["code"] == "workflow_step_timeout"


@pytest.mark.anyio
async def test_a_durable_run_records_the_attempt_that_settled_a_step(tmp_path):
    world = Flaky(1, known=True)
    wf = pipe(tool_step("write_flaky", {}, retries=1), name="wr", registry=world.registry())
    out = await WorkflowRuns(tmp_path, workflows=[wf]).run(wf, None, run_id="a1")
    assert out.result == {"ok": 2}
    recs = [(r.type, r.data.get("attempt")) for r in read_records(tmp_path / "workflows" / "runs.journal")]
    # each attempt's start is durable before its effect; only the attempt that settled the step is recorded
    assert recs == [("run_started", None), ("step_started", None), ("step_started", None), ("step_settled", 2),
                    ("run_finished", None)]


@pytest.mark.anyio
async def test_an_llm_step_is_retried_on_a_reply_that_misses_its_schema():
    model = ScriptedAdapter(["not json", '{"label": "x"}'])
    wf = pipe(llm_step("classify {input}", output_schema={"type": "object", "required": ["label"]}, retries=1), adapter=model)
    assert await wf.run("t") == {"label": "x"}
    assert len(model.calls) == 2


def test_bad_attempt_options_are_refused_naming_them():
    for kwargs, word in (({"timeout": 0}, "timeout"), ({"retries": -1}, "retries"), ({"retries": True}, "retries"),
                         ({"retry_delay": -1}, "retry_delay")):
        with pytest.raises(WorkflowDefinitionError, match=word):
            tool_step("x", **kwargs)
        with pytest.raises(WorkflowDefinitionError, match=word):
            llm_step("p", **kwargs)
