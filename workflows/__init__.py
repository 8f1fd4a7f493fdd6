"""openfunctions.workflows: deterministic composition of tool, transform and LLM steps, with durable runs.

Build::

    wf = (pipe(tool_step("fetch"), name="report", registry=registry)
          .then(lambda page: {"text": page["body"]})
          .parallel(tool_step("summarize"), tool_step("keywords"))
          .branch(lambda r: len(r[1]["keywords"]) > 3, if_true=llm_step("Title for: {input}")))

Run in memory: ``await wf.run(input)``. Run durably (each step's result
journaled as it settles; resumed after a crash without re-running settled
steps; an uncertain effect blocks until resolved)::

    async with WorkflowRuns(data_dir, workflows=[wf]) as runs:   # <data_dir>/workflows/runs.journal
        await runs.resume_interrupted()          # on start (a server does this itself: runs.start())
        outcome = await runs.run(wf, input)      # RunOutcome(run_id, status, result, error)

Serve or hand to agents as a tool: ``wf.as_tool("report", input_schema)``.
The replay rules (what a step may and may not do) are in docs/WORKFLOWS.md;
the run journal's format is in ``_runlog.py`` and docs/formats/workflow-runs.md.

The chat agent is ``openfunctions.chat`` (docs/CHAT.md).
"""

from ._admission import begin_run, child_context
from ._errors import (
    InvalidInput,
    InvalidRunId,
    NonDeterministic,
    NotUncertain,
    RunBlocked,
    RunBusy,
    RunCorrupt,
    RunStoreUnavailable,
    StepFailed,
    StepInterrupted,
    StepOutputInvalid,
    VerificationRefused,
    WorkflowChanged,
    WorkflowDefinitionError,
    WorkflowError,
    WorkflowRunNotFound,
    WorkflowUnknown,
)
from ._runlog import StepRecord, WorkflowRunState
from ._runs import RunOutcome, WorkflowRuns
from ._steps import LLMStep, Step, ToolStep, Transform, llm_step, tool_step, transform
from ._workflow import Workflow, pipe

__all__ = [
    "InvalidInput", "InvalidRunId", "LLMStep", "NonDeterministic", "NotUncertain",
    "RunBlocked", "RunBusy", "RunCorrupt", "RunOutcome", "RunStoreUnavailable", "Step", "StepFailed",
    "StepInterrupted", "StepOutputInvalid", "StepRecord", "ToolStep", "Transform", "VerificationRefused", "Workflow", "WorkflowChanged",
    "WorkflowDefinitionError", "WorkflowError", "WorkflowRunNotFound", "WorkflowRunState", "WorkflowRuns", "WorkflowUnknown", "llm_step", "pipe", "tool_step",
    "begin_run", "child_context", "transform",
]
