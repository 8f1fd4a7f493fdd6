"""openfunctions.agents: agents, crews and run records, on the one tool path.

An agent is a system prompt, a filtered registry (``registry.project``) and
a reason/act/observe loop; every tool call it makes goes through the
registry's executor as a child of the agent's own call. Every run leaves
run records (:mod:`._records`: format and the one fold) in a durable run
journal next to the execution journal.

Usage::

    from openfunctions.adapters import ScriptedAdapter
    from openfunctions.agents import define_agent, run_agent

    helper = define_agent("helper", "Answer briefly.", tools=["add"], adapter=ScriptedAdapter([...]))
    result = await run_agent(helper, "what is 2+3?", registry=registry)
    result.status, result.text, result.run_id

Served over MCP: ``openfunctions-mcp serve --profile agents --module mypkg.agents:agents``
(:func:`build_agents_profile`); runs from the shell: ``openfunctions-mcp runs list|show|tail``.
"""

from typing import TYPE_CHECKING, Any

from openfunctions.core.deprecation import old_names

from ._agent import AGENT_TAG, DEFAULT_RUN_TIMEOUT_S, Agent, AgentLimits, Crew, define_agent, define_crew
from ._claims import fulfil_task, verify_claim
from ._errors import (
    AgentDefinitionError,
    AgentError,
    ClaimNotFound,
    ClaimUnverified,
    RunJournalError,
    RunNotFound,
    VerificationInvalid,
)
from ._records import TERMINAL as RUN_TERMINAL
from ._records import RunState
from ._runlog import DatabaseRunLog, MemoryRunLog, RunJournal, read_history, read_runs, runs_journal_path
from ._runtime import RUN_ID_KEY, SUBMIT_TOOL, AgentRuntime, RunOptions, RunResult, run_agent

if TYPE_CHECKING:
    from ._profile import AgentsProfile


def build_agents_profile(**options: Any) -> "AgentsProfile":  # imported lazily: the profile needs the run-read tool and module loading
    from ._profile import build_agents_profile as build

    return build(**options)


__all__ = [
    "AGENT_TAG", "DEFAULT_RUN_TIMEOUT_S", "Agent", "AgentDefinitionError", "AgentError", "AgentLimits", "AgentRuntime", "ClaimNotFound", "ClaimUnverified", "Crew", "DatabaseRunLog", "MemoryRunLog",
    "RUN_ID_KEY", "RunJournal", "RunJournalError", "RunNotFound", "RunOptions", "RunResult", "RUN_TERMINAL", "RunState", "SUBMIT_TOOL",
    "VerificationInvalid", "build_agents_profile", "define_agent", "define_crew", "fulfil_task", "read_history", "read_runs", "run_agent",
    "runs_journal_path", "verify_claim",
]


# Old public names kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"TERMINAL": "RUN_TERMINAL"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)
