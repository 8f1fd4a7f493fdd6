"""Agents and crews: declarations only (the loop is in :mod:`._runtime`).

An agent is a system prompt, a filtered registry and a loop. ``tools=``
names tools (or brings :class:`ToolDefinition` objects, registered where the
agent is served), ``tags=`` selects by tag, ``exclude=`` removes names;
neither given: every tool of the registry except other agents' tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from openfunctions.core import TOOL_NAME_RE, ToolDefinition

from ._errors import AgentDefinitionError

AGENT_TAG = "agent"
_NAME_MAX = 100  # room for the agent_/delegate_to_ prefixes within MCP's 128


#: A run's overall deadline unless its limits say otherwise (seconds).
DEFAULT_RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class AgentLimits:
    """Bounds of one run. ``max_tokens`` is per model call.

    ``timeout_s``: the whole run's deadline (default 600 s; ``None``: none); a run past it ends
    ``timeout`` (``run_timeout``). ``sampling_timeout_s``: the deadline of each sampling request to
    the MCP host, for an agent thinking with the host's model; ``None``: the server's setting
    (``serve --sampling-timeout``, default 120 s). An unanswered request ends the run ``timeout``
    (``sampling_timeout``).
    """

    max_rounds: int = 8
    max_tool_calls: int = 32
    max_tokens: int = 1024
    temperature: float | None = None
    timeout_s: float | None = DEFAULT_RUN_TIMEOUT_S
    sampling_timeout_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"max_rounds": self.max_rounds, "max_tool_calls": self.max_tool_calls, "max_tokens": self.max_tokens,
                "timeout_s": self.timeout_s, "sampling_timeout_s": self.sampling_timeout_s}


@dataclass(frozen=True, eq=False)
class Agent:
    """Build with :func:`define_agent`."""

    openfunctions_kind = "agent"

    name: str
    instructions: str
    description: str
    tools: tuple[str, ...] | None
    own_tools: tuple[ToolDefinition, ...]
    tags: tuple[str, ...] | None
    exclude: tuple[str, ...]
    adapter: Any
    model: str | None
    limits: AgentLimits
    output_schema: dict[str, Any] | None = None
    delegates: tuple[Agent, ...] = ()
    scopes: frozenset[str] | None = None
    _resolved: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, eq=False)
class Crew:
    """Agents composed: ``sequential`` threads each answer into the next agent's task; ``parallel`` runs all on the same task."""

    openfunctions_kind = "crew"

    name: str
    agents: tuple[Agent, ...]
    mode: Literal["sequential", "parallel"] = "sequential"
    description: str = ""


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name) or len(name) > _NAME_MAX:
        raise AgentDefinitionError(
            f"{what} name {name!r} is invalid: use 1-{_NAME_MAX} characters of A-Z, a-z, 0-9, '_', '.', '-'"
        )


def define_agent(
    name: str,
    instructions: str,
    *,
    tools: Iterable[str | ToolDefinition] | None = None,
    tags: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    adapter: Any = None,
    model: str | None = None,
    max_rounds: int | None = None,
    limits: AgentLimits | Mapping[str, Any] | None = None,
    description: str | None = None,
    output_schema: Mapping[str, Any] | None = None,
    delegates: Sequence[Agent] = (),
    scopes: Iterable[str] | None = None,
) -> Agent:
    """Declare an agent.

    ``adapter`` (an :class:`~openfunctions.adapters.AIAdapter`) or ``model``
    (``"openai:gpt-4o-mini"``, resolved from the environment at the first
    run) picks the model; neither: the MCP host's model through sampling
    (an agent served over MCP). ``max_rounds`` overrides ``limits``.
    ``output_schema``: the run ends when the model calls the synthetic
    ``submit_output`` tool with arguments valid against it (structured
    output). ``delegates``: agents this one may hand work to through
    synthetic ``delegate_to_<name>`` tools. ``scopes``: the authority its
    tool calls carry (narrowed from the caller's, never wider).
    """
    _check_name(name, "agent")
    if not isinstance(instructions, str) or not instructions.strip():
        raise AgentDefinitionError(f"agent {name!r}: instructions must be a non-empty string")
    if adapter is not None and model is not None:
        raise AgentDefinitionError(f"agent {name!r}: pass adapter= or model=, not both")
    if adapter is not None and not (hasattr(adapter, "chat") and hasattr(adapter, "provider")):
        raise AgentDefinitionError(f"agent {name!r}: adapter must implement AIAdapter (chat, stream, provider, model)")
    lim = limits if isinstance(limits, AgentLimits) else AgentLimits(**dict(limits or {}))
    if max_rounds is not None:
        lim = AgentLimits(**{**lim.__dict__, "max_rounds": max_rounds})
    if lim.max_rounds < 1 or lim.max_tool_calls < 0 or lim.max_tokens < 1:
        raise AgentDefinitionError(f"agent {name!r}: limits must be positive (got {lim})")
    for what in ("timeout_s", "sampling_timeout_s"):
        v = getattr(lim, what)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
            raise AgentDefinitionError(f"agent {name!r}: limits {what} must be a positive number of seconds or None, not {v!r}")
    names: list[str] | None = None
    own: list[ToolDefinition] = []
    if tools is not None:
        if isinstance(tools, (str, bytes)):
            raise AgentDefinitionError(f"agent {name!r}: tools= takes a list of names or tools, not one string")
        names = []
        for t in tools:
            if isinstance(t, ToolDefinition):
                own.append(t)
                names.append(t.name)
            elif isinstance(t, str):
                names.append(t)
            else:
                raise AgentDefinitionError(f"agent {name!r}: tools= items must be names or ToolDefinitions, got {type(t).__name__}")
    for d in delegates:
        if not isinstance(d, Agent):
            raise AgentDefinitionError(f"agent {name!r}: delegates must be agents, got {type(d).__name__}")
    if output_schema is not None and (not isinstance(output_schema, Mapping) or output_schema.get("type", "object") != "object"):
        raise AgentDefinitionError(f"agent {name!r}: output_schema must be a JSON Schema of type object")
    return Agent(
        name=name, instructions=instructions, description=description or instructions.strip().splitlines()[0][:200],
        tools=tuple(names) if names is not None else None, own_tools=tuple(own),
        tags=tuple(tags) if tags is not None else None, exclude=tuple(exclude), adapter=adapter, model=model, limits=lim,
        output_schema=dict(output_schema) if output_schema is not None else None, delegates=tuple(delegates),
        scopes=frozenset(scopes) if scopes is not None else None,
    )


def define_crew(name: str, agents: Sequence[Agent], *, mode: Literal["sequential", "parallel"] = "sequential",
                description: str | None = None) -> Crew:
    """Compose agents (see :class:`Crew`)."""
    _check_name(name, "crew")
    if mode not in ("sequential", "parallel"):
        raise AgentDefinitionError(f"crew {name!r}: mode must be 'sequential' or 'parallel', got {mode!r}")
    if not agents or not all(isinstance(a, Agent) for a in agents):
        raise AgentDefinitionError(f"crew {name!r}: give at least one agent (define_agent), and only agents")
    return Crew(name, tuple(agents), mode, description or f"{mode} crew of {', '.join(a.name for a in agents)}")


__all__ = ["AGENT_TAG", "DEFAULT_RUN_TIMEOUT_S", "Agent", "AgentLimits", "Crew", "define_agent", "define_crew"]
