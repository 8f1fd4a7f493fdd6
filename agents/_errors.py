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


class RunEnded(RunJournalError):
    """A record of a run that already ended in a shared run log (another replica recovered it as
    ``interrupted``): nothing is written; the run's record stands as it is."""

    code = "run_ended"


class ClaimNotFound(AgentError):
    """The run has no outcome claim with that id."""

    code = "claim_not_found"


class VerificationInvalid(AgentError):
    """The evidence offered cannot verify the claim (a failed call, a receipt of another run, no evidence)."""

    code = "verification_invalid"


class ClaimUnverified(AgentError):
    """A task cannot be fulfilled: a claim is unverified (or there is none) and no reason was given."""

    code = "claim_unverified"


__all__ = ["AgentDefinitionError", "AgentError", "ClaimNotFound", "ClaimUnverified", "RunEnded", "RunJournalError", "RunNotFound",
           "VerificationInvalid"]
