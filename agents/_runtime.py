"""The agent loop, served through the one path.

A run is itself a tool call: :meth:`AgentRuntime.run` executes the agent's
``agent_<name>`` tool through an executor, and every tool the model asks
for is a call linked to it (``parent_receipt_id``), with the authority
narrowed to the agent's ``scopes``. So an agent's calls get validation,
policy, scheduling, receipts and the journal like any other call, and a
read-only agent (all of its own tools are reviewed parallel-safe reads, so
it is served as a read) cannot reach a writer, not even through delegation:
the executor refuses the call with a receipt.

The loop: build the filtered registry (``registry.project``), compose the
prompt, call the adapter, execute the requested tools in order, feed the
results back, and stop on a text reply (``completed``), at
``max_rounds`` (``max_rounds``), on cancellation (``cancelled``, re-raised)
on a deadline (``timeout``) or on an adapter error or another limit
(``failed``). Each step is a run record
(:mod:`._records`), appended before the run moves on.

Admission (``openfunctions.workflows.begin_run``): a run gives its own
scheduler reservation back as soon as its loop starts and each tool call it
makes is admitted on its own (a write still runs alone). Nothing is held
while the model thinks, so a slow model, or an MCP host that never answers a
sampling request, cannot stall anyone else's write. ``RunOptions(admission=
"run")`` keeps the older behaviour for a direct run (the run's reservation
held throughout, its calls inside it).

Deadlines: ``AgentLimits.timeout_s`` (the whole run, default 600 s) and each
sampling request (``AgentLimits.sampling_timeout_s``, else the runtime's,
default 120 s). Either ends the run ``timeout`` with its run record and the
run's receipt; nothing is left held.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import structlog

from openfunctions.adapters import (
    DEFAULT_SAMPLING_TIMEOUT_S,
    AdapterTimeout,
    ChatOptions,
    MalformedResponse,
    Message,
    SamplingAdapter,
    ToolCall,
    Usage,
    resolve_adapter,
    valid_text,
)
from openfunctions.core import (
    Capability,
    OpenFunctionsError,
    ToolDefinition,
    ToolError,
    ToolExecutionContext,
    ToolExecutor,
    ToolNotFound,
    ToolRegistry,
    define_tool,
    new_id,
)
from openfunctions.workflows import begin_run, child_context

from . import _records as R
from ._agent import AGENT_TAG, Agent, Crew
from ._errors import AgentDefinitionError
from ._runlog import MemoryRunLog

log = structlog.get_logger("openfunctions.agents")

#: Deprecated: the run a call belongs to is ``ctx.run_id``; this metadata key is read (never written) as a fallback.
RUN_ID_KEY = "openfunctions.run_id"
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
# An agent or crew run served over MCP may answer as a task (servers/_tasks.py) when it runs long.
_READ_RUN = Capability(effect="read", parallel_safe=True, idempotent=False, task_support="optional")
_RUN = Capability(task_support="optional")


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
    #: receipts of succeeded calls whose tool requires verification (the claim lists them)
    needs_verification: list[str] = field(default_factory=list)
    #: the conversation as the run left it: system prompt, history, task, then each round's messages
    messages: list[Message] = field(default_factory=list)

    def to_payload(self) -> dict[str, Any]:
        out = {"text": self.text or "", "run_id": self.run_id, "status": self.status, "rounds": self.rounds}
        if self.output is not None:
            out["output"] = self.output
        return out


@dataclass(frozen=True)
class RunOptions:
    """Per-run extras for an embedding host (the chat agent): not part of the agent's declaration.

    - ``history``: earlier turns placed between the system prompt and the task
      (user/assistant text messages of a conversation).
    - ``system``: the system prompt for this run instead of the agent's
      ``instructions`` (e.g. the instructions plus per-turn context); the run
      record's ``instructions_sha256`` is of the prompt actually used.
    - ``on_event``: ``async (event: dict) -> None``, awaited in order:
      ``{"type": "text", "text"}`` (a streamed delta, or a whole reply's text),
      ``{"type": "tool_call", "round", "id", "name", "arguments"}`` before a
      tool runs, ``{"type": "tool_result", "round", "id", "name", "receipt_id",
      "outcome", "error_code", "is_error", "content"}`` after it settled. An
      exception it raises is logged and ignored (an observer never ends a run).
    - ``stream``: ask the model through ``adapter.stream`` (text deltas as they come).
    - ``admission``: ``"per_call"`` (the default): the run's own call takes
      no place in the registry's scheduler (a scheduler of its own admits
      it; same policy, mode and journal), and each tool call the model asks
      for is admitted by the registry's scheduler on its own, its receipt
      linked to the run's (a write still runs alone, but nothing is held
      while the model thinks). ``"run"``: the run's own call is admitted by
      the registry's scheduler and holds that reservation for the whole run
      (an agent that may write: a write barrier while the model thinks); its
      tool calls run inside it.

    Applies to the top-level run only; delegated runs do not inherit it (they
    are admitted per call, or run inside a held reservation they inherit).
    """

    history: Sequence[Message] = ()
    system: str | None = None
    on_event: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    stream: bool = False
    admission: Literal["run", "per_call"] = "per_call"

    def __post_init__(self) -> None:
        if self.admission not in ("run", "per_call"):
            raise ValueError(f"RunOptions.admission must be 'run' or 'per_call', not {self.admission!r}")


_NO_OPTIONS = RunOptions()


@dataclass(eq=False)
class _Waiting:
    """A call of an agent's tool this runtime started: the options its run takes, the result it leaves."""

    options: RunOptions
    result: RunResult | None = None
_COMPILED: dict[str, tuple[Any, Any]] = {}


def _tool(*, name: str, description: str, input_schema: dict[str, Any], handler: Any,
          output_schema: dict[str, Any] | None = None, **kw: Any) -> ToolDefinition:
    """``define_tool`` for the tools this module manufactures per runtime and run.

    Compiling a JSON Schema validator costs milliseconds and agent, delegate
    and extraction tools are made afresh for each runtime; their schemas
    repeat, so the compiled validators (stateless) are shared by schema.
    """
    from openfunctions.core import canonical_json

    key = canonical_json([input_schema, output_schema])
    compiled = _COMPILED.get(key)
    t = define_tool(name=name, description=description, input_schema=input_schema, handler=handler,
                    output_schema=output_schema, **kw) if compiled is None else ToolDefinition(
        name=name, description=description, input_schema=dict(input_schema), handler=handler,
        output_schema=dict(output_schema) if output_schema is not None else None,
        tags=tuple(kw.get("tags", ())), meta=dict(kw.get("meta") or {}), capability=kw.get("capability"),
    )
    if compiled is None:
        if len(_COMPILED) < 512:
            _COMPILED[key] = (t.input_validator, t.output_validator)
    else:
        t.__dict__["input_validator"], t.__dict__["output_validator"] = compiled
    return t


async def _accept(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"accepted": True}


EVENT_CONTENT_CHARS = 4000


async def _emit(opts: RunOptions, event: dict[str, Any]) -> None:
    if opts.on_event is None:
        return
    try:
        await opts.on_event(event)
    except Exception as exc:
        log.warning("run_observer_failed", error=f"{type(exc).__name__}: {exc}")


async def _progress(ctx: ToolExecutionContext, n: float, total: float, message: str) -> None:
    """Progress is best effort: a caller that went away must not end the run (cancellation does that)."""
    try:
        await ctx.report_progress(n, total, message)
    except Exception as exc:
        log.debug("progress_not_delivered", error=f"{type(exc).__name__}: {exc}")


def _is_read(t: ToolDefinition) -> bool:
    return t.schedule_class == "shared"


def _content_text(content: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type')} content]")
    text = valid_text("\n".join(parts))  # a tool's text on its way into the conversation and the run's events
    if len(text) > TOOL_RESULT_CHARS:
        text = text[:TOOL_RESULT_CHARS] + f"\n[... truncated: {len(text) - TOOL_RESULT_CHARS} more characters]"
    return text


class AgentRuntime:
    """Agents over one registry (and its executor) and one run log."""

    def __init__(self, registry: ToolRegistry, runs: MemoryRunLog | None = None, *,
                 sampling_timeout_s: float = DEFAULT_SAMPLING_TIMEOUT_S) -> None:
        """``sampling_timeout_s``: each sampling request's deadline for agents whose limits name none."""
        if not (isinstance(sampling_timeout_s, (int, float)) and sampling_timeout_s > 0):
            raise ValueError(f"sampling_timeout_s must be a positive number of seconds, not {sampling_timeout_s!r}")
        self.registry = registry
        self.runs = runs if runs is not None else MemoryRunLog()
        self.sampling_timeout_s = float(sampling_timeout_s)
        self._agent_tools: dict[tuple[Any, ...], ToolDefinition] = {}
        self._waiting: dict[str, _Waiting] = {}  # receipt id -> slot (see _run_call)
        self._resolved: list[Any] = []

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

    def _register_own(self, agent: Agent) -> None:
        for t in (*agent.own_tools, *(t for d in agent.delegates for t in d.own_tools)):
            if t.name not in self.registry:
                self.registry.register(t)
            elif self.registry.get(t.name) is not t:
                raise AgentDefinitionError(
                    f"agent {agent.name!r} brings a tool named {t.name!r}, and a different tool of that name is "
                    "already registered: rename one of them"
                )

    def register(self, agent: Agent) -> ToolDefinition:
        """Register the agent's own tools (``tools=[ToolDefinition]``) and its ``agent_<name>`` tool."""
        self._register_own(agent)
        tool = self.agent_tool(agent)
        self.registry.register(tool)
        return tool

    def register_crew(self, crew: Crew) -> ToolDefinition:
        for a in crew.agents:
            self._register_own(a)
        tool = self.crew_tool(crew)
        self.registry.register(tool)
        return tool

    # -- tools ---------------------------------------------------------------
    def agent_tool(self, agent: Agent, *, name: str | None = None) -> ToolDefinition:
        key = ("agent", id(agent), name)
        if key in self._agent_tools:
            return self._agent_tools[key]

        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            # A call this runtime started itself (run(), a crew member) has a slot keyed by its receipt id:
            # the whole RunResult goes there; any other caller gets the tool's payload (or its error).
            waiting = self._waiting.get(ctx.receipt_id) if ctx.receipt_id is not None else None
            result = await self._loop(agent, params["task"], ctx, opts=waiting.options if waiting else _NO_OPTIONS)
            if waiting is not None:
                waiting.result = result
            return self._reply(agent.name, result)

        tool = _tool(
            name=name or f"agent_{agent.name}",
            description=f"Agent {agent.name}: {agent.description} Give it a task; it answers with text and a run id "
            "(read the run record with of_run_read).",
            input_schema=TASK_SCHEMA,
            output_schema=RESULT_SCHEMA,
            handler=handler,
            tags=(AGENT_TAG,),
            meta={"dev.openfunctions/agent": agent.name},
            capability=_READ_RUN if self.is_read_only(agent) else _RUN,
        )
        self._agent_tools[key] = tool
        return tool

    def crew_tool(self, crew: Crew) -> ToolDefinition:
        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            return await self._run_crew(crew, params["task"], ctx)

        members = [self.agent_tool(a) for a in crew.agents]
        return _tool(
            name=f"crew_{crew.name}",
            description=f"Crew {crew.name}: {crew.description}. Give it a task; it answers with text and the run ids.",
            input_schema=TASK_SCHEMA,
            output_schema={"type": "object", "properties": {
                "text": {"type": "string"}, "status": {"type": "string"},
                "runs": {"type": "array", "items": {"type": "object"}}}, "required": ["text", "status", "runs"]},
            handler=handler,
            tags=(AGENT_TAG,),
            meta={"dev.openfunctions/crew": crew.name},
            capability=_READ_RUN if all(m.schedule_class == "shared" for m in members) else _RUN,
        )

    def _reply(self, name: str, result: RunResult) -> dict[str, Any]:
        if result.status == "completed":
            return result.to_payload()
        err = result.error or {}
        what = {
            "max_rounds": f"stopped after {result.rounds} rounds without a final answer",
            "failed": f"failed: {err.get('message', 'unknown error')}",
            "timeout": f"timed out: {err.get('message', 'a deadline passed')}",
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
            out.append(_tool(
                name=SUBMIT_TOOL,
                description="Submit your final answer as structured output. Call it once, when you are done.",
                input_schema=agent.output_schema,
                handler=_accept,
                capability=_READ,
            ))
        return out

    def _delegate_tool(self, d: Agent) -> ToolDefinition:
        key = ("delegate", id(d))
        if key in self._agent_tools:
            return self._agent_tools[key]

        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            return self._reply(d.name, await self._loop(d, params["task"], ctx))

        tool = _tool(
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
    async def run(self, agent: Agent, task: str, context: ToolExecutionContext | None = None, *,
                  options: RunOptions | None = None) -> RunResult:
        """Run ``agent`` on ``task`` as a call of its ``agent_<name>`` tool, through the executor.

        ``options`` (:class:`RunOptions`): conversation history, a per-run system prompt, an event observer.
        """
        ctx = context or ToolExecutionContext()
        executor = self.registry.executor
        if (options or _NO_OPTIONS).admission == "per_call":  # admitted at once: see RunOptions.admission
            executor = ToolExecutor(policy=executor.policy, mode=executor.mode, sink=executor.sink, max_parallel=1)
        detailed, result = await self._run_call(executor, agent, task, ctx, options or _NO_OPTIONS)
        result.receipt = detailed.receipt
        return result

    async def _run_call(self, executor: ToolExecutor, agent: Agent, task: str, ctx: ToolExecutionContext,
                        options: RunOptions) -> tuple[Any, RunResult]:
        """Call ``agent``'s tool through ``executor`` and get its whole :class:`RunResult` back.

        The call's receipt id is chosen here and keys a slot this runtime holds while the call runs
        (``_waiting``): the handler finds its options there and leaves its result there. Nothing travels
        through the context, so a run's tools never see another run's result or options.
        """
        receipt_id = new_id("rcpt")
        waiting = self._waiting[receipt_id] = _Waiting(options)
        try:
            detailed = await executor.execute_detailed(self.agent_tool(agent), {"task": task}, ctx, receipt_id=receipt_id)
        finally:
            del self._waiting[receipt_id]
        if waiting.result is not None:
            return detailed, waiting.result
        # refused before the loop started (invalid task, policy, admission)
        err = detailed.error
        return detailed, RunResult(run_id="", agent=agent.name, status="failed",
                                   error={"code": err.code, "message": err.message} if err else None)

    def _adapter(self, agent: Agent, ctx: ToolExecutionContext) -> Any:
        if agent.adapter is not None:
            return agent.adapter
        if agent.model is not None:
            if "adapter" not in agent._resolved:
                agent._resolved["adapter"] = resolve_adapter(model=agent.model)
                self._resolved.append(agent._resolved["adapter"])
            return agent._resolved["adapter"]
        timeout = agent.limits.sampling_timeout_s
        return SamplingAdapter.from_context(ctx, timeout_s=timeout if timeout is not None else self.sampling_timeout_s)

    async def aclose(self) -> None:
        """Close the HTTP clients of adapters this runtime resolved from ``model=`` (not adapters passed in)."""
        while self._resolved:
            adapter = self._resolved.pop()
            close = getattr(adapter, "aclose", None)
            if close is not None:
                await close()

    @staticmethod
    def _inner_context(ctx: ToolExecutionContext, run_id: str) -> ToolExecutionContext:
        """The run's context as its tool calls see it (each call's own comes from ``child_context``)."""
        return ctx.replace(run_id=run_id, progress=None)

    async def _loop(self, agent: Agent, task: str, ctx: ToolExecutionContext, *, crew: str | None = None,
                    opts: RunOptions = _NO_OPTIONS) -> RunResult:
        parent_run_id = ctx.run_id
        if parent_run_id is None and isinstance(ctx.metadata, Mapping):  # deprecated: a host writing RUN_ID_KEY
            legacy = ctx.metadata.get(RUN_ID_KEY)
            parent_run_id = legacy if isinstance(legacy, str) else None
        # First of all: hold nothing while the run waits (see the module doc).
        ctx = begin_run(ctx, hold=opts.admission == "run")
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
        started = R.started(
            run_id=run_id, agent=agent.name, crew=crew,
            provider=getattr(adapter, "provider", "unresolved"), model=getattr(adapter, "model", agent.model or "unresolved"),
            instructions=opts.system if opts.system is not None else agent.instructions, tools=[{"name": t.name, "spec_sha256": t.spec_sha256} for t in tools],
            limits=lim.to_dict(), task=task, principal=ctx.principal, parent_run_id=parent_run_id,
            parent_receipt_id=ctx.receipt_id,
        )
        cancelled = anyio.get_cancelled_exc_class()
        try:
            await self.runs.append(R.STARTED, started)  # durable before the first model call
            if adapter_error is not None:
                raise adapter_error
            if lim.timeout_s is not None:
                with anyio.fail_after(lim.timeout_s):
                    await self._rounds(agent, task, ctx, adapter, view, synthetic, tools, result, opts)
            else:
                await self._rounds(agent, task, ctx, adapter, view, synthetic, tools, result, opts)
        except cancelled:
            result.status = "cancelled"
            result.error = {"code": "cancelled", "message": "the run was cancelled"}
            with anyio.CancelScope(shield=True):
                await self._finish(result)
            raise
        except TimeoutError:
            result.status = "timeout"
            result.error = {"code": "run_timeout", "message": f"the run exceeded its {lim.timeout_s:g} s limit"}
        except AdapterTimeout as exc:  # the model (an HTTP provider, a sampling host) did not answer in time
            result.status = "timeout"
            result.error = {"code": exc.code, "message": exc.message}
        except OpenFunctionsError as exc:
            result.status = "failed"
            result.error = {"code": exc.code, "message": exc.message}
        except Exception as exc:  # a bug below us: the record still ends, then the executor reports it
            result.status = "failed"
            result.error = {"code": "agent_internal_error", "message": f"{type(exc).__name__}: {exc}"[:2000]}
            with anyio.CancelScope(shield=True):
                await self._finish(result)
            raise
        with anyio.CancelScope(shield=True):
            await self._finish(result)
        return result

    async def _finish(self, result: RunResult) -> None:
        claim = result.status == "completed"
        # The claim rides the same fsync: queued behind the finish, waited for once.
        await self.runs.append(R.FINISHED, R.finished(
            run_id=result.run_id, status=result.status, rounds=result.rounds, usage=result.usage.to_dict(),
            receipts=result.receipts, text=result.text, output=result.output, error=result.error,
        ), wait=not claim)
        if claim:
            await self.runs.append(R.CLAIM, R.claim(run_id=result.run_id, agent=result.agent, text=result.text or "",
                                                    requires_verification=result.needs_verification))

    async def _rounds(self, agent: Agent, task: str, ctx: ToolExecutionContext, adapter: Any, view: ToolRegistry,
                      synthetic: ToolRegistry, tools: list[ToolDefinition], result: RunResult,
                      opts: RunOptions = _NO_OPTIONS) -> None:
        lim = agent.limits
        system = opts.system if opts.system is not None else agent.instructions
        if agent.output_schema is not None:
            system += f"\n\nWhen you are done, call {SUBMIT_TOOL} with your answer; its arguments are your output."
        messages = result.messages = [Message.system(system), *opts.history, Message.user(task)]
        await self._messages(result, 0, messages)
        options = ChatOptions(max_tokens=lim.max_tokens, temperature=lim.temperature)
        inner = self._inner_context(ctx, result.run_id)
        calls_made = 0
        for n in range(1, lim.max_rounds + 1):
            reply = await self._ask(adapter, messages, tools, options, opts)
            result.rounds = n
            result.usage = result.usage + reply.usage
            records: list[dict[str, Any]] = []
            if not reply.tool_calls:
                if agent.output_schema is not None:
                    # The answer must come through the extraction tool; remind once per round.
                    messages += [reply.as_message(), Message.user(f"Call {SUBMIT_TOOL} with your final answer.")]
                    await self._messages(result, n, messages[-2:])
                else:
                    result.text, result.status = reply.text or "", "completed"
                    messages.append(reply.as_message())
                    await self._messages(result, n, messages[-1:])
                await self._round(result, n, reply, records)
                if result.status == "completed":
                    return
                await _progress(ctx, n, lim.max_rounds, f"{agent.name}: round {n}, no tool call")
                continue
            messages.append(reply.as_message())
            await self._messages(result, n, messages[-1:])  # queued before the calls run
            for call in reply.tool_calls:
                calls_made += 1
                if calls_made > lim.max_tool_calls:
                    await self._round(result, n, reply, records)
                    raise ToolError(f"the run asked for more than {lim.max_tool_calls} tool calls", code="tool_call_limit")
                await _emit(opts, {"type": "tool_call", "round": n, "id": call.id, "name": call.name,
                                   "arguments": call.arguments})
                text, is_error, rec, submitted = await self._call(call, view, synthetic, inner, agent.scopes)
                await _emit(opts, {"type": "tool_result", "round": n, **rec, "is_error": is_error,
                                   "content": text[:EVENT_CONTENT_CHARS]})
                records.append(rec)
                if rec.get("rerun_of"):
                    result.receipts.append(rec["rerun_of"])
                if rec.get("receipt_id"):
                    result.receipts.append(rec["receipt_id"])
                    if rec.get("requires_verification") and rec.get("outcome") == "succeeded":
                        result.needs_verification.append(rec["receipt_id"])
                messages.append(Message.tool_result(call, text, is_error=is_error))
                await self._messages(result, n, messages[-1:])
                if submitted:
                    result.output, result.status = call.arguments, "completed"
                    result.text = json.dumps(call.arguments, ensure_ascii=False)
                    break
            await self._round(result, n, reply, records)
            if result.status == "completed":
                return
            await _progress(ctx, n, lim.max_rounds, f"{agent.name}: round {n}, {len(records)} tool call(s)")
        result.status = "max_rounds"

    async def _ask(self, adapter: Any, messages: list[Message], tools: list[ToolDefinition], options: ChatOptions,
                   opts: RunOptions) -> Any:
        """One model call: ``adapter.chat``, or ``adapter.stream`` with text deltas observed as they arrive."""
        if not (opts.stream and opts.on_event is not None):
            reply = await adapter.chat(messages, tools, options)
            if reply.text:
                await _emit(opts, {"type": "text", "text": reply.text})
            return reply
        reply = None
        async for event in adapter.stream(messages, tools, options):
            if event.type == "text" and event.text:
                await _emit(opts, {"type": "text", "text": event.text})
            elif event.type == "done":
                reply = event.reply
        if reply is None:
            raise MalformedResponse(f"the {getattr(adapter, 'provider', '?')} stream ended without its final reply")
        return reply

    async def _messages(self, result: RunResult, n: int, new: list[Message]) -> None:
        # Not waited for, like the round's record (see agents/_records.py run_messages).
        await self.runs.append(R.MESSAGES, R.messages_(run_id=result.run_id, n=n, messages=new), wait=False)

    async def _round(self, result: RunResult, n: int, reply: Any, records: list[dict[str, Any]]) -> None:
        # Not waited for: its fsync overlaps the next model call, and the run's
        # finish (waited) is written after it (see RunJournal).
        await self.runs.append(R.ROUND, R.round_(
            run_id=result.run_id, n=n, model=reply.model, stop_reason=reply.stop_reason,
            usage=reply.usage.to_dict(), tool_calls=records, text=reply.text,
        ), wait=False)

    async def _call(self, call: ToolCall, view: ToolRegistry, synthetic: ToolRegistry, ctx: ToolExecutionContext,
                    scopes: frozenset[str] | None) -> tuple[str, bool, dict[str, Any], bool]:
        target = synthetic if call.name in synthetic else view
        try:
            tool = target.get(call.name)
            detailed = await target.execute_detailed(call.name, call.arguments, child_context(ctx, tool, scopes=scopes))
        except ToolNotFound as exc:
            available = ", ".join(t.name for t in view.list() + synthetic.list()) or "none"
            text = f"{exc.message}. Tools available to you: {available}"
            return text, True, {"id": call.id, "name": call.name, "receipt_id": None, "outcome": "not_found",
                                "error_code": exc.code}, False
        r = detailed.receipt
        cap = tool.capability
        rerun_of = None
        if _unknown(r) and cap is not None and cap.idempotent and target is view:
            # The tool's author declared that running it again is harmless, so an uncertain call is
            # settled by running it once more instead of leaving the model (and the claim) to guess.
            rerun_of = r.receipt_id
            detailed = await target.execute_detailed(call.name, call.arguments, child_context(ctx, tool, scopes=scopes))
            r = detailed.receipt
        rec: dict[str, Any] = {"id": call.id, "name": call.name, "receipt_id": r.receipt_id, "outcome": r.outcome,
               "error_code": r.error.code if r.error else None}
        if rerun_of is not None:
            rec["rerun_of"] = rerun_of
        if cap is not None and cap.requires_verification:
            rec["requires_verification"] = True
        submitted = call.name == SUBMIT_TOOL and target is synthetic and detailed.ok
        return _content_text(detailed.result.content), detailed.result.is_error, rec, submitted

    # -- crews ---------------------------------------------------------------
    async def _run_crew(self, crew: Crew, task: str, ctx: ToolExecutionContext) -> dict[str, Any]:
        ctx = begin_run(ctx)  # a crew only waits for its members: it holds nothing meanwhile

        async def one(agent: Agent, agent_task: str) -> RunResult:
            child = child_context(ctx, self.agent_tool(agent)).replace(progress=None)
            _, result = await self._run_call(self.registry.executor, agent, agent_task, child, _NO_OPTIONS)
            return result

        results: list[RunResult] = []
        if crew.mode == "sequential":
            current = task
            for i, agent in enumerate(crew.agents, 1):
                r = await one(agent, current)
                results.append(r)
                await _progress(ctx, i, len(crew.agents), f"crew {crew.name}: {agent.name} {r.status}")
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


def _unknown(r: Any) -> bool:
    """The call's effect is uncertain: it may or may not have happened (not a cancellation of the run itself)."""
    return bool(r.outcome == "unknown" or (r.outcome == "failed" and r.certainty == "unknown"))


async def run_agent(agent: Agent, task: str, *, registry: ToolRegistry, runs: MemoryRunLog | None = None,
                    context: ToolExecutionContext | None = None, options: RunOptions | None = None) -> RunResult:
    """Run ``agent`` once over ``registry`` (its own tools are registered if absent); see :class:`AgentRuntime`."""
    rt = AgentRuntime(registry, runs)
    rt._register_own(agent)
    return await rt.run(agent, task, context, options=options)


__all__ = ["AgentRuntime", "RUN_ID_KEY", "RunOptions", "RunResult", "SUBMIT_TOOL", "run_agent"]
