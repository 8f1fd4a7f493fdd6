"""The agents' errors (codes are stable)."""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class AgentError(OpenFunctionsError):
    code = "agent_error"


class AgentDefinitionError(AgentError):
    """An agent or crew is malformed (name, tools, limits)."""

    code = "agent_definition_invalid"


class RunNotFound(AgentError):
    code = "run_not_found"


class RunJournalError(AgentError):
    """The run journal is unusable (corrupt, locked by every slot)."""

    code = "run_journal_error"


__all__ = ["AgentDefinitionError", "AgentError", "RunJournalError", "RunNotFound"]
