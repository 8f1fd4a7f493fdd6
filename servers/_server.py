"""The MCP server: a thin host around a ToolRegistry, on the SDK's low-level server.

Every ``tools/call`` is delegated to ``registry.execute_detailed`` with a
:class:`ToolExecutionContext` this host builds (principal from the server's
configuration or the HTTP authentication, never from tool arguments).
Validation, policy, scheduling, journaling and receipts are the executor's;
this module only translates between MCP and the registry:

- ``tools/list``: each tool's name, title, description, inputSchema,
  outputSchema, annotations and provider metadata (``_meta``) as registered.
- ``tools/call``: ``structuredContent`` is the tool's payload exactly;
  ``content`` the result's content blocks; the receipt travels in
  ``_meta["dev.openfunctions/receipt"]``, never in ``structuredContent``.
  A failure is ``isError: true`` naming what went wrong, receipt still in
  ``_meta``. An unknown tool is JSON-RPC ``-32602``. Arguments that fail the
  input schema are a tool execution error (``isError``) from protocol
  2025-11-25 on, and JSON-RPC ``-32602`` (receipt in the error's ``data``)
  for the older handshake versions, as each spec version says.
- progress: a request's ``_meta.progressToken`` wires ``ctx.report_progress``
  to ``notifications/progress``; ``notifications/cancelled`` (or a closed HTTP
  stream) cancels the handler's scope, which reaches the executor as anyio
  cancellation (the executor then records a ``cancelled`` receipt).

Resources and prompts are registered on the server (:meth:`add_resource`,
:meth:`add_resource_template`, :meth:`add_prompt`); they are read directly,
not through the executor (they are not tools and carry no receipts).

Handlers that need the raw MCP request (logging, sampling, elicitation —
the conformance fixtures) find the SDK's ``ServerRequestContext`` in
``ctx.request``; the host's model is ``ctx.host`` and a task's handle
``ctx.task`` (typed slots of ``ToolExecutionContext``, ``core/_context.py``).

Tasks (``io.modelcontextprotocol/tasks``, SEP-2663): a tool whose capability
declares ``task_support`` may answer a ``tools/call`` with a durable task
(``tasks/get``, ``tasks/update``, ``tasks/cancel``); see ``_tasks.py``. The
task journal sits beside the execution journal and survives restarts.
"""

from __future__ import annotations

import base64
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.connection import Connection
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, Field

from openfunctions.core import (
    PRINCIPAL_SCOPE_KEY,
    HostChannel,
    InvalidParams,
    ToolExecutionContext,
    ToolNotFound,
    ToolRegistry,
)

from ._constants import RECEIPT_META_KEY
from ._fast import EncodedReceipt
from ._input_required import InputRequired, is_retry, task_sampler, wants_input_required
from ._outstanding import Outstanding
from ._sdk import announce_list_changes, connection_of
from ._tasks import (
    DEFAULT_POLL_INTERVAL_MS,
    DEFAULT_TASK_AFTER_S,
    DEFAULT_TTL_MS,
    EXTENSION_ID,
    TaskHandle,
    TaskManager,
    check_routing_header,
    declared_tasks,
    missing_extension,
    tasks_path,
)
from ._tasks_v1 import TasksV1

log = structlog.get_logger("openfunctions.servers")

REQUEST_CONTEXT_KEY = "mcp.request_context"
"""Deprecated: the SDK's ``ServerRequestContext`` is ``ctx.request`` (this metadata key is no longer written)."""

# Shared, read-only: a served call carries no user metadata of its own.
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

# Protocol versions whose spec lists invalid tool arguments as a protocol
# error (-32602); 2025-11-25 (SEP-1303) and later make them tool execution
# errors so the model can correct itself.
# The 2026-07-28 result envelope (the runner drops it on handshake-era
# connections): not cacheable, complete.
_LIST_ENVELOPE = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}

_LISTED_SPEC_KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")

_ARGS_ARE_PROTOCOL_ERRORS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18"})

# Protocol versions of the handshake era: their specs answer an unknown
# resource URI with -32002; SEP-2164 (2026-07-28 and later) with -32602.
# An unnegotiated version (None) counts as handshake era.
_HANDSHAKE_ERA = frozenset({None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
_RESOURCE_NOT_FOUND_LEGACY = -32002

Transport = AbstractAsyncContextManager[tuple[Any, Any]]
"""A transport: an async context manager yielding ``(read_stream, write_stream)``
(e.g. ``mcp.server.stdio.stdio_server()`` or :func:`openfunctions.servers.stdio_transport`)."""


class _TaskParams(types.RequestParams):
    task_id: Any = Field(default=None, alias="taskId")


class _TaskUpdateParams(_TaskParams):
    input_responses: Any = Field(default=None, alias="inputResponses")


@dataclass
class _Resource:
    uri: str
    name: str
    mime_type: str | None
    reader: Callable[..., Any]
    title: str | None = None
    description: str | None = None
    meta: dict[str, Any] | None = None


@dataclass
class _ResourceTemplate:
    uri_template: str
    parsed: UriTemplate
    name: str
    mime_type: str | None
    reader: Callable[..., Any]
    title: str | None = None
    description: str | None = None


@dataclass
class _Prompt:
    name: str
    description: str | None
    arguments: list[dict[str, Any]]
    render: Callable[..., Any]
    title: str | None = None


async def _call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out


class _McpHost(HostChannel):
    """``ctx.host`` of an MCP call: the host's model through ``sampling/createMessage`` on this request.

    Built per call as one small object holding the request: the capability
    (a dict) is read from the session only when someone asks, so a call that
    never samples pays nothing for it. A 2026-07-28 call from a client that
    declared sampling gets, instead, a channel whose sampler asks through an
    ``InputRequiredResult``, or, for a call running as a task, through the
    task's ``input_required`` status (``_input_required.py``). On 2026-07-28
    this one raises ``SamplingUnavailable`` naming the missing channel.
    """

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self.sampling_timeout_s = None

    @property
    def sampling(self) -> Mapping[str, Any] | None:
        caps = getattr(self._ctx.session, "client_capabilities", None)
        sampling = getattr(caps, "sampling", None)
        return None if sampling is None else sampling.model_dump(by_alias=True, mode="json", exclude_none=True)

    @property
    def sampler(self) -> Any:
        return self._sample

    async def _sample(self, params: dict[str, Any]) -> dict[str, Any]:
        import warnings

        from mcp.shared.exceptions import NoBackChannelError

        ctx = self._ctx
        p = types.CreateMessageRequestParams.model_validate(params)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # sampling is deprecated in 2026-07-28 (SEP-2577), current before it
                result = await ctx.session.create_message(
                    p.messages, max_tokens=p.max_tokens, system_prompt=p.system_prompt, temperature=p.temperature,
                    stop_sequences=p.stop_sequences, model_preferences=p.model_preferences, tools=p.tools,
                    tool_choice=p.tool_choice, related_request_id=ctx.request_id,
                )
        except NoBackChannelError:
            from openfunctions.adapters import SamplingUnavailable

            raise SamplingUnavailable(
                f"this MCP call (protocol {ctx.protocol_version}) has no channel for a server-initiated sampling "
                "request; declare the 'sampling' capability on the request (its sampling requests then come "
                "back as InputRequiredResults), connect with a handshake-era protocol (2025-11-25 or earlier), "
                "or give the agent its own model"
            ) from None
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped


class OpenFunctionsServer:
    """An MCP server serving one registry. Build it with :func:`create_mcp_server`.

    Lifecycle: ``async with server:`` (or ``await server.start()`` /
    ``await server.close()``) opens and closes the execution journal;
    ``await server.connect(transport)`` serves one connection until its read
    side closes. ``close()`` stops admitting (queued calls are refused with a
    ``cancelled`` receipt), lets running calls finish for ``close_timeout``
    seconds, cancels what is left, then closes the journal.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        name: str,
        version: str,
        instructions: str | None = None,
        principal: str | None = None,
        scopes: Iterable[str] = (),
        journal_dir: Path | str | None = None,
        profile: str = "tools",
        close_timeout: float = 10.0,
        task_ttl_s: float = DEFAULT_TTL_MS / 1000,
        task_after_s: float = DEFAULT_TASK_AFTER_S,
        task_poll_interval_s: float = DEFAULT_POLL_INTERVAL_MS / 1000,
        journal_reopen_interval: float | None = 5.0,
        database_url: str | None = None,
    ) -> None:
        self.registry = registry
        self.name = name
        self.version = version
        self.principal = principal
        self.scopes = frozenset(scopes)
        self.profile = profile
        self.close_timeout = close_timeout
        self.journal_reopen_interval = journal_reopen_interval  # a failed journal's automatic re-open (None: off)
        self._journal_dir = Path(journal_dir) if journal_dir is not None else None
        self._database_url = database_url  # the execution journal in PostgreSQL instead of journal_dir's files
        self.journal: Any = None
        self.journal_file: Path | None = None
        #: The file journal appends each receipt's canonical JSON (``Receipt.canonical_json()``, memoized), so a reply
        #: can splice that text instead of encoding the receipt again; other sinks may not compute it.
        self._journal_encodes_receipts = False
        self._started = False
        self._closing = False
        self._closed = False
        self._cancelled = False
        self._inflight: Outstanding[anyio.CancelScope] = Outstanding()
        self._resources: dict[str, _Resource] = {}
        self._templates: list[_ResourceTemplate] = []
        self._prompts: dict[str, _Prompt] = {}
        self._tools_cache: tuple[tuple[int, ...], dict[str, Any]] | None = None
        self._fast_calls: Any = None  # the direct tools/call path's state (_fast.FastCalls.of)
        # 2026-07-28 calls that ask their client for its model mid-call (InputRequiredResult; _input_required.py)
        self.input_required = InputRequired()
        # Change notifications (a gateway's upstream re-lists its tools or
        # prompts): 2026-07-28 clients get them on the `subscriptions/listen`
        # streams they open (the SDK's handler, fed by this bus); handshake-era
        # clients as plain notifications on their connection (below).
        self.subscriptions = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.subscriptions)
        self.lowlevel: Server[Any] = Server(
            name,
            version=version,
            instructions=instructions,
            get_tool_input_schema=self._tool_input_schema,
            # The handlers return result dicts: the SDK's runner takes a model, a dict or None (its HandlerResult)
            # and validates the dict against the method's result; Server's parameters annotate the model only.
            on_list_tools=self._on_list_tools,  # type: ignore[arg-type]
            on_call_tool=self._on_call_tool,  # type: ignore[arg-type]
            on_list_resources=self._on_list_resources,
            on_list_resource_templates=self._on_list_resource_templates,
            on_read_resource=self._on_read_resource,  # type: ignore[arg-type]
            on_list_prompts=self._on_list_prompts,  # type: ignore[arg-type]
            on_get_prompt=self._on_get_prompt,  # type: ignore[arg-type]
            on_subscriptions_listen=self._listen,
        )
        # Tools and prompts may change while serving: say so in the handshake,
        # and remember (weakly) the handshake-era connections that listed them
        # so notify_*_changed() can tell them (see _connection_of).
        self._listing_connections: weakref.WeakSet[Any] = weakref.WeakSet()
        announce_list_changes(self.lowlevel, NotificationOptions(tools_changed=True, prompts_changed=True))
        self.tasks = TaskManager(
            ttl_ms=int(task_ttl_s * 1000), poll_interval_ms=max(1, int(task_poll_interval_s * 1000)), task_after_s=task_after_s
        )
        self.lowlevel.extensions[EXTENSION_ID] = {}
        self.lowlevel.add_request_handler("tasks/get", _TaskParams, self._on_tasks_get)
        self.lowlevel.add_request_handler("tasks/update", _TaskUpdateParams, self._on_tasks_update)
        self.lowlevel.add_request_handler("tasks/cancel", _TaskParams, self._on_tasks_cancel)
        # One subscriptions/listen handler for both: this bus's list changes and notifications/tasks.
        self.tasks.serve_listen(self.lowlevel, self._principal_for, bus=self.subscriptions)
        self.lowlevel.middleware.append(TasksV1(self))  # 2025-11-25 task-augmented calls (_tasks_v1.py)

    # -- registration (resources and prompts) -------------------------------

    def add_resource(
        self,
        uri: str,
        name: str,
        mime_type: str | None,
        reader: Callable[[], Any],
        *,
        title: str | None = None,
        description: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Serve a static resource. ``reader()`` (sync or async) returns ``str`` (text) or ``bytes`` (blob)."""
        self._resources[uri] = _Resource(uri, name, mime_type, reader, title, description, meta)

    def add_resource_template(
        self,
        uri_template: str,
        name: str,
        mime_type: str | None,
        reader: Callable[[dict[str, Any]], Any],
        *,
        title: str | None = None,
        description: str | None = None,
    ) -> None:
        """Serve resources matching an RFC 6570 template; ``reader(variables)`` returns ``str`` or ``bytes``."""
        self._templates.append(
            _ResourceTemplate(uri_template, UriTemplate.parse(uri_template), name, mime_type, reader, title, description)
        )

    def add_prompt(
        self,
        name: str,
        description: str | None,
        arguments: Iterable[Mapping[str, Any]],
        render: Callable[[dict[str, str]], Any],
        *,
        title: str | None = None,
    ) -> None:
        """Serve a prompt. ``arguments``: ``[{"name", "description", "required"}]``.

        ``render(arguments)`` (sync or async) returns a string (one user text
        message), a list of MCP ``PromptMessage`` dicts, or a full
        ``GetPromptResult`` dict.
        """
        self._prompts[name] = _Prompt(name, description, [dict(a) for a in arguments], render, title)

    def remove_prompt(self, name: str) -> bool:
        """Stop serving the prompt ``name``; returns whether it was there."""
        return self._prompts.pop(name, None) is not None

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Open the execution journal (if a journal dir was given) and attach it to the executor."""
        if self._started:
            return
        self._started = True
        if self._database_url is not None:  # PostgreSQL, shared by replicas (servers/_database.py)
            from ._database import open_database_journal

            self.journal, self.journal_file = await open_database_journal(
                self._database_url, self._journal_dir, self.profile, executor=self.registry.executor)
        elif self._journal_dir is not None:
            from ._journaling import open_execution_journal

            self.journal, self.journal_file = await open_execution_journal(
                self._journal_dir, self.profile, reopen_interval=self.journal_reopen_interval)
            self._journal_encodes_receipts = True
        if self.journal is not None:
            assert self.journal_file is not None  # both openers return the journal with its path
            try:
                await self._open_tasks(self.journal, self.journal_file)
            except BaseException:
                await self.journal.close()
                self.journal = None
                raise
            # Durable journal first: observers after it see only persisted starts.
            self.registry.executor.add_sink(self.journal, first=True)
            self.tasks.resume(self._start_rerun)  # idempotent tasks recovery chose to re-run (after the sink: journaled)

    async def _open_tasks(self, journal: Any, journal_file: Path) -> None:
        """Open the task journal beside ``journal_file``; settle tasks the last process left running."""
        from openfunctions.core.journal import recovered_receipt

        if self._database_url is not None:  # tasks in PostgreSQL too, shared by the replicas (servers/_database.py)
            from ._database import open_database_tasks

            await open_database_tasks(self.tasks, journal, self._database_url, self.profile, journal_file)
            return
        recovered = {r.receipt_id: r for r in getattr(journal, "recovered", ())}

        async def find(ids: set[str]) -> dict[str, Any]:
            found: dict[str, Any] = {}
            for r in journal.receipts():
                if r.receipt_id in ids:
                    found[r.receipt_id] = r
            return found

        async def write_receipt(start: dict[str, Any]) -> dict[str, Any]:
            receipt = recovered_receipt(start)
            await journal.on_settled(receipt)
            return receipt.to_dict()

        await self.tasks.open(tasks_path(journal_file), recovered_receipts=recovered, find_receipts=find,
                              write_receipt=write_receipt, plan=self._rerun_plan)

    def _rerun_plan(self, task: Any) -> tuple[bool, str | None]:
        """Recovery's rule: re-run a task's call once if its tool is (still) idempotent and its arguments were kept."""
        if task.arguments is None:
            return False, None  # not an idempotent tool's task (or a record from before arguments were kept)
        if task.rerun:
            return False, "a re-run was already started after an earlier restart: it is re-run once at most"
        try:
            tool = self.registry.get(task.tool)
        except ToolNotFound:
            return False, f"its tool {task.tool!r} is idempotent but no longer registered, so it could not be re-run"
        if tool.capability is None or not tool.capability.idempotent:
            return False, f"its tool {task.tool!r} is no longer declared idempotent"
        return True, None

    def _start_rerun(self, run: Any, task: Any) -> None:
        """Run recovery's re-run of ``task``'s call under the authority its record kept (no request: no session)."""
        try:
            tool = self.registry.get(task.tool)
        except ToolNotFound:  # unregistered between open and now: the run settles failed like any abnormal end
            tool = None
        tctx = ToolExecutionContext(principal=task.principal, scopes=frozenset(task.scopes),
                                    task=(handle := TaskHandle(run)),
                                    progress=_task_progress(handle, None))
        executor = self.registry.executor
        self._inflight.add(run.scope)

        async def execute() -> Any:
            if tool is None:
                raise RuntimeError(f"tool {task.tool!r} is no longer registered")
            return await executor.execute_detailed(tool, task.arguments, tctx, receipt_id=run.receipt_id)

        self.tasks.start(run, execute, on_exit=lambda r: self._inflight.discard(r.scope))

    async def __aenter__(self) -> OpenFunctionsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def database_url(self) -> str | None:
        """``serve --database``: the PostgreSQL the replicas share (layers keep their records there too)."""
        return self._database_url

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def drain(self, timeout: float | None = None) -> bool:
        """Stop admitting and wait for running calls; True if all finished within ``timeout``."""
        self._closing = True
        self._listen.close()  # end subscriptions/listen streams gracefully (their final result is sent)
        self.tasks.shutdown()
        self.registry.executor.scheduler.close("the server is shutting down")
        if self._inflight.empty.is_set():
            return True
        with anyio.move_on_after(self.close_timeout if timeout is None else timeout):
            await self._inflight.empty.wait()
            return True
        return False

    def cancel_running(self) -> None:
        """Cancel every running call now (a forced shutdown); :meth:`close` then no longer waits for them to finish."""
        self._cancelled = True
        for scope in self._inflight:
            scope.cancel()

    async def cancel_in_flight(self, settle_timeout: float = 5.0) -> None:
        """Cancel every running call and wait (bounded) until each has settled its receipt."""
        self.cancel_running()
        with anyio.CancelScope(shield=True), anyio.move_on_after(settle_timeout):
            await self._inflight.empty.wait()

    async def close(self) -> None:
        """Finish or cancel in-flight calls, then close the journal. Idempotent."""
        if self._closed:
            return
        with anyio.CancelScope(shield=True):
            # After cancel_running() the calls are not going to finish: only let them settle.
            finished = await self.drain(timeout=0 if self._cancelled else None)
            if not finished:
                log.warning("close_cancelling_calls", count=self.in_flight, timeout_s=self.close_timeout)
                await self.cancel_in_flight()
            self._closed = True
            await self.tasks.close()
            if self.journal is not None:
                self.registry.executor.remove_sink(self.journal)
                try:
                    await self.journal.close()
                except Exception as exc:  # closing must not hide the shutdown
                    log.error("journal_close_failed", error=str(exc))
                self.journal = None

    async def connect(self, transport: Transport, *, raise_exceptions: bool = False) -> None:
        """Serve one connection over ``transport`` until its read side closes."""
        await self.start()
        async with transport as (read_stream, write_stream):
            await self.lowlevel.run(
                read_stream, write_stream, self.lowlevel.create_initialization_options(), raise_exceptions=raise_exceptions
            )

    # -- tools ---------------------------------------------------------------

    def _tool_input_schema(self, name: str) -> Mapping[str, Any] | None:
        try:
            return self.registry.get(name).input_schema
        except ToolNotFound:
            return None

    def list_tools_result(self) -> dict[str, Any]:
        tools = self.registry.list()
        key = tuple(id(t) for t in tools)
        if self._tools_cache is not None and self._tools_cache[0] == key:
            return self._tools_cache[1]
        wire = []
        for t in tools:
            # The tool's own spec phrases the MCP fields; tags, examples and capability stay server-side.
            spec = t.spec()
            entry = {k: spec[k] for k in _LISTED_SPEC_KEYS if k in spec}
            if t.meta:
                entry["_meta"] = t.meta
            support = t.capability.task_support if t.capability is not None else "forbidden"
            if support != "forbidden":
                entry["execution"] = {"taskSupport": support}
            wire.append(entry)
        result = {"tools": wire, **_LIST_ENVELOPE}
        self._tools_cache = (key, result)
        return result

    async def notify_tools_changed(self) -> None:
        """Tell clients the tool list changed: ``subscriptions/listen`` streams (2026-07-28) and
        handshake-era connections that listed tools or prompts (``notifications/tools/list_changed``)."""
        await self.subscriptions.publish(ToolsListChanged())
        for connection in list(self._listing_connections):
            await connection.send_tool_list_changed()  # best effort: the SDK's Connection.notify never raises

    async def notify_prompts_changed(self) -> None:
        """The same for the prompt list (``notifications/prompts/list_changed``)."""
        await self.subscriptions.publish(PromptsListChanged())
        for connection in list(self._listing_connections):
            await connection.send_prompt_list_changed()

    def _remember_listing(self, ctx: Any) -> None:
        if ctx.protocol_version in _HANDSHAKE_ERA:
            self._listing_connections.add(_connection_of(ctx.session))

    async def _on_list_tools(self, ctx: Any, params: Any) -> dict[str, Any]:
        self._remember_listing(ctx)
        # A fresh top-level dict: the runner may stamp envelope keys on it.
        return dict(self.list_tools_result())

    def _principal_for(self, ctx: Any) -> str | None:
        request = getattr(ctx, "request", None)
        scope = getattr(request, "scope", None)
        principal = scope.get(PRINCIPAL_SCOPE_KEY) if isinstance(scope, dict) else None
        if principal:
            return str(principal)  # the auth middleware's (core/_asgi_auth.py): a string
        return self.principal

    def _execution_context(self, ctx: Any, task: TaskHandle | None = None) -> ToolExecutionContext:
        # The session's reporter is scoped to this request and is a no-op when
        # the client asked for no progress (no progressToken): always wire it.
        progress = ctx.session.report_progress
        host: HostChannel = _McpHost(ctx)
        if task is not None:
            progress = _task_progress(task, progress)
            if wants_input_required(ctx):  # 2026-07-28: a task asks through its input_required status
                host = host.with_sampler(task_sampler(task))
        return ToolExecutionContext(
            principal=self._principal_for(ctx),
            scopes=self.scopes,
            request_id=None if ctx.request_id is None else str(ctx.request_id),
            metadata=_NO_METADATA,  # user data only: the request is ctx.request (its protocol_version too)
            progress=progress,
            host=host,
            task=task,
            request=ctx,
        )

    async def _on_call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> dict[str, Any]:
        if is_retry(params):  # a 2026-07-28 retry answering an InputRequiredResult (never on the direct path)
            return await self.input_required.resume(ctx, params, self._principal_for(ctx), self._answer_for(params.name))
        return await self._call_tool(ctx, params.name, params.arguments, params)

    async def _call_tool(self, ctx: Any, name: str, arguments: dict[str, Any] | None,
                         params: types.CallToolRequestParams | None = None) -> dict[str, Any]:
        """``tools/call``: the SDK's handler (:meth:`_on_call_tool`) and the direct path (``_fast.py``, which
        passes no ``params``: it admits no tool with task support, the only use of them) both land here."""
        # One lookup: the registry phrases an unknown name (with "did you
        # mean" candidates), and the tool found goes straight to the executor.
        try:
            tool = self.registry.get(name)
        except ToolNotFound as exc:
            msg = exc.message[0].upper() + exc.message[1:]
            raise MCPError(INVALID_PARAMS, msg, data=exc.to_dict()) from None
        support = tool.capability.task_support if tool.capability is not None else "forbidden"
        if support != "forbidden":
            if declared_tasks(ctx):
                if params is None:
                    params = types.CallToolRequestParams.model_construct(name=name, arguments=arguments)
                return await self._call_maybe_task(tool, params, ctx)
            if support == "required":
                raise missing_extension(f"tool {name!r} runs only as a task: it")
        tctx = self._execution_context(ctx)
        if wants_input_required(ctx):
            return await self._call_input_required(ctx, tool, arguments, tctx)
        scope = anyio.CancelScope()
        self._inflight.add(scope)
        # The executor hands over the settled result even when close() cancels
        # the call (our scope swallows that cancellation): the reply still
        # carries the receipt the journal holds.
        settled: list[Any] = []
        try:
            with scope:
                await self.registry.executor.execute_detailed(tool, arguments, tctx, on_settled=settled.append)
        finally:
            self._inflight.discard(scope)
        return self._call_result(name, ctx, settled[0] if settled else None, shut_down=scope.cancelled_caught)

    async def _call_input_required(self, ctx: Any, tool: Any, arguments: dict[str, Any] | None,
                                   tctx: ToolExecutionContext) -> dict[str, Any]:
        """A 2026-07-28 call from a client that lends its model: the call runs on in a task of its own, and
        each sampling request it makes comes back to the client as an ``InputRequiredResult`` (_input_required.py)."""
        executor = self.registry.executor

        async def run(sampler: Any, progress: Any, scope: anyio.CancelScope) -> Any:
            host = tctx.host.with_sampler(sampler) if tctx.host is not None else HostChannel(sampler)
            call_ctx = tctx.replace(host=host, progress=progress)
            settled: list[Any] = []
            with scope:  # as in _call_tool: the settled result is handed over even when close() cancels the call
                await executor.execute_detailed(tool, arguments, call_ctx, on_settled=settled.append)
            return settled[0] if settled else None

        return await self.input_required.call(ctx, tool.name, arguments, self._principal_for(ctx), run,
                                              self._answer_for(tool.name), self._inflight.add, self._inflight.discard)

    def _answer_for(self, name: str) -> Callable[[Any, Any, bool], dict[str, Any]]:
        return lambda ctx, detailed, shut_down: self._call_result(name, ctx, detailed, shut_down=shut_down)

    async def _call_maybe_task(self, tool: Any, params: types.CallToolRequestParams, ctx: Any) -> dict[str, Any]:
        """Run the call; answer synchronously if it ends soon, else as a durable task (``_tasks.py``)."""
        run = self.tasks.new_run(tool.name, self._principal_for(ctx), **self._rerun_authority(tool, params.arguments))
        tctx = self._execution_context(ctx, TaskHandle(run))
        executor = self.registry.executor
        self._inflight.add(run.scope)
        self.tasks.start(
            run,
            lambda: executor.execute_detailed(tool, params.arguments, tctx, receipt_id=run.receipt_id),
            on_exit=lambda r: self._inflight.discard(r.scope),
        )
        try:
            task = await self.tasks.wait_or_create(run)
        except BaseException:
            if run.task_id is None:  # the request went away before a task existed: so does the call
                run.scope.cancel()
            raise
        if task is None:
            return self._call_result(tool.name, ctx, run.detailed)
        return self.tasks.create_result(task)

    def _rerun_authority(self, tool: Any, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """What a task record keeps so recovery can re-run the call: only for an idempotent tool, never a credential."""
        if tool.capability is None or not tool.capability.idempotent:
            return {}
        return {"arguments": dict(arguments or {}), "scopes": tuple(sorted(self.scopes))}

    def _call_result(self, name: str, ctx: Any, detailed: Any, *, shut_down: bool = False) -> dict[str, Any]:
        shut_down_text = f"tool {name!r} was cancelled: the server shut down before it finished"
        if detailed is None:  # cancelled by close() before the executor settled it (it always settles: defensive)
            return {"content": [{"type": "text", "text": shut_down_text}], "isError": True, "resultType": "complete"}
        receipt = detailed.receipt.to_dict()
        if self._journal_encodes_receipts:  # the reply reuses the journal's text (the fast path's encode)
            receipt = EncodedReceipt(receipt, detailed.receipt.canonical_json())
        if shut_down and detailed.receipt.outcome == "cancelled":  # by close() after the grace period: say why, with the receipt
            return {"content": [{"type": "text", "text": shut_down_text}], "_meta": {RECEIPT_META_KEY: receipt},
                    "isError": True, "resultType": "complete"}
        if (
            isinstance(detailed.error, InvalidParams)
            and ctx.protocol_version in _ARGS_ARE_PROTOCOL_ERRORS
        ):
            raise MCPError(
                INVALID_PARAMS,
                _invalid_arguments_message(name, detailed.error.message),
                data={**detailed.error.to_dict(), "receipt": receipt},
            )
        result = detailed.result
        out: dict[str, Any] = {"content": result.content, "_meta": {RECEIPT_META_KEY: receipt}, "resultType": "complete"}
        if result.structured is not None and not result.is_error:
            out["structuredContent"] = result.structured
        if result.is_error:
            out["isError"] = True
        return out

    # -- tasks (io.modelcontextprotocol/tasks) -----------------------------------

    async def _task_for(self, ctx: Any, params: _TaskParams, method: str) -> Any:
        if not declared_tasks(ctx):
            raise missing_extension(method)
        check_routing_header(ctx, params.task_id)
        return await self.tasks.lookup(params.task_id, self._principal_for(ctx))

    async def _on_tasks_get(self, ctx: Any, params: _TaskParams) -> dict[str, Any]:
        task = await self._task_for(ctx, params, "tasks/get")
        return {**await self.tasks.get(task), "resultType": "complete"}

    async def _on_tasks_update(self, ctx: Any, params: _TaskUpdateParams) -> dict[str, Any]:
        task = await self._task_for(ctx, params, "tasks/update")
        responses = params.input_responses
        if not isinstance(responses, Mapping):
            raise MCPError(INVALID_PARAMS, "tasks/update needs params.inputResponses: an object of key -> response",
                           data={"taskId": task.task_id})
        await self.tasks.update(task, responses)
        return {"resultType": "complete"}

    async def _on_tasks_cancel(self, ctx: Any, params: _TaskParams) -> dict[str, Any]:
        task = await self._task_for(ctx, params, "tasks/cancel")
        await self.tasks.cancel(task)
        return {"resultType": "complete"}

    # -- resources -----------------------------------------------------------

    async def _on_list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type, _meta=r.meta
                )
                for r in self._resources.values()
            ]
        )

    async def _on_list_resource_templates(self, ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=t.uri_template, name=t.name, title=t.title, description=t.description, mime_type=t.mime_type
                )
                for t in self._templates
            ]
        )

    def _contents(self, uri: str, mime_type: str | None, value: Any) -> list[dict[str, Any]]:
        if isinstance(value, bytes):
            return [{"uri": uri, "mimeType": mime_type or "application/octet-stream", "blob": base64.b64encode(value).decode("ascii")}]
        if isinstance(value, str):
            return [{"uri": uri, "mimeType": mime_type or "text/plain", "text": value}]
        if isinstance(value, list):
            return value
        raise TypeError(f"resource reader for {uri!r} returned {type(value).__name__}; expected str, bytes or a contents list")

    async def _on_read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> dict[str, Any]:
        uri = str(params.uri)
        try:
            res = self._resources.get(uri)
            if res is not None:
                return {"contents": self._contents(uri, res.mime_type, await _call_maybe_async(res.reader)), **_LIST_ENVELOPE}
            for t in self._templates:
                variables = t.parsed.match(uri)
                if variables is not None:
                    return {
                        "contents": self._contents(uri, t.mime_type, await _call_maybe_async(t.reader, variables)),
                        **_LIST_ENVELOPE,
                    }
        except MCPError:
            raise
        except Exception as exc:
            log.warning("resource_read_failed", uri=uri, error=str(exc))
            raise MCPError(types.INTERNAL_ERROR, f"reading resource {uri!r} failed: {exc}", data={"uri": uri}) from None
        # SEP-2164 (2026-07-28 on) answers an unknown URI with Invalid Params;
        # the handshake-era specs name -32002. Both carry the URI in data.
        code = _RESOURCE_NOT_FOUND_LEGACY if ctx.protocol_version in _HANDSHAKE_ERA else INVALID_PARAMS
        raise MCPError(code, f"Resource not found: {uri!r}", data={"uri": uri})

    # -- prompts -------------------------------------------------------------

    async def _on_list_prompts(self, ctx: Any, params: Any) -> dict[str, Any]:
        self._remember_listing(ctx)
        prompts = []
        for p in self._prompts.values():
            entry: dict[str, Any] = {"name": p.name, "arguments": p.arguments}
            if p.description is not None:
                entry["description"] = p.description
            if p.title is not None:
                entry["title"] = p.title
            prompts.append(entry)
        return {"prompts": prompts, **_LIST_ENVELOPE}

    async def _on_get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> dict[str, Any]:
        p = self._prompts.get(params.name)
        if p is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {params.name!r}", data={"prompt": params.name})
        args = dict(params.arguments or {})
        missing = [a["name"] for a in p.arguments if a.get("required") and a["name"] not in args]
        if missing:
            raise MCPError(INVALID_PARAMS, f"prompt {p.name!r} is missing required arguments: {', '.join(missing)}")
        rendered = await _call_maybe_async(p.render, args)
        if isinstance(rendered, str):
            rendered = [{"role": "user", "content": {"type": "text", "text": rendered}}]
        if isinstance(rendered, list):
            rendered = {"messages": rendered, "resultType": "complete"}
            if p.description is not None:
                rendered["description"] = p.description
        if isinstance(rendered, dict):
            return rendered
        if isinstance(rendered, BaseModel):  # a GetPromptResult model: dumped as the SDK's runner dumps one
            dumped: dict[str, Any] = rendered.model_dump(by_alias=True, mode="json", exclude_none=True)
            return dumped
        # Anything else reached the client as an anonymous internal error: name the prompt and what it returned.
        raise MCPError(INTERNAL_ERROR, f"prompt {p.name!r} rendered a {type(rendered).__name__}; expected a string, "
                       "a list of PromptMessage dicts or a GetPromptResult dict", data={"prompt": p.name})


def _connection_of(session: Any) -> Any:
    """The per-client ``Connection`` a request's ``ServerSession`` wraps (the SDK makes a session per request;
    read through ``_sdk.connection_of``). If the SDK no longer exposes it, the session itself: held weakly, it
    dies with its request, so handshake-era clients then get no list_changed notifications
    (tests/servers/test_sdk_contract.py and tests/providers/test_gateway_serve.py fail loudly on that)."""
    connection = connection_of(session, Connection)
    return session if connection is None else connection


def _task_progress(task: TaskHandle, request_progress: Any) -> Any:
    """Progress goes to the request while the call is synchronous, and into the task's status message after."""

    async def report(progress: float, total: float | None = None, message: str | None = None) -> None:
        if task.task_id is None:
            await request_progress(progress, total, message)
        else:
            text = f"{progress:g}" + (f"/{total:g}" if total is not None else "") + (f": {message}" if message else "")
            await task.set_message(text)

    return report


def _invalid_arguments_message(name: str, message: str) -> str:
    """``Invalid arguments for tool 'x': <why>``, said once (the error's own message may already name the tool)."""
    prefix = f"invalid arguments for tool {name!r}: "
    if message.lower().startswith(prefix.lower()):
        message = message[len(prefix):]
    return f"Invalid arguments for tool {name!r}: {message}"


def create_mcp_server(registry: ToolRegistry, **options: Any) -> OpenFunctionsServer:
    """Build an MCP server that serves ``registry``: ``options`` are :class:`OpenFunctionsServer`'s.

    ``name`` and ``version`` are required. ``principal``/``scopes`` go into
    every call's trusted context (HTTP bearer auth may set the principal per
    request). ``journal_dir`` is the data dir whose ``journal/`` receives the
    execution journal (``None``: no journal — the registry's own sink, if any,
    still runs; tasks are then kept in memory only). ``close_timeout``: how
    long running calls may finish on close. Tasks: ``task_ttl_s`` (how long a
    task and its result are kept after creation, default one day),
    ``task_after_s`` (a task-capable call still running after this becomes a
    task, default 1 s), ``task_poll_interval_s`` (the polling hint, 1 s).
    ``journal_reopen_interval``: seconds between automatic re-opens of a
    failed journal (default 5; ``None``: only a restart or ``journal reopen``).
    ``database_url``: keep the execution journal in PostgreSQL (shared by
    replicas; docs/SCALING.md) instead of ``journal_dir``'s files.
    """
    return OpenFunctionsServer(registry, **options)


__all__ = ["OpenFunctionsServer", "create_mcp_server", "RECEIPT_META_KEY", "REQUEST_CONTEXT_KEY", "Transport"]
