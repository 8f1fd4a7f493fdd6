"""The MCP provider: another MCP server's tools mounted as ``mcp__<server>__<tool>``, governed.

An upstream is reached with the official SDK client (``mcp.Client``, the
initialize-handshake era, which every server speaks) over stdio (a command
we start) or streamable HTTP (a URL, optional bearer token). Its tools
become :class:`~openfunctions.core.ToolDefinition` s whose handler forwards the
call; since they are registered like any tool, every call runs through the
registry's executor: input validation against the upstream's own schema,
policy (a governed policy sees ``mcp__fs__write_file`` like a local tool;
arguments never confer authority), scheduling, the journal, a receipt.

Mapping:

- input and output schemas, title, description and ``_meta`` are kept; the
  upstream's name goes into ``_meta["dev.openfunctions/upstream"]``. A tool
  name with characters ours does not allow (``[A-Za-z0-9_.-]``) is mounted
  with each such character replaced by ``_``; one that still collides or is
  too long is left out, and :meth:`ConnectedMcpProvider.health` lists why.
  Names are unique across a gateway's servers too: when two servers' tools
  map to one name (server ``x`` tool ``_y`` and server ``x_`` tool ``y`` are
  both ``mcp__x___y``), neither is mounted, whichever connected first.
- the upstream's schemas are data (``core/_schema.py``, untrusted): ``$ref``
  only inside the schema, never fetched; patterns on RE2; size, nesting and
  validation time bounded. A tool whose schema breaks those rules is left out
  with the reason. At most ``maxTools`` tools are mounted (the rest left out
  and counted); a re-listing redefines only the tools that changed, in a
  worker thread, so a large list never holds the event loop.
- annotations are kept as hints; ``readOnlyHint: true`` becomes a read,
  parallel-safe capability (``trustAnnotations: false`` turns that off);
  anything else is an ``external`` effect. What a call may run alongside is
  the server's (or the tool's) ``scope``: by default ``serial``, the
  conflict key ``mcp:<server>`` (via ``conflict_key_fn``), so calls to one
  upstream run one at a time (reads share the key) and never wait for
  another upstream or a local tool that is not a barrier; ``parallel``,
  ``{"keys": [pointers]}`` and ``exclusive`` as ``_config.py`` says.
- the upstream's ``content`` and ``structuredContent`` are our result as
  they came (and the upstream's ``isError``); our receipt goes in ``_meta``.

Failure semantics (each a clear error; the gateway keeps serving):

- upstream down when we connect: reported (``health()`` says ``down`` and
  why) and retried in the background with exponential backoff (0.5 s .. 30 s);
  a call to it meanwhile asks for an attempt (at most one a second) and
  otherwise fails with ``upstream_unavailable``, certainty ``known``.
- connection lost during a call (the process died, malformed JSON-RPC on
  the wire): ``upstream_lost``, certainty ``unknown`` (the call may have had
  its effect), journaled like every receipt; the connection is reopened at once.
- no answer within ``timeout``: the call is cancelled upstream
  (``notifications/cancelled``) and fails with ``upstream_timeout``, certainty
  ``unknown``; the connection stays (other calls may be fine).
- a result over ``maxResultBytes``: ``upstream_result_too_large`` (the
  upstream ran the call: certainty ``unknown``). A large result's structured
  output is validated in a worker thread before the executor's own check.
- a stdio line over ``maxLineBytes``: the connection is closed (pending
  calls fail ``upstream_lost``, the reason in ``health()``) and reopened.
- our caller cancels: the upstream call is cancelled too; the receipt says
  ``cancelled``/``unknown``.
- ``notifications/tools/list_changed``: the tools are listed again and the
  registry brought in step (added, removed, replaced); the server that
  installed the gateway tells its own clients.

Prompts: an upstream's prompts are offered as ``mcp__<server>__<prompt>``
(:meth:`ConnectedMcpProvider.prompts`, :meth:`ConnectedMcpProvider.get_prompt`),
followed on ``notifications/prompts/list_changed`` like tools. A prompt is
text for the host to show or send, not an action: ``prompts/get`` is
forwarded as it is (no executor, no receipt), as the server does for its
own prompts.

``close()`` must run in the task that called ``connect()`` (the background
supervisor lives in a task group opened there, as anyio requires).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, cast

import anyio
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter, ValidationError

from openfunctions.core import (
    TOOL_NAME_RE,
    Capability,
    DuplicateTool,
    OpenFunctionsError,
    ToolAnnotations,
    ToolDefinition,
    ToolError,
    ToolExecutionContext,
    ToolRegistry,
    ToolResult,
    define_tool,
)
from openfunctions.core._schema import untrusted_schemas

from ._config import Scope, UpstreamConfig
from ._errors import UpstreamError, UpstreamUnavailable
from ._provider import ContextProvider, ProviderHealth, provider_tags
from ._stdio import bounded_stdio_client

log = structlog.get_logger("openfunctions.providers.mcp")

UPSTREAM_META_KEY = "dev.openfunctions/upstream"
MOUNT_PREFIX = "mcp"
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
KICK_MIN_INTERVAL_S = 1.0
MAX_LIST_PAGES = 100
CONTEXT_MAX_RESOURCES = 25
CONTEXT_MAX_CHARS = 4000
#: Structured output larger than this (JSON characters) is validated in a worker thread first.
THREAD_VALIDATION_BYTES = 64 * 1024

_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")
# JSON-RPC errors that mean the upstream refused the request before running it.
_NOT_RUN_CODES = frozenset({types.INVALID_PARAMS, types.METHOD_NOT_FOUND, types.INVALID_REQUEST, types.PARSE_ERROR})

OnToolsChanged = Callable[[], Awaitable[None]]

# A tools/call result is taken as the wire dict (after the SDK's protocol
# validation of it): no typed model to build and dump again, and no second
# output-schema check (our executor checks the structured output against the
# same schema, the one that counts for the receipt).
_RAW_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def mounted_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` with characters invalid in our tool names replaced by ``_``."""
    return f"{MOUNT_PREFIX}__{server}__{_INVALID_CHAR.sub('_', tool)}"


def describe_scope(server: str, scope: Scope) -> str:
    """How a scope reads in ``gateway check`` and a mounted tool's ``_meta``."""
    if scope == "serial":
        return f"serial (key {MOUNT_PREFIX}:{server}: calls to {server} one at a time, reads together)"
    if scope == "parallel":
        return "parallel (no limit)"
    if scope == "exclusive":
        return "exclusive (runs alone)"
    return f"keys {', '.join(scope)} (calls with equal values there run one at a time)"


def _json_size(value: Any) -> int:
    """The compact JSON length of ``value`` in characters (the C encoder: cheaper than walking it in Python)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


class McpProvider(ContextProvider):
    """Define phase of one upstream MCP server: its config; nothing is started until :meth:`connect`."""

    def __init__(self, config: UpstreamConfig, *, domains: tuple[str, ...] = (), errlog: TextIO | None = None) -> None:
        super().__init__(id=config.name, name=f"MCP server {config.name}", domains=domains, description=config.describe())
        self.config = config
        self.errlog = errlog

    async def connect(self, *, wait: bool = True) -> ConnectedMcpProvider:
        """Start the connection supervisor; with ``wait``, return after the first attempt (success or not).

        An upstream that is down is not an error here: ``health()`` reports it.
        """
        connected = ConnectedMcpProvider(self)
        await connected._start()
        if wait:
            await connected.wait_first_attempt()
        return connected


class ConnectedMcpProvider:
    """One upstream, connected (or trying to be): its mounted tools, context, health."""

    def __init__(self, provider: McpProvider) -> None:
        self.provider = provider
        self.config = provider.config
        self._tg: Any = None
        self._stopping = False
        self._client: Client | None = None
        self._up = anyio.Event()
        self._lost = anyio.Event()
        self._kick = anyio.Event()
        self._change_events = {"tools": anyio.Event(), "prompts": anyio.Event()}  # an upstream list_changed arrived
        self._first_attempt = anyio.Event()
        self._done = anyio.Event()
        self._loss_reason: str | None = None
        self._http_status: str | None = None
        self._last_attempt_end = 0.0
        self._failures = 0
        self._connects = 0
        self.last_error: str | None = None
        self.protocol_version: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.instructions: str | None = None
        self._tools: dict[str, ToolDefinition] = {}  # mounted name -> definition (the upstream's current list)
        self._problems: dict[str, str] = {}  # upstream tool name -> why it is not mounted (or renamed)
        self._collisions: dict[str, str] = {}  # upstream tool name -> the other server's tool with its mounted name
        self._left_out = 0  # tools past maxTools in the last listing
        self._defined: dict[str, tuple[str, ToolDefinition | str]] = {}  # upstream name -> (its wire JSON, definition or why not)
        self._peers: list[ConnectedMcpProvider] = []  # the gateway's servers (names must be unique across them)
        self._key = f"{MOUNT_PREFIX}:{self.config.name}"  # the conflict key of a "serial" scope
        self._registry: ToolRegistry | None = None
        self._registered: dict[str, ToolDefinition] = {}
        self._listeners: list[OnToolsChanged] = []
        self._prompts: dict[str, types.Prompt] = {}  # mounted name -> the upstream's prompt
        self._prompt_listeners: list[OnToolsChanged] = []

    # -- lifecycle -------------------------------------------------------------

    async def _start(self) -> None:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._supervise)

    async def wait_first_attempt(self) -> None:
        await self._first_attempt.wait()

    async def close(self) -> None:
        """Disconnect (stopping a stdio upstream) and unmount the tools. Idempotent."""
        if self._tg is None:
            return
        self._stopping = True
        self._lost.set()
        self._kick.set()
        tg, self._tg = self._tg, None
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            # Let the supervisor leave ``async with Client`` itself (a clean stdio shutdown) ...
            await self._done.wait()
        tg.cancel_scope.cancel()  # ... then stop whatever is left.
        await tg.__aexit__(None, None, None)
        self._unmount_all()

    def on_tools_changed(self, callback: OnToolsChanged) -> None:
        """Call ``callback()`` after the mounted tool set changed (a server re-announces its list)."""
        self._listeners.append(callback)

    def on_prompts_changed(self, callback: OnToolsChanged) -> None:
        """Call ``callback()`` after the upstream's prompt list changed (or came or went with the connection)."""
        self._prompt_listeners.append(callback)

    # -- the supervisor --------------------------------------------------------

    def _open(self) -> tuple[Client, list[Callable[[], Awaitable[None]]]]:
        """The SDK client for one connection attempt, and what to close after it."""
        cfg = self.config
        closers: list[Callable[[], Awaitable[None]]] = []
        if cfg.transport == "stdio":
            params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args), env=cfg.env or None, cwd=cfg.cwd)
            target: Any = bounded_stdio_client(params, max_line_bytes=cfg.max_line_bytes, on_violation=self._mark_lost,
                                               errlog=self.provider.errlog or sys.stderr)
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async def note_status(response: Any) -> None:
                # The SDK reports any HTTP error as "Server returned an error
                # response": keep the status so the failure can name it (401 …).
                if response.status_code >= 400:
                    self._http_status = f"HTTP {response.status_code} {response.reason_phrase}".strip()

            http = httpx2.AsyncClient(
                headers=cfg.http_headers(),
                timeout=httpx2.Timeout(cfg.connect_timeout, read=max(cfg.timeout, 300.0)),
                event_hooks={"response": [note_status]},
            )
            closers.append(http.aclose)  # the SDK leaves a client it was given open
            target = streamable_http_client(cfg.url or "", http_client=http)
        client = Client(target, mode="legacy", cache=None, message_handler=self._on_message,
                        client_info=types.Implementation(name="openfunctions-mcp-gateway", version="0.1.0"))
        return client, closers

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            # A line that is not JSON-RPC: which pending request it answered is
            # unknowable, so the stream cannot be trusted. Drop the connection
            # (pending calls fail as 'lost') and reopen it.
            self._mark_lost(f"the upstream sent malformed JSON-RPC ({type(message).__name__}: {str(message)[:200]})")
        elif isinstance(message, types.ToolListChangedNotification):
            self._change_events["tools"].set()
        elif isinstance(message, types.PromptListChangedNotification):
            self._change_events["prompts"].set()

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._loss_reason = reason
            log.warning("upstream_connection_lost", server=self.config.name, reason=reason)
            self._lost.set()

    async def _supervise(self) -> None:
        while not self._stopping:
            was_up = False
            self._http_status = None
            closers: list[Callable[[], Awaitable[None]]] = []
            try:
                client, closers = self._open()
                # One scope around the whole connection (the client's task groups
                # must close inside it): a connect deadline, lifted once up.
                with anyio.CancelScope(deadline=anyio.current_time() + self.config.connect_timeout) as deadline:
                    async with client:
                        await self._sync(client)
                        await self._sync_prompts(client)
                        deadline.deadline = math.inf
                        self._client, was_up = client, True
                        self._connects += 1
                        self._failures = 0
                        self.last_error = None
                        self.protocol_version = client.protocol_version
                        info = client.server_info
                        self.server_info = None if info is None else {"name": info.name, "version": info.version}
                        self.instructions = client.instructions
                        self._up.set()
                        self._first_attempt.set()
                        log.info("upstream_connected", server=self.config.name, tools=len(self._tools),
                                 protocol=self.protocol_version)
                        try:
                            await self._notify_listeners()
                            await self._notify_listeners(self._prompt_listeners)
                            async with anyio.create_task_group() as inner:
                                inner.start_soon(self._follow_changes, client, "tools")
                                inner.start_soon(self._follow_changes, client, "prompts")
                                await self._lost.wait()
                                inner.cancel_scope.cancel()
                        finally:
                            self._client = None
                            self._up = anyio.Event()
                if deadline.cancelled_caught and not was_up:
                    raise TimeoutError
            except Exception as exc:
                self.last_error = self._describe_failure(exc)
                if not was_up:
                    self._failures += 1
                # Warn once per outage; the retries after it are debug noise.
                (log.warning if self._failures <= 1 else log.debug)(
                    "upstream_unavailable", server=self.config.name, error=self.last_error, failures=self._failures)
            for close in closers:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    try:
                        await close()
                    except Exception as exc:
                        log.debug("upstream_close_error", server=self.config.name, error=str(exc))
            if was_up and self._loss_reason:
                self.last_error = self._loss_reason
            self._loss_reason = None
            self._lost = anyio.Event()
            self._last_attempt_end = time.monotonic()
            self._first_attempt.set()
            if self._stopping:
                break
            # After losing a live connection reconnect at once; after failed
            # attempts back off (a waiting call may kick an earlier attempt).
            delay = 0.0 if was_up else min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (self._failures - 1))
            self._kick = anyio.Event()
            with anyio.move_on_after(delay):
                await self._kick.wait()
        self._done.set()

    def _describe_failure(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"no answer within connectTimeout ({self.config.connect_timeout:g} s)"
        if isinstance(exc, OpenFunctionsError):
            return exc.message
        if isinstance(exc, MCPError):
            status = f" ({self._http_status} from {self.config.url})" if self._http_status else ""
            return f"MCP error {exc.error.code}: {exc.error.message}{status}"
        if isinstance(exc, BaseExceptionGroup):
            leaves = [e for e in _leaves(exc)]
            return "; ".join(self._describe_failure(e) for e in leaves[:3]) or repr(exc)
        if isinstance(exc, FileNotFoundError):
            return f"cannot start {self.config.command!r}: {exc.strerror}"
        return f"{type(exc).__name__}: {exc}"

    async def _follow_changes(self, client: Client, kind: str) -> None:
        """On the upstream's ``notifications/<kind>/list_changed`` ("tools" or "prompts"): re-list, tell the listeners."""
        sync, listeners = (self._sync, self._listeners) if kind == "tools" else (self._sync_prompts, self._prompt_listeners)
        while True:
            await self._change_events[kind].wait()
            self._change_events[kind] = anyio.Event()
            try:
                with anyio.fail_after(self.config.connect_timeout):
                    changed = await sync(client)
            except Exception as exc:
                log.warning("upstream_relist_failed", server=self.config.name, kind=kind, error=self._describe_failure(exc))
                continue
            if changed:
                await self._notify_listeners(listeners)

    async def _notify_listeners(self, listeners: list[OnToolsChanged] | None = None) -> None:
        for cb in list(self._listeners if listeners is None else listeners):
            try:
                await cb()
            except Exception as exc:
                log.warning("tools_changed_listener_failed", server=self.config.name, error=str(exc))

    # -- tools -----------------------------------------------------------------

    async def _list_all_tools(self, client: Client) -> tuple[list[types.Tool], int, bool]:
        """The upstream's first ``maxTools`` + 1 tools, how many it listed, and whether pages were left unread."""
        tools: list[types.Tool] = []
        total = 0
        cursor: str | None = None
        limit = self.config.max_tools
        for _ in range(MAX_LIST_PAGES):
            # The page as wire JSON: only the tools we may mount become models (a 20,000-tool page
            # validated whole would hold the event loop for a third of a second).
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page: dict[str, Any] = await client.session.send_request(
                types.ListToolsRequest(params=params), cast(Any, _RAW_RESULT))
            listed = page.get("tools")
            if not isinstance(listed, list):
                raise UpstreamError(f"upstream {self.config.name!r} answered tools/list without a tools list",
                                    code="upstream_invalid_result", details={"server": self.config.name})
            for raw in listed[: limit + 1 - len(tools)]:
                try:
                    tools.append(types.Tool.model_validate(raw))
                except ValidationError as exc:
                    name = raw.get("name") if isinstance(raw, dict) else None
                    log.warning("upstream_tool_problem", server=self.config.name, tool=str(name)[:200],
                                problem=f"left out: not a valid MCP tool ({exc.error_count()} errors)")
            total += len(listed)
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if not cursor or len(tools) > limit:
                break
        return tools, total, bool(cursor)

    async def _sync(self, client: Client) -> bool:
        """List the upstream's tools, rebuild our definitions, apply them to the registry; True if anything changed.

        Only a tool whose listing changed is defined again (schemas compiled),
        and that happens in a worker thread: the event loop keeps serving.
        """
        upstream, total, more_pages = await self._list_all_tools(client)
        limit = self.config.max_tools
        self._left_out = max(0, total - limit)
        problems: dict[str, str] = {}
        if self._left_out or more_pages:
            count = f"{self._left_out:,}{'+' if more_pages else ''}"
            problems[f"({count} more)"] = (f"left out: the server lists over {limit:,} tools (maxTools); "
                                           f"{count} were not mounted")
            upstream = upstream[:limit]
        wanted: dict[str, tuple[str, types.Tool, str]] = {}  # mounted name -> (upstream name, tool, wire JSON)
        for t in upstream:
            name = mounted_name(self.config.name, t.name)
            if not TOOL_NAME_RE.match(name):
                problems[t.name] = f"left out: {name!r} is over 128 characters"
                continue
            if name in wanted:
                problems[t.name] = f"left out: it maps to {name!r}, as does {wanted[name][0]!r}"
                continue
            wanted[name] = (t.name, t, t.model_dump_json(by_alias=True, exclude_none=True))
            if name != mounted_name(self.config.name, "") + t.name:
                problems[t.name] = f"renamed to {name!r} (characters not allowed in tool names replaced by '_')"
        fresh = [(name, t, wire) for name, (_, t, wire) in wanted.items()
                 if self._defined.get(t.name, ("",))[0] != wire]
        if fresh:
            built = await anyio.to_thread.run_sync(self._define_all, fresh)
        else:
            built = []
        defined = {upstream_name: self._defined[upstream_name] for upstream_name, _, _ in wanted.values()
                   if upstream_name in self._defined}
        for (_, t, wire), definition in zip(fresh, built, strict=True):
            defined[t.name] = (wire, definition)
        self._defined = defined
        tools: dict[str, ToolDefinition] = {}
        for name, (upstream_name, _, _) in wanted.items():
            definition = defined[upstream_name][1]
            if isinstance(definition, str):
                problems[upstream_name] = f"left out: {definition}"
            else:
                tools[name] = definition
        for tool_name, why in problems.items():
            if tool_name not in self._problems:
                log.warning("upstream_tool_problem", server=self.config.name, tool=tool_name, problem=why)
        self._problems = problems
        before = {n: t.spec_sha256 for n, t in self._tools.items()}
        self._tools = tools
        self._apply_all()
        return before != {n: t.spec_sha256 for n, t in tools.items()}

    def _define_all(self, fresh: list[tuple[str, types.Tool, str]]) -> list[ToolDefinition | str]:
        """Define each tool (in a worker thread), its schemas compiled as untrusted; a refusal's message in its place."""
        out: list[ToolDefinition | str] = []
        with untrusted_schemas():
            for name, t, _ in fresh:
                try:
                    out.append(self._define(name, t))
                except OpenFunctionsError as exc:
                    out.append(exc.message)
                except RecursionError:
                    out.append("its schema is nested too deeply")
        return out

    def _define(self, name: str, t: types.Tool) -> ToolDefinition:
        cfg = self.config
        a = t.annotations
        annotations = None
        if a is not None:
            annotations = ToolAnnotations(
                title=a.title, read_only_hint=a.read_only_hint, destructive_hint=a.destructive_hint,
                idempotent_hint=a.idempotent_hint, open_world_hint=a.open_world_hint,
            )
        read_only = cfg.trust_annotations and a is not None and a.read_only_hint is True
        upstream_name = t.name
        scope = cfg.scope_of(upstream_name)
        capability = Capability(
            # A tool with no trusted read-only hint acts outside this process: "external".
            effect=None if scope == "exclusive" else "read" if read_only else "external",
            parallel_safe=read_only or scope == "parallel",
            idempotent=bool(cfg.trust_annotations and a is not None and (a.idempotent_hint or read_only)),
            required_scopes=cfg.required_scopes,
            conflict_keys=scope if isinstance(scope, tuple) else (),
            conflict_key_fn=self._server_key if scope == "serial" else None,
        )

        async def forward(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
            return await self.call(upstream_name, params, ctx, mounted=name)

        meta = dict(t.meta or {})
        meta[UPSTREAM_META_KEY] = {"server": cfg.name, "tool": upstream_name, "scope": describe_scope(cfg.name, scope)}
        return define_tool(
            name=name,
            description=t.description or "",
            input_schema=dict(t.input_schema),
            output_schema=dict(t.output_schema) if t.output_schema is not None else None,
            title=t.title,
            tags=(*provider_tags(self.provider.id), MOUNT_PREFIX),
            annotations=annotations,
            meta=meta,
            capability=capability,
            handler=forward,
        )

    def _server_key(self, params: dict[str, Any]) -> tuple[str]:
        """The conflict key of a ``serial`` scope: every call to this server holds it (reads shared)."""
        return (self._key,)

    async def mount(self, registry: ToolRegistry) -> None:
        """Register the tools into ``registry`` and keep them in step with the upstream from now on."""
        self._registry = registry
        self._apply_all()

    def create_tools(self) -> list[ToolDefinition]:
        """The tools as the upstream lists them now (empty while it has never been reached)."""
        return list(self._tools.values())

    def share_names_with(self, peers: list[ConnectedMcpProvider]) -> None:
        """Keep mounted names unique across ``peers`` (the gateway's servers, this one among them)."""
        self._peers = peers

    def _apply_all(self) -> None:
        """Apply this server's tools, then its peers' (a name this one now takes, or gave up, may be theirs)."""
        self._apply()
        for peer in self._peers:
            if peer is not self:
                peer._apply()

    def _apply(self) -> None:
        reg = self._registry
        others: dict[str, ToolDefinition] = {}
        for peer in self._peers:
            if peer is not self:
                others.update(peer._tools)
        collisions: dict[str, str] = {}
        for name, t in self._tools.items():
            other = others.get(name)
            if other is not None:
                theirs = other.meta[UPSTREAM_META_KEY]
                collisions[t.meta[UPSTREAM_META_KEY]["tool"]] = (
                    f"left out: it maps to {name!r}, as does tool {theirs['tool']!r} of server {theirs['server']!r}; "
                    "neither is mounted (rename one server)")
        for tool_name, why in collisions.items():
            if tool_name not in self._collisions:
                log.warning("upstream_tool_problem", server=self.config.name, tool=tool_name, problem=why)
        self._collisions = collisions
        if reg is None:
            return
        for name, old in list(self._registered.items()):
            if self._tools.get(name) is not old or name in others:
                if name in reg and reg.get(name) is old:
                    reg.unregister(name)
                del self._registered[name]
        for name, t in self._tools.items():
            if name in self._registered or name in others:
                continue
            try:
                reg.register(t, source=f"upstream MCP server {self.config.name!r}")
            except DuplicateTool:
                self._problems[t.meta[UPSTREAM_META_KEY]["tool"]] = f"left out: the registry already has a tool named {name!r}"
                log.warning("upstream_tool_problem", server=self.config.name, tool=name, problem="name taken")
                continue
            self._registered[name] = t

    def _unmount_all(self) -> None:
        reg = self._registry
        for name, t in list(self._registered.items()):
            if reg is not None and name in reg and reg.get(name) is t:
                reg.unregister(name)
        self._registered.clear()

    # -- prompts ---------------------------------------------------------------

    async def _sync_prompts(self, client: Client) -> bool:
        """List the upstream's prompts (if it has any); True if the mounted set changed."""
        prompts: dict[str, types.Prompt] = {}
        if client.server_capabilities.prompts is not None:
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                page = await client.list_prompts(cursor=cursor)
                for prompt in page.prompts:
                    name = mounted_name(self.config.name, prompt.name)
                    if name in prompts:
                        log.warning("upstream_prompt_problem", server=self.config.name, prompt=prompt.name,
                                    problem=f"left out: it maps to {name!r}, as does {prompts[name].name!r}")
                        continue
                    prompts[name] = prompt
                cursor = page.next_cursor
                if not cursor:
                    break
        before = {n: p.model_dump() for n, p in self._prompts.items()}
        self._prompts = prompts
        return before != {n: p.model_dump() for n, p in prompts.items()}

    def prompts(self) -> list[dict[str, Any]]:
        """The upstream's prompts as mounted: ``{"name", "title", "description", "arguments", "upstream"}``."""
        out = []
        for name, p in self._prompts.items():
            out.append({
                "name": name, "title": p.title, "description": p.description, "upstream": p.name,
                "arguments": [a.model_dump(by_alias=True, exclude_none=True) for a in p.arguments or ()],
            })
        return out

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> dict[str, Any]:
        """``prompts/get`` on the upstream for the mounted prompt ``name``: the upstream's result, as wire JSON.

        Raises :class:`UpstreamUnavailable` when it is not connected, :class:`UpstreamError`
        (codes ``upstream_error``, ``upstream_timeout``, ``upstream_unknown_prompt``) when the upstream refuses or does not answer.
        """
        prompt = self._prompts.get(name)
        if prompt is None:
            raise UpstreamError(f"upstream MCP server {self.config.name!r} has no prompt mounted as {name!r}",
                                code="upstream_unknown_prompt", details={"server": self.config.name, "prompt": name})
        client = await self._ready_client()
        try:
            with anyio.fail_after(self.config.timeout):
                result = await client.get_prompt(prompt.name, arguments or None)
        except TimeoutError:
            raise UpstreamError(f"upstream {self.config.name!r} did not answer prompts/get {prompt.name!r} within "
                                f"{self.config.timeout:g} s", code="upstream_timeout",
                                details={"server": self.config.name, "prompt": prompt.name}) from None
        except MCPError as exc:
            raise UpstreamError(f"upstream {self.config.name!r} answered prompts/get {prompt.name!r} with JSON-RPC "
                                f"error {exc.error.code}: {exc.error.message}", code="upstream_error",
                                details={"server": self.config.name, "prompt": prompt.name,
                                         "upstream_code": exc.error.code}) from None
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    # -- calls -----------------------------------------------------------------

    async def _ready_client(self) -> Client:
        client = self._client
        if client is not None:
            return client
        if time.monotonic() - self._last_attempt_end >= KICK_MIN_INTERVAL_S:
            self._kick.set()
        up = self._up
        with anyio.move_on_after(self.config.connect_timeout):
            await up.wait()
        client = self._client
        if client is None:
            raise UpstreamUnavailable(
                f"upstream MCP server {self.config.name!r} is not connected"
                + (f" (last error: {self.last_error})" if self.last_error else "")
                + "; nothing was sent to it, and a reconnect is under way",
                details={"server": self.config.name},
            )
        return client

    async def call(self, tool: str, params: dict[str, Any], ctx: ToolExecutionContext, *, mounted: str | None = None) -> ToolResult:
        """Forward one call to the upstream tool ``tool`` (the executor calls this; see the module docs)."""
        name = self.config.name
        try:
            client = await self._ready_client()
        except UpstreamUnavailable as exc:
            raise ToolError(exc.message, code=exc.code, effect_happened=False, details=exc.details) from None

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await ctx.report_progress(done, total, message)

        try:
            request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=params))
            with anyio.fail_after(self.config.timeout):
                result: dict[str, Any] = await client.session.send_request(
                    request, cast(Any, _RAW_RESULT), progress_callback=cast(Any, progress) if ctx.progress is not None else None)
        except TimeoutError:
            raise ToolError(
                f"upstream {name!r} did not answer {tool!r} within {self.config.timeout:g} s; the call was "
                "cancelled upstream and may have had its effect",
                code="upstream_timeout", effect_happened=None, details={"server": name, "tool": tool},
            ) from None
        except MCPError as exc:
            code, message = exc.error.code, exc.error.message
            if code == types.CONNECTION_CLOSED:
                self._mark_lost("the connection closed during a call")
                reason = self._loss_reason or self.last_error or "the connection closed"
                raise ToolError(
                    f"upstream {name!r} was lost during {tool!r} ({reason}); the call may have had its effect. "
                    "The connection is being reopened",
                    code="upstream_lost", effect_happened=None, details={"server": name, "tool": tool},
                ) from None
            raise ToolError(
                f"upstream {name!r} answered {tool!r} with JSON-RPC error {code}: {message}",
                code="upstream_error", effect_happened=False if code in _NOT_RUN_CODES else None,
                details={"server": name, "tool": tool, "upstream_code": code},
            ) from None
        except ValidationError as exc:
            raise ToolError(
                f"upstream {name!r} returned a result for {tool!r} that does not conform: "
                f"{exc.errors()[0].get('msg') if exc.errors() else exc}",
                code="upstream_invalid_result", effect_happened=None, details={"server": name, "tool": tool},
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._mark_lost(f"{type(exc).__name__} on the connection")
            raise ToolError(
                f"upstream {name!r} was lost during {tool!r} ({type(exc).__name__}); the call may have had its effect",
                code="upstream_lost", effect_happened=None, details={"server": name, "tool": tool},
            ) from None
        converted, size = self._convert(tool, result)
        definition = self._tools.get(mounted) if mounted is not None else None
        validator = definition.output_validator if definition is not None else None
        if (validator is not None and converted.structured is not None and not converted.is_error
                and size > THREAD_VALIDATION_BYTES):
            # A large answer is checked off the event loop; the executor's check of the same object is then free.
            await anyio.to_thread.run_sync(validator.prevalidate, converted.structured)
        return converted

    def _convert(self, tool: str, result: dict[str, Any]) -> tuple[ToolResult, int]:
        """The upstream's wire result (protocol-validated by the SDK) as ours: content, structuredContent, isError unchanged."""
        content = result.get("content")
        structured = result.get("structuredContent")
        if not isinstance(content, list) or not (structured is None or isinstance(structured, dict)):
            raise ToolError(
                f"upstream {self.config.name!r} returned a result for {tool!r} without a content list"
                + ("" if structured is None or isinstance(structured, dict) else " (structuredContent is not an object)"),
                code="upstream_invalid_result", effect_happened=None, details={"server": self.config.name, "tool": tool},
            )
        size = _json_size(content) + (_json_size(structured) if structured is not None else 0)
        limit = self.config.max_result_bytes
        if size > limit:
            raise ToolError(
                f"upstream {self.config.name!r} returned about {size:,} bytes for {tool!r}, over the gateway's "
                f"limit of {limit:,} (maxResultBytes); the result was dropped. The call ran upstream",
                code="upstream_result_too_large", effect_happened=True,
                details={"server": self.config.name, "tool": tool, "bytes": size, "limit": limit},
            )
        return ToolResult(content=content, structured=structured, is_error=result.get("isError") is True), size

    # -- context and health ----------------------------------------------------

    async def build_context(self) -> str | None:
        """A block naming the upstream's resources, with the text of the configured ``contextResources``."""
        client = self._client
        if client is None:
            return None
        lines = [f"### MCP server {self.config.name}"]
        if self.instructions:
            lines.append(self.instructions.strip()[:CONTEXT_MAX_CHARS])
        if client.server_capabilities.resources is not None:
            listed = await client.list_resources()
            resources = listed.resources[:CONTEXT_MAX_RESOURCES]
            if resources:
                lines.append("Resources:")
                for r in resources:
                    label = r.title or r.name
                    lines.append(f"- {label} <{r.uri}>" + (f": {r.description.strip()}" if r.description else ""))
                more = len(listed.resources) - len(resources)
                if more > 0 or listed.next_cursor:
                    lines.append(f"- … and {'more' if listed.next_cursor else more} more")
            for uri in self.config.context_resources:
                read = await client.read_resource(uri)
                texts = [c.text for c in read.contents if isinstance(c, types.TextResourceContents)]
                if texts:
                    text = "\n".join(texts)
                    cut = text[:CONTEXT_MAX_CHARS]
                    lines.append(f"#### {uri}\n{cut}" + ("\n[…truncated]" if len(text) > len(cut) else ""))
        return "\n".join(lines) if len(lines) > 1 else None

    async def health(self) -> ProviderHealth:
        cfg = self.config
        details: dict[str, Any] = {
            "transport": cfg.transport,
            "target": cfg.describe(),
            "protocol_version": self.protocol_version,
            "server_info": self.server_info,
            "connects": self._connects,
            "consecutive_failures": self._failures,
            "scope": describe_scope(cfg.name, cfg.scope),
        }
        if self._problems or self._collisions:
            details["tool_problems"] = {**self._problems, **self._collisions}
        if self._left_out:
            details["tools_left_out"] = self._left_out
        if self._prompts:
            details["prompts"] = len(self._prompts)
        if self._client is not None:
            return ProviderHealth(cfg.name, "up", None, tools=len(self._tools), details=details)
        return ProviderHealth(cfg.name, "down", self.last_error or "not connected yet", tools=len(self._tools), details=details)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


__all__ = ["ConnectedMcpProvider", "McpProvider", "UPSTREAM_META_KEY", "describe_scope", "mounted_name"]
