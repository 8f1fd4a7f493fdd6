"""The chat agent: an adapter, a filtered registry, memory and context providers behind ``chat()``.

One turn, one path (:meth:`ChatAgent._turn`):

1. check the message (a non-blank string of at most ``max_message_chars``;
   lone surrogates become U+FFFD);
2. read the conversation's last ``history_messages`` messages (memory on:
   the thread in the memory store; off: this process's list), from its
   latest summary if the window holds one;
3. build the system prompt: the resolved prompt, then ``## Context`` (the
   context providers' blocks, best effort, and the saved facts matching the
   message), then ``## Tools`` (a guide to the offered tools);
4. run the chat's agent through :meth:`AgentRuntime.run` with those as
   :class:`~openfunctions.agents.RunOptions`: the run is a call of the
   ``agent_<name>`` tool through the registry's executor, every tool the
   model asks for is a child call with its own receipt, and the run leaves
   its run records (``run_started`` … ``run_finished``) in the run journal;
5. append the turn to the conversation: the user's message, each tool call
   and its result, the answer (completed turns only: a failed or cancelled
   turn leaves the conversation as it was; the format is in
   :mod:`._conversations`), so the next turn replays them to the model,
   whichever provider it is.

With ``context_ceiling`` set, between 3 and 4 the turn's context (system
prompt, history, message, tool definitions) is estimated per adapter
(:mod:`openfunctions.agents.compaction`, the engine's estimate); over the
ceiling, the history's older turns (all but the last) are summarised by the
model with the engine's summary step and the summary is appended to the
conversation (format: :mod:`._conversations`), so this turn and the later
ones (after a restart too) see the summary and the recent turns. The cut is
at the start of a turn (a user message), so a tool call never loses its
result. A failed summary leaves the history as it was (the turn runs on it,
with a ``chat_compaction_failed`` warning).

Turns of one conversation run one at a time, in the order they arrived (the
conversation's FIFO lock): a conversation has one order. Turns of different
conversations run concurrently (a slow model call for one client delays no
other client).
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import structlog

from openfunctions.adapters import AdapterNotConfigured, ScriptedAdapter, resolve_adapter, valid_text
from openfunctions.adapters import Message as ModelMessage
from openfunctions.agents import DEFAULT_RUN_TIMEOUT_S, AgentLimits, AgentRuntime, RunJournal, RunOptions, define_agent
from openfunctions.agents.compaction import estimate_messages, summarise, tools_chars
from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolExecutionContext, ToolRegistry, new_id

from ._config import ChatConfig, load_config, load_object, module_tools
from ._conversations import (
    ANY,
    STORED_CHARS,
    SUMMARY_PREFIX,
    Conversation,
    Conversations,
    from_stored,
    log_path,
    stored,
    stored_summary,
    summary_through,
)
from ._errors import ChatClosed, ChatConfigError, InvalidMessage, MessageTooLarge
from ._prompt import memory_hint, resolve_prompt

log = structlog.get_logger("openfunctions.chat")

#: Memory tools the chat's model is offered (the conversation itself is the chat's to keep, not the model's).
MEMORY_TOOLS = ("memory_save_fact", "memory_search", "memory_forget")
#: Characters of a message kept in the conversation (the memory layer stores at most 32 KiB per message).
STORED_REPLY_CHARS = STORED_CHARS
#: Messages a conversation keeps in the process with memory off (the largest ``history_messages``).
KEPT_IN_PROCESS = 100
EVENT_TYPES = ("text", "tool_call", "tool_result", "done")


@dataclass
class ChatResponse:
    """One turn's answer.

    ``status``: ``completed``, ``max_rounds``, ``failed`` (``error`` says why)
    or ``cancelled``. ``tool_calls``: every call the model asked for, in order,
    with its receipt (``receipt_id``, ``outcome``, ``error_code``; a call of a
    tool the model was not offered has no receipt). ``receipt_id`` is the
    receipt of the turn's own ``agent_<name>`` call; ``run_id`` names its run
    record (``openfunctions-mcp runs show RUN_ID``).
    ``warnings`` (also in ``metadata``): what went wrong *after* the answer, which the answer survives (each
    ``{"code", "message", "cause"}``, ``cause`` the error's code): ``chat_history_not_saved`` (the memory store
    did not take the turn: the next turns do not see it), ``chat_compaction_failed`` (``context_ceiling``: the
    summary was not made or not kept; the turn ran on the whole history) or ``chat_conversation_use_not_recorded`` (the
    conversation table's journal failed: the conversation's place in the least-recently-used order is not
    updated, and ``open_conversation``/``reset`` are refused until the chat is restarted). Empty when all went well.
    """

    text: str
    status: str
    run_id: str
    rounds: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    thread_id: str = ""
    provider: str = ""
    model: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    receipt_id: str | None = None
    error: dict[str, Any] | None = None
    conversation_id: str | None = None  # an issued conversation's id (None: the agent's own conversation)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def metadata(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "provider": self.provider, "model": self.model, "usage": self.usage,
                "receipt_id": self.receipt_id, "warnings": self.warnings}

    def to_dict(self) -> dict[str, Any]:
        out = {"text": self.text, "status": self.status, "run_id": self.run_id, "rounds": self.rounds,
               "tool_calls": self.tool_calls, "metadata": self.metadata, "error": self.error}
        if self.conversation_id is not None:
            out["conversation_id"] = self.conversation_id
        return out


@dataclass(frozen=True)
class ChatEvent:
    """A streamed event: ``text`` (``{"text"}``: a delta), ``tool_call`` (``{"id", "name", "arguments", "round"}``),
    ``tool_result`` (``{"id", "name", "receipt_id", "outcome", "error_code", "is_error", "content", "round"}``),
    ``done`` (the whole :meth:`ChatResponse.to_dict`, last)."""

    type: str
    data: dict[str, Any]


def _turn_messages(result: Any, history: int, message: str) -> list[ModelMessage]:
    """What a completed run added to the conversation: the user's message, each reply with its tool calls and
    their results, the answer (the run's messages after its system prompt and the history it was shown)."""
    messages = list(getattr(result, "messages", None) or ())
    if len(messages) > history + 1:
        return messages[history + 1:]
    return [ModelMessage.user(message), ModelMessage.assistant(result.text or "")]


def _tool_record(call: dict[str, Any] | None, result: dict[str, Any]) -> dict[str, Any]:
    out = {"id": result.get("id"), "name": result.get("name"), "arguments": (call or {}).get("arguments", {})}
    for key in ("receipt_id", "outcome", "error_code", "is_error", "content", "round"):
        out[key] = result.get(key)
    return out


class ChatAgent:
    """Built by :func:`open_chat_agent`; see the module docstring for one turn."""

    def __init__(self, config: ChatConfig) -> None:
        self.config = config
        self.name = config.name
        self.adapter: Any = None
        self.registry: ToolRegistry = ToolRegistry()
        self.memory: Any = None
        self.providers: list[Any] = []  # connected context providers
        self.runs: Any = None
        self.data_dir: Path | None = None
        # the agent's own conversation (chat(), interactive()); served clients get issued ones
        self._default = Conversation(id="", thread_id=config.thread_id or new_id("chat"))
        self._conversations = Conversations(config.max_conversations)
        self.tool_names: list[str] = []
        self.role = ""
        self._runtime: AgentRuntime | None = None
        self._agent: Any = None
        self._journal: Any = None
        self._closers: list[Any] = []
        self._closed = False

    # -- public API -------------------------------------------------------------
    @property
    def thread_id(self) -> str:
        """The memory thread of the agent's own conversation."""
        return self._default.thread_id

    def chat(self, message: str, *, stream: bool = False, conversation: str | None = None) -> Any:
        """``await chat(m)`` -> :class:`ChatResponse`; ``chat(m, stream=True)`` -> async iterator of :class:`ChatEvent`.

        ``conversation``: an id from :meth:`open_conversation` (each is its own conversation); None: the
        agent's own. Close a stream you stop reading early (``async with contextlib.aclosing(...)``): that
        cancels the turn, whose run is then recorded ``cancelled``.
        """
        message = self._check(message)
        if conversation is not None:
            self._conversations.get(conversation)  # a bad or unknown id fails here, before anything runs
        if stream:
            return self._events(message, conversation)
        return self._turn(message, None, stream=False, conversation=conversation)

    async def turn(self, message: str, *, on_event: Callable[[ChatEvent], Awaitable[None]] | None = None,
                   conversation: str | None = None) -> ChatResponse:
        """One turn, as :meth:`chat` runs it, for a caller with its own event channel (the HTTP server):
        with ``on_event`` the turn streams and each :class:`ChatEvent` is awaited into it as it happens;
        without, the turn runs unstreamed. Returns the turn's :class:`ChatResponse`."""
        return await self._turn(message, on_event, stream=on_event is not None, conversation=conversation)

    def check_message(self, message: Any) -> str:
        """``message`` as a turn takes it (lone surrogates replaced), or :class:`InvalidMessage` /
        :class:`MessageTooLarge` naming what is wrong; nothing runs."""
        return self._check(message)

    def conversation_thread(self, conversation: str, *, principal: Any = ANY) -> str:
        """The memory thread of the issued conversation ``conversation``; :class:`InvalidConversation` /
        :class:`ConversationNotFound` when it is not one this agent holds for ``principal``."""
        return self._conversations.get(conversation, principal=principal).thread_id

    @property
    def closed(self) -> bool:
        """Whether :meth:`destroy` was called (a closed agent refuses turns with :class:`ChatClosed`)."""
        return self._closed

    async def open_conversation(self, *, principal: str | None = None) -> str:
        """Issue a new conversation; returns its id (``conv_…``) for ``chat(..., conversation=)`` and ``reset()``.

        At most ``max_conversations`` are kept: past that the least recently used idle one is forgotten
        (its id then raises :class:`ConversationNotFound`; its memory thread stays in the store). With memory
        on the table is durable in the data dir (the id is valid after a restart; it is durable before this
        returns). ``principal``: the transport's principal of the caller, the only one the HTTP server lets
        continue it."""
        if self._closed:
            raise ChatClosed(f"chat agent {self.name!r} was destroyed; create a new one")
        return (await self._conversations.issue(principal)).id

    async def reset(self, conversation: str | None = None) -> str:
        """Start the conversation over (a new thread id); saved facts stay. Returns the new thread id.

        ``conversation``: an issued conversation's id (only that one starts over); None: the agent's own."""
        if conversation is None:
            async with self._default.lock:
                self._default.thread_id = new_id("chat")
                self._default.history.clear()
                return self._default.thread_id
        conv = self._conversations.get(conversation)
        async with conv.lock:
            return await self._conversations.reset(conv)

    async def health(self) -> dict[str, Any]:
        from openfunctions.providers import check_provider_health

        providers = [h.to_dict() for h in await check_provider_health(self.providers)] if self.providers else []
        degraded = any(not p["ok"] for p in providers)
        return {"status": "closed" if self._closed else ("degraded" if degraded else "ok"), "agent": self.name,
                "provider": getattr(self.adapter, "provider", ""), "model": getattr(self.adapter, "model", ""),
                "memory": self.memory is not None, "thread_id": self.thread_id, "tools": list(self.tool_names),
                "conversations": len(self._conversations), "conversations_durable": self._conversations.durable,
                "providers": providers}

    async def destroy(self) -> None:
        """Close the providers, memory store, run journal and receipts journal. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            # Wait for the turns that run (each holds its conversation's lock); queued ones then see _closed.
            for conv in [self._default, *self._conversations.held()]:
                async with conv.lock:
                    pass
            for close in reversed(self._closers):
                try:
                    await close()
                except Exception as exc:
                    log.warning("chat_close_failed", error=f"{type(exc).__name__}: {exc}")
            self._closers.clear()

    async def __aenter__(self) -> ChatAgent:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.destroy()

    async def interactive(self, *, input: TextIO | None = None, output: TextIO | None = None) -> None:
        """A read-eval-print loop on stdin/stdout (``/reset``, ``/exit``, ``/help``); see :mod:`._terminal`."""
        from ._terminal import run_loop

        await run_loop(self, input or sys.stdin, output or sys.stdout)

    async def serve(self, *, port: int = 8765, host: str = "127.0.0.1", token: str | None = None,
                    ready: Any = None) -> None:
        """Serve ``POST /chat``, ``POST /chat/stream`` (SSE), ``GET /health``, ``POST /reset`` and ``GET /`` (see :mod:`._http`)."""
        from ._http import serve

        await serve(self, port=port, host=host, token=token, ready=ready)

    # -- one turn ---------------------------------------------------------------
    def _check(self, message: Any) -> str:
        if self._closed:
            raise ChatClosed(f"chat agent {self.name!r} was destroyed; create a new one")
        if not isinstance(message, str):
            raise InvalidMessage(f"message must be a string, got {type(message).__name__}")
        if not message.strip():
            raise InvalidMessage("message is empty")
        limit = self.config.max_message_chars
        if len(message) > limit:
            raise MessageTooLarge(f"message is {len(message)} characters; the limit is {limit}",
                                  details={"limit": limit, "length": len(message)})
        # A client's text: a lone surrogate (a JSON "\udc80" escape) becomes U+FFFD here, where it enters, so
        # the run's records, the memory thread and the model request can all be written.
        return valid_text(message)

    async def _events(self, message: str, conversation: str | None = None) -> AsyncIterator[ChatEvent]:
        send, receive = anyio.create_memory_object_stream[ChatEvent](math.inf)
        failed: list[BaseException] = []

        async def run() -> None:
            async with send:
                try:
                    await self._turn(message, send.send, stream=True, conversation=conversation)
                except Exception as exc:  # raised to the reader below, not as an exception group
                    failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            async with receive:
                try:
                    async for event in receive:
                        yield event
                except GeneratorExit:  # the reader closed the stream early: cancel the turn, wait for its record
                    tg.cancel_scope.cancel()
                    return
        if failed:
            raise failed[0]

    async def _turn(self, message: str, emit: Any, *, stream: bool, conversation: str | None = None) -> ChatResponse:
        """One turn (see the module docstring). ``emit``: ``async (ChatEvent) -> None`` or None;
        ``conversation``: an issued conversation's id, or None (the agent's own)."""
        message = self._check(message)
        conv = self._default if conversation is None else self._conversations.get(conversation)
        conv.busy += 1  # not evicted while its turn waits or runs
        try:
            return await self._turn_in(conv, message, emit, stream=stream)
        finally:
            conv.busy -= 1

    async def _turn_in(self, conv: Conversation, message: str, emit: Any, *, stream: bool) -> ChatResponse:
        async with conv.lock:  # this conversation's turns in arrival order; other conversations run meanwhile
            if self._closed:
                raise ChatClosed(f"chat agent {self.name!r} was destroyed; create a new one")
            assert self._runtime is not None
            thread = conv.thread_id
            window = await self._read_history(conv)
            system = await self._system_prompt(message)
            compaction_warnings: list[dict[str, Any]] = []
            if self.config.context_ceiling is not None:
                window = await self._compact(conv, window, system, message, compaction_warnings)
            history = [m for _, m in window]
            calls: dict[str, dict[str, Any]] = {}
            tool_calls: list[dict[str, Any]] = []

            async def on_event(event: dict[str, Any]) -> None:
                kind = event["type"]
                if kind == "tool_call":
                    calls[event["id"]] = event
                elif kind == "tool_result":
                    tool_calls.append(_tool_record(calls.get(event["id"]), event))
                if emit is not None:
                    data = {k: v for k, v in event.items() if k != "type"}
                    await emit(ChatEvent(kind, data))

            # per_call: this turn holds no place in the tools' scheduler while the model thinks, so other
            # conversations' turns run meanwhile; each tool call is admitted on its own (a write still runs alone)
            options = RunOptions(history=history, system=system, on_event=on_event, stream=stream, admission="per_call")
            ctx = ToolExecutionContext(principal=f"chat:{self.name}")
            result = await self._runtime.run(self._agent, message, ctx, options=options)
            turn = _turn_messages(result, len(history), message)
            warnings = await self._after_answer(conv, thread, turn, result) if result.status == "completed" else []
            warnings = compaction_warnings + warnings
            response = ChatResponse(
                text=result.text or "", status=result.status, run_id=result.run_id, rounds=result.rounds,
                tool_calls=tool_calls, thread_id=thread, provider=getattr(self.adapter, "provider", ""),
                model=getattr(self.adapter, "model", ""), usage=result.usage.to_dict(),
                receipt_id=getattr(result.receipt, "receipt_id", None), error=result.error,
                conversation_id=conv.id or None, warnings=warnings,
            )
            if emit is not None:
                await emit(ChatEvent("done", response.to_dict()))
            return response

    async def _after_answer(self, conv: Conversation, thread: str, turn: list[ModelMessage],
                            result: Any) -> list[dict[str, Any]]:
        """Keep a completed turn: its messages in the history, its conversation the most recently used.
        Both best effort: the answer exists, so a failure here is logged and returned as a warning of the
        reply (:class:`ChatResponse`), never raised (the caller would lose the answer)."""
        warnings: list[dict[str, Any]] = []
        try:
            await self._remember(conv, thread, turn)
        except OpenFunctionsError as exc:  # the conversation misses this turn
            log.warning("chat_remember_failed", thread=thread, run_id=result.run_id, error=exc.message)
            warnings.append({"code": "chat_history_not_saved", "cause": exc.code,
                             "message": f"this turn is not in the conversation's history: {exc.message}"})
        if conv.id:
            try:
                await self._conversations.used(conv)  # now the most recently used (durable: its order too)
            except OpenFunctionsError as exc:
                log.warning("chat_conversation_use_not_recorded", run_id=result.run_id, error=exc.message)
                warnings.append({"code": "chat_conversation_use_not_recorded", "cause": exc.code,
                                 "message": f"the conversation's use is not recorded: {exc.message}"})
        return warnings

    async def _read_history(self, conv: Conversation) -> list[tuple[int | None, ModelMessage]]:
        """The history the model is shown, each message with its thread number (memory off: None): the last
        ``history_messages`` messages, from the latest summary among them (format: :mod:`._conversations`)."""
        n = self.config.history_messages
        if n == 0:
            return []
        window: list[tuple[int | None, ModelMessage]]
        if self.memory is None:
            window = [(None, m) for m in conv.history[-n:]]
        else:
            page = await self.memory.get_thread(conv.thread_id, limit=n)
            entries = list(reversed(page.messages))  # oldest first
            summaries = [(i, t) for i, e in enumerate(entries) if (t := summary_through(e.meta)) is not None]
            if summaries:  # the latest summary, then what it does not stand for (the turns it kept, the later ones)
                at, through = summaries[-1]
                entries = [entries[at], *(e for e in entries if e.n > through and summary_through(e.meta) is None)]
            window = [(e.n, m) for e in entries if (m := from_stored(e.role, e.content, e.meta))]
        while window and window[0][1].role != "user":  # providers want a user turn first (the window may cut a turn)
            window.pop(0)
        return window

    async def _compact(self, conv: Conversation, window: list[tuple[int | None, ModelMessage]], system: str,
                       message: str, warnings: list[dict[str, Any]]) -> list[tuple[int | None, ModelMessage]]:
        """Over ``context_ceiling``: the window with its older turns replaced by the model's summary of them,
        the summary kept in the conversation (see the module docstring); under it, the window unchanged."""
        ceiling = self.config.context_ceiling
        provider = getattr(self.adapter, "provider", None)
        tools = tools_chars(t for t in self.registry.list() if t.name in self.tool_names)
        shown = [ModelMessage.system(system), *(m for _, m in window), ModelMessage.user(message)]
        before = estimate_messages(provider, shown, tools)
        if ceiling is None or before <= ceiling:
            return window
        # Cut at the start of the last turn (a user message that is not a summary): the turns before it are
        # summarised whole, so every tool call keeps its result on the side it is on.
        cut = next((i for i in range(len(window) - 1, 0, -1)
                    if window[i][1].role == "user" and not window[i][1].content.startswith(SUMMARY_PREFIX)), 0)
        if cut == 0:
            log.info("chat_nothing_to_compact", thread=conv.thread_id, tokens=before, ceiling=ceiling)
            return window
        try:
            summary = await summarise(self.adapter, [m for _, m in window[:cut]], max_tokens=self.config.max_tokens)
        except OpenFunctionsError as exc:
            return self._not_compacted(conv, warnings, exc.code, f"the summary request failed: {exc.message}", window)
        if not summary:
            return self._not_compacted(conv, warnings, "chat_summary_empty", "the model returned an empty summary",
                                       window)
        summary_message = ModelMessage.user(SUMMARY_PREFIX + summary)
        if self.memory is None:
            kept = len(window) - cut  # the window is the end of the list: keep its last turns
            conv.history[:] = [summary_message, *conv.history[len(conv.history) - kept:]]
        else:
            through = window[cut - 1][0]
            assert through is not None  # memory on: every window message has its thread number
            role, content, meta = stored_summary(summary, through)
            try:
                await self.memory.append_message(conv.thread_id, role, content, meta=meta)
            except OpenFunctionsError as exc:
                return self._not_compacted(conv, warnings, exc.code, f"the summary was not kept: {exc.message}", window)
            summary_message = from_stored(role, content, meta) or summary_message  # as a restart will read it
        after = [(None, summary_message), *window[cut:]]
        log.info("chat_compacted", thread=conv.thread_id, replaced=cut, tokens_before=before,
                 tokens_after=estimate_messages(provider, [ModelMessage.system(system), *(m for _, m in after),
                                                           ModelMessage.user(message)], tools))
        return after

    @staticmethod
    def _not_compacted(conv: Conversation, warnings: list[dict[str, Any]], cause: str, why: str,
                       window: list[tuple[int | None, ModelMessage]]) -> list[tuple[int | None, ModelMessage]]:
        """A compaction that did not happen: the turn runs on the whole window, and says so in its warnings."""
        log.warning("chat_compaction_failed", thread=conv.thread_id, cause=cause, error=why)
        warnings.append({"code": "chat_compaction_failed", "cause": cause,
                         "message": f"the older turns were not compacted: {why}"})
        return window

    async def _remember(self, conv: Conversation, thread: str, turn: list[ModelMessage]) -> None:
        """Keep a completed turn: the user's message, each tool call and result, the answer (history format 2,
        chat/_conversations.py)."""
        entries = [stored(m) for m in turn if m.role != "system"]
        if self.memory is None:
            conv.history += [from_stored(*e) or ModelMessage(e[0], e[1]) for e in entries]
            del conv.history[:-KEPT_IN_PROCESS]  # the most history_messages may ask for
            return
        for role, content, meta in entries:
            await self.memory.append_message(thread, role, content, meta=meta)

    async def _system_prompt(self, message: str) -> str:
        from openfunctions.providers import auto_tool_guide, compose_prompt, context_prompt

        blocks: list[str] = []
        if self.providers:
            block = await context_prompt(self.providers)  # best effort: a failing provider is left out, logged
            if block:
                blocks.append(block)
        if self.memory is not None and self.config.recall_facts:
            try:
                _, hits = await self.memory.search(message[:4096], limit=self.config.recall_facts)
            except OpenFunctionsError as exc:
                log.warning("chat_recall_failed", error=exc.message)
                hits = []
            if hits:
                blocks.append("Saved facts that may be relevant:\n"
                              + "\n".join(f"- {h.fact.text} (fact {h.fact.id})" for h in hits))
        view = self.registry.project(names=self.tool_names)
        return compose_prompt(role=self.role, context="\n\n".join(blocks) or None,
                              tool_guide=auto_tool_guide(view) if self.tool_names else None)

    # -- building ---------------------------------------------------------------
    async def _build(self) -> None:
        cfg = self.config
        try:
            self.adapter = _adapter(cfg)
            if cfg.adapter is None and hasattr(self.adapter, "aclose"):
                self._closers.append(self.adapter.aclose)  # ours (resolved from provider/model): its HTTP client
            self.role = resolve_prompt(cfg.prompt)
            own = self._base_tools()
            self.data_dir = Path(cfg.data_dir).expanduser() if cfg.data_dir is not None else _default_data_dir()
            if cfg.registry is not None:
                self.registry = ToolRegistry(own, executor=cfg.registry.executor)
            else:
                if cfg.journal:
                    await self._open_journal()
                self.registry = ToolRegistry(own, sink=self._journal)
            offered = self._select(own)
            memory_names = await self._open_memory()
            provider_names = await self._connect_providers()
            await self._open_conversations()
            self.tool_names = self._exclude([*offered, *memory_names, *provider_names])
            if self.memory is not None and any(n in self.tool_names for n in MEMORY_TOOLS):
                self.role = f"{self.role}\n\n{memory_hint()}"
            self.runs = await self._open_runs()
            limits = AgentLimits(max_rounds=cfg.max_rounds, max_tool_calls=cfg.max_tool_calls,
                                 max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                 timeout_s=cfg.timeout_s if cfg.timeout_s is not None else DEFAULT_RUN_TIMEOUT_S)
            try:
                self._agent = define_agent(cfg.name, self.role, tools=self.tool_names, adapter=self.adapter,
                                           limits=limits, description=f"chat agent {cfg.name}")
            except OpenFunctionsError as exc:
                raise ChatConfigError(exc.message) from None
            self._runtime = AgentRuntime(self.registry, self.runs)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.destroy()
            raise

    def _base_tools(self) -> list[ToolDefinition]:
        cfg = self.config
        tools: dict[str, ToolDefinition] = {}
        sources: list[list[ToolDefinition]] = []
        if cfg.registry is not None:
            sources.append(cfg.registry.list())
        if cfg.module:
            sources.append(module_tools(cfg.module))
        sources.append([t for t in cfg.tools or () if isinstance(t, ToolDefinition)])
        for part in sources:
            for t in part:
                if t.name in tools and tools[t.name] is not t:
                    raise ChatConfigError(f"two different tools are named {t.name!r} (registry, module, tools=): rename one")
                tools[t.name] = t
        return list(tools.values())

    def _select(self, own: list[ToolDefinition]) -> list[str]:
        cfg = self.config
        by_name = {t.name: t for t in own}
        if cfg.tools is None:
            names = list(by_name)
        else:
            names = [t.name if isinstance(t, ToolDefinition) else t for t in cfg.tools]
            unknown = [n for n in names if n not in by_name]
            if unknown:
                raise ChatConfigError(f"tools= names unknown tool(s) {unknown}; available: {', '.join(sorted(by_name)) or 'none'}")
        if cfg.tags is not None:
            wanted = set(cfg.tags)
            names = [n for n in names if wanted & set(by_name[n].tags)]
        return names

    def _exclude(self, names: list[str]) -> list[str]:
        unknown = sorted(set(self.config.exclude) - set(names) - self._names())
        if unknown:
            raise ChatConfigError(f"exclude= names unknown tool(s) {unknown}")
        out: list[str] = []
        for n in names:
            if n not in self.config.exclude and n not in out:
                out.append(n)
        return out

    def _names(self) -> set[str]:
        return {t.name for t in self.registry.list()}

    async def _open_journal(self) -> None:
        from openfunctions.core.journal import ExecutionJournal, JournalLocked

        assert self.data_dir is not None
        for slot in range(1, 17):
            path = self.data_dir / "journal" / ("chat.journal" if slot == 1 else f"chat.{slot}.journal")
            try:
                self._journal = await ExecutionJournal.open(path)
            except JournalLocked:
                continue
            self._closers.append(self._journal.close)
            return
        raise ChatConfigError(f"all 16 chat journal slots in {self.data_dir / 'journal'} are held by running chats")

    async def _open_conversations(self) -> None:
        """With memory on, the issued conversations' table is durable (``chat/<name>.conversations.journal``)."""
        from openfunctions.core.journal import JournalError

        if self.memory is None:
            return  # the history lives in the process: so does the table
        assert self.data_dir is not None
        path = log_path(self.data_dir, self.name)
        try:
            self._conversations = await Conversations.open(path, self.config.max_conversations, agent=self.name)
        except (JournalError, OSError) as exc:
            raise ChatConfigError(f"conversation table {str(path)!r}: {getattr(exc, 'message', None) or exc}",
                                  details={"path": str(path)}) from None
        self._closers.append(self._conversations.close)

    async def _open_runs(self) -> Any:
        from openfunctions.agents import RunJournalError

        assert self.data_dir is not None
        try:
            runs = await RunJournal.open_in(self.data_dir)
        except (RunJournalError, OSError) as exc:
            raise ChatConfigError(f"run journal in {self.data_dir}: {getattr(exc, 'message', exc)}") from None
        self._closers.append(runs.close)
        return runs

    async def _open_memory(self) -> list[str]:
        from openfunctions.memory import Memory, create_memory_tools

        cfg = self.config
        if cfg.memory is False or cfg.memory is None:
            return []
        if isinstance(cfg.memory, Memory):
            self.memory = cfg.memory  # the caller's: the caller closes it
        elif cfg.memory is True:
            from openfunctions.store import StoreError, open_local_store

            try:
                store = await open_local_store("memory", self.data_dir)
            except StoreError as exc:
                raise ChatConfigError(f"memory store in {self.data_dir}: {exc.message} (pass memory=False to chat "
                                      "without memory, or another data_dir)", details={"code": exc.code}) from None
            self.memory = Memory(store)
            self._closers.append(self.memory.aclose)
        else:
            raise ChatConfigError(f"memory must be true, false or a Memory, got {type(cfg.memory).__name__}")
        for t in create_memory_tools(self.memory):
            if t.name in MEMORY_TOOLS:
                self.registry.register(t)
        return list(MEMORY_TOOLS)

    async def _connect_providers(self) -> list[str]:
        from openfunctions.providers import ContextProvider, connect_provider

        names: list[str] = []
        for spec in self.config.providers:
            provider = load_object(spec, "context provider", "provider") if isinstance(spec, str) else spec
            if not isinstance(provider, ContextProvider):
                raise ChatConfigError(f"context provider {spec!r}: expected a ContextProvider (or 'pkg.module:attr' "
                                      f"naming one), got {type(provider).__name__}")
            before = self._names()
            try:
                connected = await connect_provider(provider, self.registry)
            except Exception as exc:
                why = exc.message if isinstance(exc, OpenFunctionsError) else f"{type(exc).__name__}: {exc}"
                raise ChatConfigError(f"context provider {provider.id!r} failed to connect: {why}",
                                      details={"provider": provider.id}) from None
            self.providers.append(connected)
            self._closers.append(connected.close)
            names += sorted(self._names() - before)
        return names


def _default_data_dir() -> Path:
    from openfunctions.core.files import default_data_dir

    return Path(default_data_dir())


def _adapter(cfg: ChatConfig) -> Any:
    if cfg.adapter is not None:
        if not (hasattr(cfg.adapter, "chat") and hasattr(cfg.adapter, "provider")):
            raise ChatConfigError("adapter must implement AIAdapter (chat, stream, provider, model)")
        return cfg.adapter
    if cfg.provider == "scripted":
        raise ChatConfigError("provider 'scripted' needs its script: pass adapter=ScriptedAdapter([...]) "
                              "(or on the command line --script FILE)")
    try:
        return resolve_adapter(cfg.provider, cfg.model, api_key=cfg.api_key, base_url=cfg.base_url)
    except AdapterNotConfigured as exc:
        raise ChatConfigError(exc.message + "; or pass adapter=ScriptedAdapter([...]) to run offline",
                              details=exc.details) from None
    except ImportError as exc:  # httpx is the adapters extra
        raise ChatConfigError(f"the HTTP model adapters need httpx: pip install 'openfunctions-mcp[adapters]' ({exc})") from None


async def open_chat_agent(config: ChatConfig | Mapping[str, Any] | Any = None, **kwargs: Any) -> ChatAgent:
    """Resolve ``config`` (a dict, a :class:`ChatConfig`, a pydantic model, or keyword arguments) into a :class:`ChatAgent`.

    Raises :class:`ChatConfigError` naming what could not be resolved (no model provider: the environment
    variables to set). Close the agent with ``await agent.destroy()`` (or ``async with``).
    """
    agent = ChatAgent(load_config(config, **kwargs))
    await agent._build()
    return agent


def scripted_adapter_from_file(path: str | Path) -> ScriptedAdapter:
    """A :class:`ScriptedAdapter` from a JSON file: a list of replies (strings, ``{"text"}``, ``{"tool", "arguments"}``)."""
    import json

    p = Path(path)
    try:
        script = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ChatConfigError(f"script {str(p)!r}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ChatConfigError(f"script {str(p)!r} is not JSON: {exc}") from None
    if not isinstance(script, list) or not all(isinstance(i, (str, dict)) for i in script):
        raise ChatConfigError(f"script {str(p)!r} must be a JSON list of replies (strings or objects)")
    return ScriptedAdapter(script)


__all__ = ["ChatAgent", "ChatEvent", "ChatResponse", "open_chat_agent", "scripted_adapter_from_file"]

