"""The agent loop, served through the one path.

A run is itself a tool call: :meth:`AgentRuntime.run` executes the agent's
``agent_<name>`` tool through the registry's executor, and every tool the
model asks for runs as a *child* of that call (``with_child_execution``:
it inherits the reservation and the authority, narrowed to the agent's
``scopes``). So an agent's calls get validation, policy, scheduling,
receipts and the journal like any other call, and a read-only agent (all of
its own tools are reviewed parallel-safe reads, so it is served as a read)
cannot reach a writer, not even through delegation: the executor refuses
the call with a receipt.

The loop: build the filtered registry (``registry.project``), compose the
prompt, call the adapter, execute the requested tools in order, feed the
results back, and stop on a text reply (``completed``), at
``max_rounds`` (``max_rounds``), on cancellation (``cancelled``, re-raised)
or on an adapter error or a limit (``failed``). Each step is a run record
(:mod:`._records`), appended before the run moves on.

Concurrency note: an agent that may write is served exclusive (like any
unclassified tool), so it holds a write barrier while the model thinks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from openfunctions.adapters import (
    AdapterError,
    ChatOptions,
    Message,
    SamplingAdapter,
    ToolCall,
    Usage,
    resolve_adapter,
)
from openfunctions.core import (
    Capability,
    OpenFunctionsError,
    ToolDefinition,
    ToolError,
    ToolExecutionContext,
    ToolNotFound,
    ToolRegistry,
    define_tool,
    new_id,
    with_child_execution,
)

from . import _records as R
from ._agent import AGENT_TAG, Agent, Crew
from ._runlog import MemoryRunLog

RUN_ID_KEY = "openfunctions.run_id"
_RESULT_SINK = "openfunctions.agent_result"
SUBMIT_TOOL = "submit_output"
TOOL_RESULT_CHARS = 32768
TASK_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "What to do, in plain words"}},
    "required": ["task"],
    "additionalProperties": False,
}
RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the final answer"},
        "run_id": {"type": "string", "description": "read the run record with of_run_read"},
        "status": {"type": "string"},
        "rounds": {"type": "integer"},
        "output": {"description": "structured output, for an agent with an output schema"},
    },
    "required": ["text", "run_id", "status", "rounds"],
}
_READ = Capability(effect="read", parallel_safe=True, idempotent=False)


@dataclass
class RunResult:
    """What a run ended with. ``receipt`` is the receipt of the run's own tool call (when run through :meth:`AgentRuntime.run`)."""

    run_id: str
    agent: str
    status: str
    text: str | None = None
    output: Any = None
    rounds: int = 0
    usage: Usage = Usage()
    receipts: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    receipt: Any = None

    def to_payload(self) -> dict[str, Any]:
        out = {"text": self.text or "", "run_id": self.run_id, "status": self.status, "rounds": self.rounds}
        if self.output is not None:
            out["output"] = self.output
        return out


def _is_read(t: ToolDefinition) -> bool:
    return t.schedule_class == "shared"


def _content_text(content: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type')} content]")
    text = "\n".join(parts)
    if len(text) > TOOL_RESULT_CHARS:
        text = text[:TOOL_RESULT_CHARS] + f"\n[... truncated: {len(text) - TOOL_RESULT_CHARS} more characters]"
    return text


class AgentRuntime:
    """Agents over one registry (and its executor) and one run log."""

    def __init__(self, registry: ToolRegistry, runs: MemoryRunLog | None = None) -> None:
        self.registry = registry
        self.runs = runs if runs is not None else MemoryRunLog()
        self._agent_tools: dict[int, ToolDefinition] = {}

    # -- the filtered registry ---------------------------------------------
    def view(self, agent: Agent) -> ToolRegistry:
        """The agent's filtered registry: a projection sharing the executor."""
        base = self.registry.project(names=agent.tools, tags=agent.tags)
        explicit = set(agent.tools or ())
        names = [
            t.name for t in base.list()
            if t.name not in agent.exclude and (AGENT_TAG not in t.tags or t.name in explicit)
        ]
        return self.registry.project(names=names)

    def is_read_only(self, agent: Agent) -> bool:
        """All of the agent's own tools are reviewed parallel-safe reads (delegates do not count: they are refused instead)."""
        return all(_is_read(t) for t in self.view(agent).list())

    def register(self, agent: Agent) -> ToolDefinition:
        """Register the agent's own tools (``tools=[ToolDefinition]``) and its ``agent_<name>`` tool."""
        for t in agent.own_tools:
            if t.name not in self.registry:
                self.registry.register(t)
        for d in agent.delegates:
            for t in d.own_tools:
                if t.name not in self.registry:
                    self.registry.register(t)
        tool = self.agent_tool(agent)
        self.registry.register(tool)
        return tool

    def register_crew(self, crew: Crew) -> ToolDefinition:
        for a in crew.agents:
            for t in a.own_tools:
                if t.name not in self.registry:
                    self.registry.register(t)
        tool = self.crew_tool(crew)
        self.registry.register(tool)
        return tool

    # -- tools ---------------------------------------------------------------
    def agent_tool(self, agent: Agent, *, name: str | None = None) -> ToolDefinition:
        key = id(agent) if name is None else hash((id(agent), name))
        if key in self._agent_tools:
            return self._agent_tools[key]

        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            sink = ctx.metadata.get(_RESULT_SINK) if isinstance(ctx.metadata, Mapping) else None
            result = await self._loop(agent, params["task"], ctx)
            if isinstance(sink, list):
                sink.append(result)
            return self._reply(agent.name, result)

        tool = define_tool(
            name=name or f"agent_{agent.name}",
            description=f"Agent {agent.name}: {agent.description} Give it a task; it answers with text and a run id "
            "(read the run record with of_run_read).",
            input_schema=TASK_SCHEMA,
            output_schema=RESULT_SCHEMA,
            handler=handler,
            tags=(AGENT_TAG,),
            meta={"dev.openfunctions/agent": agent.name},
            capability=_READ if self.is_read_only(agent) else None,
        )
        self._agent_tools[key] = tool
        return tool

    def crew_tool(self, crew: Crew) -> ToolDefinition:
        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            return await self._run_crew(crew, params["task"], ctx)

        members = [self.agent_tool(a) for a in crew.agents]
        return define_tool(
            name=f"crew_{crew.name}",
            description=f"Crew {crew.name}: {crew.description}. Give it a task; it answers with text and the run ids.",
            input_schema=TASK_SCHEMA,
            output_schema={"type": "object", "properties": {
                "text": {"type": "string"}, "status": {"type": "string"},
                "runs": {"type": "array", "items": {"type": "object"}}}, "required": ["text", "status", "runs"]},
            handler=handler,
            tags=(AGENT_TAG,),
            meta={"dev.openfunctions/crew": crew.name},
            capability=_READ if all(m.schedule_class == "shared" for m in members) else None,
        )

    def _reply(self, name: str, result: RunResult) -> dict[str, Any]:
        if result.status == "completed":
            return result.to_payload()
        err = result.error or {}
        what = {
            "max_rounds": f"stopped after {result.rounds} rounds without a final answer",
            "failed": f"failed: {err.get('message', 'unknown error')}",
        }.get(result.status, result.status)
        raise ToolError(
            f"agent {name!r} {what} (run {result.run_id}; read it with of_run_read)",
            code="agent_max_rounds" if result.status == "max_rounds" else err.get("code") or "agent_failed",
            effect_happened=False if not result.receipts else None,
            details={"run_id": result.run_id, "status": result.status},
        )

    def _synthetic(self, agent: Agent) -> list[ToolDefinition]:
        out: list[ToolDefinition] = []
        for d in agent.delegates:
            out.append(self._delegate_tool(d))
        if agent.output_schema is not None:
            out.append(define_tool(
                name=SUBMIT_TOOL,
                description="Submit your final answer as structured output. Call it once, when you are done.",
                input_schema=agent.output_schema,
                handler=lambda params, ctx: {"accepted": True},
                capability=_READ,
            ))
        return out

    def _delegate_tool(self, d: Agent) -> ToolDefinition:
        key = hash(("delegate", id(d)))
        if key in self._agent_tools:
            return self._agent_tools[key]

        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            return self._reply(d.name, await self._loop(d, params["task"], ctx))

        tool = define_tool(
            name=f"delegate_to_{d.name}",
            description=f"Delegate a task to agent {d.name}: {d.description}",
            input_schema=TASK_SCHEMA,
            output_schema=RESULT_SCHEMA,
            handler=handler,
            capability=_READ if self.is_read_only(d) else None,
        )
        self._agent_tools[key] = tool
        return tool

    # -- running -----------------------------------------------------------
    async def run(self, agent: Agent, task: str, context: ToolExecutionContext | None = None) -> RunResult:
        """Run ``agent`` on ``task`` as a call of its ``agent_<name>`` tool, through the executor."""
        sink: list[RunResult] = []
        ctx = context or ToolExecutionContext()
        ctx = ctx.replace(metadata={**dict(ctx.metadata), _RESULT_SINK: sink})
        detailed = await self.registry.executor.execute_detailed(self.agent_tool(agent), {"task": task}, ctx)
        if sink:
            result = sink[0]
        else:  # refused before the loop started (invalid task, policy, admission)
            err = detailed.error
            result = RunResult(run_id="", agent=agent.name, status="failed",
                               error={"code": err.code, "message": err.message} if err else None)
        result.receipt = detailed.receipt
        return result

    def _adapter(self, agent: Agent, ctx: ToolExecutionContext) -> Any:
        if agent.adapter is not None:
            return agent.adapter
        if agent.model is not None:
            if "adapter" not in agent._resolved:
                agent._resolved["adapter"] = resolve_adapter(model=agent.model)
            return agent._resolved["adapter"]
        return SamplingAdapter.from_context(ctx)

    def _inner_context(self, agent: Agent, ctx: ToolExecutionContext, run_id: str) -> ToolExecutionContext:
        if ctx.receipt_id is not None and ctx.reservation is not None:
            inner = with_child_execution(ctx, scopes=agent.scopes)
        else:
            inner = ctx.replace(scopes=ctx.scopes if agent.scopes is None else ctx.scopes & agent.scopes)
        meta = {k: v for k, v in dict(ctx.metadata).items() if k != _RESULT_SINK}
        meta[RUN_ID_KEY] = run_id
        return inner.replace(metadata=meta, progress=None)

    async def _loop(self, agent: Agent, task: str, ctx: ToolExecutionContext, *, crew: str | None = None) -> RunResult:
        run_id = new_id("run")
        lim = agent.limits
        view = self.view(agent)
        synthetic = ToolRegistry(self._synthetic(agent), executor=self.registry.executor)
        tools = view.list() + synthetic.list()
        result = RunResult(run_id=run_id, agent=agent.name, status="failed")
        adapter_error: OpenFunctionsError | None = None
        try:
            adapter = self._adapter(agent, ctx)
        except OpenFunctionsError as exc:
            adapter, adapter_error = None, exc
        meta = ctx.metadata if isinstance(ctx.metadata, Mapping) else {}
        await self.runs.append(R.STARTED, R.started(
            run_id=run_id, agent=agent.name, crew=crew,
            provider=getattr(adapter, "provider", "unresolved"), model=getattr(adapter, "model", agent.model or "unresolved"),
            instructions=agent.instructions, tools=[{"name": t.name, "spec_sha256": t.spec_sha256} for t in tools],
            limits=lim.to_dict(), task=task, principal=ctx.principal, parent_run_id=meta.get(RUN_ID_KEY),
            parent_receipt_id=ctx.receipt_id,
        ))
        cancelled = anyio.get_cancelled_exc_class()
        try:
            if adapter_error is not None:
                raise adapter_error
            if lim.timeout_s is not None:
                with anyio.fail_after(lim.timeout_s):
                    await self._rounds(agent, task, ctx, adapter, view, synthetic, tools, result)
            else:
                await self._rounds(agent, task, ctx, adapter, view, synthetic, tools, result)
        except cancelled:
            result.status = "cancelled"
            result.error = {"code": "cancelled", "message": "the run was cancelled"}
            with anyio.CancelScope(shield=True):
                await self._finish(result)
            raise
        except TimeoutError:
            result.status = "failed"
            result.error = {"code": "run_timeout", "message": f"the run exceeded its {lim.timeout_s}s limit"}
        except OpenFunctionsError as exc:
            result.status = "failed"
            result.error = {"code": exc.code, "message": exc.message}
        with anyio.CancelScope(shield=True):
            await self._finish(result)
        return result

    async def _finish(self, result: RunResult) -> None:
        await self.runs.append(R.FINISHED, R.finished(
            run_id=result.run_id, status=result.status, rounds=result.rounds, usage=result.usage.to_dict(),
            receipts=result.receipts, text=result.text, output=result.output, error=result.error,
        ))
        if result.status == "completed":
            await self.runs.append(R.CLAIM, R.claim(run_id=result.run_id, agent=result.agent, text=result.text or ""))

    async def _rounds(self, agent: Agent, task: str, ctx: ToolExecutionContext, adapter: Any, view: ToolRegistry,
                      synthetic: ToolRegistry, tools: list[ToolDefinition], result: RunResult) -> None:
        lim = agent.limits
        system = agent.instructions
        if agent.output_schema is not None:
            system += f"\n\nWhen you are done, call {SUBMIT_TOOL} with your answer; its arguments are your output."
        messages = [Message.system(system), Message.user(task)]
        options = ChatOptions(max_tokens=lim.max_tokens, temperature=lim.temperature)
        inner = self._inner_context(agent, ctx, result.run_id)
        calls_made = 0
        for n in range(1, lim.max_rounds + 1):
            reply = await adapter.chat(messages, tools, options)
            result.rounds = n
            result.usage = result.usage + reply.usage
            records: list[dict[str, Any]] = []
            if not reply.tool_calls:
                if agent.output_schema is not None:
                    # The answer must come through the extraction tool; remind once per round.
                    messages += [reply.as_message(), Message.user(f"Call {SUBMIT_TOOL} with your final answer.")]
                else:
                    result.text, result.status = reply.text or "", "completed"
                await self._round(result, n, reply, records)
                if result.status == "completed":
                    return
                await ctx.report_progress(n, lim.max_rounds, f"{agent.name}: round {n}, no tool call")
                continue
            messages.append(reply.as_message())
            for call in reply.tool_calls:
                calls_made += 1
                if calls_made > lim.max_tool_calls:
                    await self._round(result, n, reply, records)
                    raise ToolError(f"the run asked for more than {lim.max_tool_calls} tool calls", code="tool_call_limit")
                text, is_error, rec, submitted = await self._call(call, view, synthetic, inner)
                records.append(rec)
                if rec.get("receipt_id"):
                    result.receipts.append(rec["receipt_id"])
                messages.append(Message.tool_result(call, text, is_error=is_error))
                if submitted:
                    result.output, result.status = call.arguments, "completed"
                    result.text = json.dumps(call.arguments, ensure_ascii=False)
                    break
            await self._round(result, n, reply, records)
            if result.status == "completed":
                return
            await ctx.report_progress(n, lim.max_rounds, f"{agent.name}: round {n}, {len(records)} tool call(s)")
        result.status = "max_rounds"

    async def _round(self, result: RunResult, n: int, reply: Any, records: list[dict[str, Any]]) -> None:
        await self.runs.append(R.ROUND, R.round_(
            run_id=result.run_id, n=n, model=reply.model, stop_reason=reply.stop_reason,
            usage=reply.usage.to_dict(), tool_calls=records, text=reply.text,
        ))

    async def _call(self, call: ToolCall, view: ToolRegistry, synthetic: ToolRegistry,
                    ctx: ToolExecutionContext) -> tuple[str, bool, dict[str, Any], bool]:
        target = synthetic if call.name in synthetic else view
        try:
            detailed = await target.execute_detailed(call.name, call.arguments, ctx)
        except ToolNotFound as exc:
            available = ", ".join(t.name for t in view.list() + synthetic.list()) or "none"
            text = f"{exc.message}. Tools available to you: {available}"
            return text, True, {"id": call.id, "name": call.name, "receipt_id": None, "outcome": "not_found",
                                "error_code": exc.code}, False
        r = detailed.receipt
        rec = {"id": call.id, "name": call.name, "receipt_id": r.receipt_id, "outcome": r.outcome,
               "error_code": r.error.code if r.error else None}
        submitted = call.name == SUBMIT_TOOL and target is synthetic and detailed.ok
        return _content_text(detailed.result.content), detailed.result.is_error, rec, submitted

    # -- crews ---------------------------------------------------------------
    async def _run_crew(self, crew: Crew, task: str, ctx: ToolExecutionContext) -> dict[str, Any]:
        crew_ctx = ctx.replace(metadata={k: v for k, v in dict(ctx.metadata).items() if k != _RESULT_SINK})

        async def one(agent: Agent, agent_task: str) -> RunResult:
            sink: list[RunResult] = []
            child = with_child_execution(crew_ctx) if crew_ctx.reservation is not None else crew_ctx
            child = child.replace(metadata={**dict(child.metadata), _RESULT_SINK: sink}, progress=None)
            d = await self.registry.executor.execute_detailed(self.agent_tool(agent), {"task": agent_task}, child)
            if sink:
                return sink[0]
            err = d.error
            return RunResult("", agent.name, "failed", error={"code": err.code, "message": err.message} if err else None)

        results: list[RunResult] = []
        if crew.mode == "sequential":
            current = task
            for i, agent in enumerate(crew.agents, 1):
                r = await one(agent, current)
                results.append(r)
                await ctx.report_progress(i, len(crew.agents), f"crew {crew.name}: {agent.name} {r.status}")
                if r.status != "completed":
                    break
                current = f"{task}\n\nThe previous agent ({agent.name}) answered:\n{r.text}"
            text = results[-1].text or ""
        else:
            slots: list[RunResult | None] = [None] * len(crew.agents)

            async def run_at(i: int, agent: Agent) -> None:
                slots[i] = await one(agent, task)

            async with anyio.create_task_group() as tg:
                for i, agent in enumerate(crew.agents):
                    tg.start_soon(run_at, i, agent)
            results = [r for r in slots if r is not None]
            text = "\n\n".join(f"## {r.agent}\n{r.text or ''}" for r in results)
        status = "completed" if results and all(r.status == "completed" for r in results) and len(results) == len(crew.agents) else "failed"
        runs = [{"agent": r.agent, "run_id": r.run_id, "status": r.status} for r in results]
        if status != "completed":
            bad = next(r for r in results if r.status != "completed")
            raise ToolError(f"crew {crew.name!r}: agent {bad.agent!r} ended {bad.status} (run {bad.run_id})",
                            code="crew_failed", details={"runs": runs})
        return {"text": text, "status": status, "runs": runs}


async def run_agent(agent: Agent, task: str, *, registry: ToolRegistry, runs: MemoryRunLog | None = None,
                    context: ToolExecutionContext | None = None) -> RunResult:
    """Run ``agent`` once over ``registry`` (its own tools are registered if absent); see :class:`AgentRuntime`."""
    rt = AgentRuntime(registry, runs)
    for t in agent.own_tools:
        if t.name not in registry:
            registry.register(t)
    return await rt.run(agent, task, context)


__all__ = ["AgentRuntime", "RUN_ID_KEY", "RunResult", "SUBMIT_TOOL", "run_agent"]
