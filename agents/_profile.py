"""The ``agents`` profile: agents and crews a module defines, each served as a tool.

``build_agents_profile(data_dir, registry, principal, modules, store, upstreams)``
(the contract is in ``servers/_profiles.py`` above ``LAYERS``):

- each ``--module pkg.mod:attr`` names an :class:`Agent`, a :class:`Crew`, a
  list of them, or a zero-argument factory returning one of those. A list
  holding agents may also hold tools (``ToolDefinition``, e.g. a workflow
  served as ``wf.as_tool(name, input_schema)``): they are served next to them. Under the
  ``all`` profile (``registry`` given) a module holding no agents is skipped
  (it is a tools module); under ``agents`` modules holding none is an error
  naming them, and no ``--module`` at all serves only the run-record tools.
- every agent becomes ``agent_<name>`` (input ``task``; output ``text``,
  ``run_id``, ``status``, ``rounds``; receipt in ``_meta``; one progress
  notification per round; MCP cancellation stops the loop), every crew
  ``crew_<name>``. Tools an agent brings (``tools=[ToolDefinition]``) are
  registered next to them.
- ``of_run_read``: a run record by id (bounded at 32 KiB; a larger record is
  summarized and stored whole as an artifact, read with
  ``of_run_artifact_read``).
- run records go to ``<data-dir>/journal/runs.journal`` (opened in ``start``;
  recovery marks unfinished runs ``interrupted``).

An agent without ``adapter=``/``model=`` thinks with the MCP host's model
(sampling): the server puts the sampler into each call's context. Each
sampling request waits at most ``sampling_timeout_s`` (``serve
--sampling-timeout``, default 120 s) unless the agent's limits name their
own; a run served here holds no scheduler reservation while it waits
(agents/_runtime.py, "Admission").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, ToolRegistry, define_tool, import_spec

from ._agent import Agent, Crew
from ._errors import AgentDefinitionError
from ._runlog import DatabaseRunLog, MemoryRunLog, RunJournal, read_runs
from ._runtime import AgentRuntime

RUN_BUDGET = 32 * 1024
RUN_SCOPE = "runs"

INSTRUCTIONS = (
    "Agents are served as tools named agent_<name> (crews: crew_<name>): give one a task and it answers with text "
    "and a run id, thinking with your model through MCP sampling unless it has its own. Read a run record with "
    "of_run_read."
)


def _load(spec: str) -> list[Agent | Crew | ToolDefinition]:
    obj = import_spec(spec, default_attr="agents", error=AgentDefinitionError, missing_ok=True)
    if obj is None:
        return []
    if callable(obj) and not isinstance(obj, (Agent, Crew)) and not isinstance(obj, (list, tuple)):
        try:
            obj = obj()
        except TypeError:
            return []
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    found = [i for i in items if isinstance(i, (Agent, Crew))]
    # Tools listed next to agents (a workflow served as ``wf.as_tool(...)``) are served too,
    # but only from a module that defines agents: a plain tools module is the tools loader's.
    return found + [i for i in items if isinstance(i, ToolDefinition)] if found else []


@dataclass
class AgentsProfile:
    registry: ToolRegistry
    runtime: AgentRuntime
    data_dir: Path
    instructions: str = INSTRUCTIONS
    journal: RunJournal | DatabaseRunLog | None = None
    artifacts: Any = None
    database_url: str | None = None  # serve --database: run records in PostgreSQL, shared by replicas
    _closers: list[Any] = field(default_factory=list)

    def install(self, server: Any) -> None:
        self.database_url = getattr(server, "database_url", None)

    async def start(self) -> None:
        if self.database_url:
            from openfunctions.store import database_sweep_interval

            # the same sweep schedule as the server's journal and tasks sweeps ($OPENFUNCTIONS_DATABASE_SWEEP_S)
            self.journal = await DatabaseRunLog.open(self.database_url, sweep_interval=database_sweep_interval())
        else:
            self.journal = await RunJournal.open_in(self.data_dir)
        self.runtime.runs = self.journal

    async def aclose(self) -> None:
        await self.runtime.aclose()
        if self.journal is not None:
            await self.journal.close()
            self.journal = None
        if self.artifacts is not None:
            self.artifacts.close()


def _run_tools(profile: AgentsProfile) -> list[Any]:
    async def read(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        run_id = params["run_id"]
        runs = profile.runtime.runs
        run = runs.get(run_id) if isinstance(runs, MemoryRunLog) else None
        if run is None:
            if isinstance(runs, DatabaseRunLog):  # another replica may have written it
                run = await runs.load(run_id)
            else:  # another server on this data dir may have written it
                import anyio

                run = (await anyio.to_thread.run_sync(read_runs, profile.data_dir)).get(run_id)
        if run is None:
            raise ToolError(f"no run {run_id[:80]!r} in {profile.data_dir}", code="run_not_found", effect_happened=False)
        payload = run.to_dict()
        if profile.artifacts is None:
            from openfunctions.artifacts import ArtifactStore

            profile.artifacts = ArtifactStore(profile.data_dir / "artifacts")
        from openfunctions.artifacts import project_reply

        return await project_reply(
            payload, store=profile.artifacts, scope=RUN_SCOPE, budget=RUN_BUDGET,
            summarize=lambda p: {"run_id": p["run_id"], "status": p["status"], "started": {
                k: p["started"].get(k) for k in ("agent", "provider", "model", "parent_run_id", "started_at")},
                "rounds": len(p["rounds"]), "finished": {k: (p["finished"] or {}).get(k) for k in ("status", "error", "receipts")}},
            keep=("run_id", "status"), read_tool="of_run_artifact_read",
        )

    run_read = define_tool(
        name="of_run_read",
        description="Read an agent run record by run id: the resolved model, digests, every round's tool calls with "
        "their receipt ids, the terminal status and the final text. Large records come back summarized, with the "
        "full record as an artifact (of_run_artifact_read).",
        input_schema={"type": "object", "properties": {"run_id": {"type": "string", "pattern": "^run_[0-9a-f]{32}$"}},
                      "required": ["run_id"], "additionalProperties": False},
        handler=read,
        tags=("runs",),
        capability={"effect": "read", "parallel_safe": True, "idempotent": True},
        annotations={"read_only_hint": True, "idempotent_hint": True, "open_world_hint": False},
    )

    from openfunctions.artifacts import ArtifactStore, create_artifact_read_tool

    if profile.artifacts is None:
        profile.artifacts = ArtifactStore(profile.data_dir / "artifacts")
    artifact_read = create_artifact_read_tool(
        profile.artifacts, name="of_run_artifact_read", allow=lambda info, ctx: info.scope == RUN_SCOPE,
        title="Read a run record artifact", tags=("runs",),
    )
    return [run_read, artifact_read]


def build_agents_profile(
    *,
    data_dir: Path,
    registry: ToolRegistry | None = None,
    principal: str | None = None,
    modules: tuple[str, ...] = (),
    store: str | None = None,
    upstreams: Any = None,
    sampling_timeout_s: float | None = None,
) -> AgentsProfile:
    found: list[Agent | Crew | ToolDefinition] = []
    for spec in modules:
        try:
            found += _load(spec)
        except AgentDefinitionError:
            if registry is None:
                raise
    if not found and registry is None and modules:
        where = ", ".join(modules)
        raise AgentDefinitionError(
            f"the 'agents' profile found no agents or crews ({where}): pass --module pkg.mod:attr naming an agent "
            "(define_agent), a crew (define_crew), a list of them or a factory"
        )
    # Under 'all' the registry handed in may be a projection (a read-only
    # view): serve a registry holding the same tools on the same executor.
    reg = ToolRegistry(registry.list(), executor=registry.executor) if registry is not None else ToolRegistry()
    runtime = AgentRuntime(reg) if sampling_timeout_s is None else AgentRuntime(reg, sampling_timeout_s=sampling_timeout_s)
    profile = AgentsProfile(registry=reg, runtime=runtime, data_dir=Path(data_dir))
    try:
        for t in _run_tools(profile):
            if t.name not in reg:
                reg.register(t)
        for item in found:
            if isinstance(item, Agent):
                profile.runtime.register(item)
            elif isinstance(item, Crew):
                profile.runtime.register_crew(item)
            elif item.name not in reg:  # under 'all' the tools loader may have registered it already
                reg.register(item)
    except OpenFunctionsError:
        if profile.artifacts is not None:
            profile.artifacts.close()
        raise
    if not found:
        profile.instructions = ""
    return profile


__all__ = ["AgentsProfile", "build_agents_profile"]
