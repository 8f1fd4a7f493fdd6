"""The workflow errors: one small hierarchy under :class:`OpenFunctionsError`.

Every error has a stable ``code`` (journals and clients store it) and a
message naming what was wrong: the step (its path and name), the run id, or
the file.
"""

from __future__ import annotations

from openfunctions.core.errors import OpenFunctionsError


class WorkflowError(OpenFunctionsError):
    code = "workflow_error"


class WorkflowDefinitionError(WorkflowError):
    """A workflow was built wrongly (a step that is not a step, a bad name, no registry for a tool step)."""

    code = "workflow_definition_invalid"


class StepFailed(WorkflowError):
    """A step raised or its tool call did not succeed. ``details``: ``step``, ``name``, ``cause`` (the
    underlying error's code) and, for a tool step, ``receipt_id`` and ``certainty``."""

    code = "workflow_step_failed"


class StepInterrupted(StepFailed):
    """A tool step's call was cancelled by its host before it ran (the executor's scheduler closed: a
    server shutting down). Not the run's failure: a durable run stays unfinished and resumes later."""

    code = "workflow_step_interrupted"


class StepOutputInvalid(StepFailed):
    """A step returned something that is not JSON, or an LLM step's reply failed its output schema."""

    code = "workflow_step_output_invalid"


class InvalidInput(WorkflowError):
    """A durable run's input has no JSON form (it is journaled)."""

    code = "workflow_input_invalid"


class InvalidRunId(WorkflowError):
    code = "workflow_run_id_invalid"


class WorkflowRunNotFound(WorkflowError):
    code = "workflow_run_not_found"


class RunBusy(WorkflowError):
    """Another process (or task) holds the run's journal: it is running there."""

    code = "workflow_run_busy"


class RunStoreUnavailable(WorkflowError):
    """The database holding the runs cannot be used: unreachable, a bad URL, or a schema not this
    code's (``openfunctions-mcp db migrate``). The message names it, password redacted."""

    code = "workflow_runs_unavailable"


class RunBlocked(WorkflowError):
    """A step whose effect is uncertain (it started and never settled) blocks the run until resolved.
    ``details['steps']`` lists them."""

    code = "workflow_run_blocked"


class RunCorrupt(WorkflowError):
    """The run's journal is damaged or unreadable; ``details['path']`` names the file. Fails closed."""

    code = "workflow_run_corrupt"


class WorkflowUnknown(WorkflowError):
    """A run names a workflow this process does not have (register it to resume the run)."""

    code = "workflow_unknown"


class WorkflowChanged(WorkflowError):
    """A run was started by a workflow whose steps differ from the one registered under its name now."""

    code = "workflow_changed"


class NonDeterministic(WorkflowError):
    """Replay took another path than the recorded run (a branch predicate changed its answer)."""

    code = "workflow_nondeterministic"


class NotUncertain(WorkflowError):
    """``resolve`` named a step that is not uncertain in that run."""

    code = "workflow_step_not_uncertain"


class VerificationRefused(WorkflowError):
    """``verify`` named a step that needs no verification, or evidence that verifies nothing (a failed call)."""

    code = "workflow_verification_refused"


__all__ = [
    "InvalidInput", "InvalidRunId", "NonDeterministic", "NotUncertain", "RunBlocked", "RunBusy", "RunCorrupt", "WorkflowRunNotFound",
    "RunStoreUnavailable", "StepFailed", "StepInterrupted", "StepOutputInvalid", "VerificationRefused", "WorkflowChanged", "WorkflowDefinitionError",
    "WorkflowError", "WorkflowUnknown",
]
