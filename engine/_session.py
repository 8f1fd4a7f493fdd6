"""One agent session: turns of rounds over a model and the executor, written as a durable record stream.

A *turn* starts with a prompt and is a sequence of *rounds*: the model is asked (its text streamed as
``text`` events), then each tool call it made runs through the registry's executor (journal on), and
its result goes back into the conversation. A turn ends ``finished`` when the model answers with text
and no tool call, or calls the ``finish`` control tool (its ``result`` is the turn's result);
``aborted`` on ``cancel`` or a limit (rounds, tool calls, the turn's deadline); ``failed`` on a model or
engine error; ``interrupted`` when the engine is told to stop (SIGTERM), which leaves the turn open for
the next start of the session to continue.

Between rounds the session injects queued steering (one user message), and compacts when asked to or
when the estimated context (:mod:`._tokens`) passes the ceiling: the model summarises the older messages
(the summary step is :func:`openfunctions.agents.compaction.summarise`, which the chat agent uses too)
and a ``compaction`` record replaces them with the summary.

Durability (the record format is in :mod:`._records`): every record is folded into the in-memory state
by the same :func:`~._records.apply` that folds the file on resume, so what the engine acts on is what
the file says. The session's records and the executor's starts and receipts of its tool calls share one
journal file, an execution journal, so its order is theirs: a round's record (its calls' intent, with
their receipt ids) is written in one group with the first call's start record, whose fsync the executor
waits for before the handler runs. The engine adds no waited fsync of its own to a round. Results are queued and written while the model is asked for the next round: a crash may
lose them, and resume then reports those calls ``uncertain`` with the receipt the same file holds (a
start with no receipt gets an ``unknown`` one when the file is opened) and never runs them again.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.adapters import ChatOptions, MalformedResponse, Message, valid_text
from openfunctions.agents.compaction import summarise
from openfunctions.core import (
    OpenFunctionsError,
    ToolDefinition,
    ToolExecutionContext,
    ToolNotFound,
    ToolRegistry,
    Validator,
    define_tool,
    new_id,
)
from openfunctions.core.journal import ExecutionJournal, JournalLog, read_records

from . import _records as R
from . import _tokens
from ._errors import EngineConfigError, SessionCorrupt, SessionInvalid, SessionNotFound, VerdictInvalid

log = structlog.get_logger("openfunctions.engine")

FINISH_TOOL = "finish"
SESSION_KEY = "openfunctions.engine.session_id"
TOOL_RESULT_CHARS = 32768
EVENT_CONTENT_CHARS = 4000
DEFAULT_SYSTEM = ("You are an agent working through a task with tools. Use the tools you are given; when the task "
                  f"is done, call `{FINISH_TOOL}` with the result (or answer with text).")

_SESSION_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class Limits:
    """Bounds of each turn (``max_tokens``: of each model call; ``turn_timeout_s``: ``None`` for none)."""

    max_rounds: int = 32
    max_tool_calls: int = 128
    max_tokens: int = 4096
    turn_timeout_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_rounds", "max_tool_calls", "max_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise EngineConfigError(f"limit {name} must be a positive integer, not {v!r}")
        t = self.turn_timeout_s
        if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0):
            raise EngineConfigError(f"limit turn_timeout_s must be a positive number of seconds, not {t!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"max_rounds": self.max_rounds, "max_tool_calls": self.max_tool_calls, "max_tokens": self.max_tokens,
                "turn_timeout_s": self.turn_timeout_s}


@dataclass
class SessionConfig:
    """What a session runs with. ``adapter``: an :class:`~openfunctions.adapters.AIAdapter`.

    ``result_schema``: the ``finish`` result must be valid against it (a review's verdict); a text answer
    must then be that JSON. ``limits``: ``None`` takes the recorded session's (a resumed one), else the
    defaults; given, they apply from now on. ``context_ceiling``: compact before a model call whose estimated context is
    over this many tokens (``None``: only on ``compact``).
    """

    adapter: Any
    data_dir: Path
    tools: Sequence[ToolDefinition] = ()
    system: str = DEFAULT_SYSTEM
    limits: Limits | None = None
    context_ceiling: int | None = None
    mode: str = "session"
    parent_session_id: str | None = None
    result_schema: dict[str, Any] | None = None


def sessions_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "engine" / "sessions"


def session_path(data_dir: Path, session_id: str) -> Path:
    check_session_id(session_id)
    return sessions_dir(data_dir) / f"{session_id}.journal"


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not 0 < len(session_id) <= 100 or not set(session_id) <= _SESSION_ID_CHARS:
        raise SessionInvalid(f"session id {str(session_id)[:120]!r} is invalid: use 1-100 letters, digits, '_' or '-'")
    return session_id


def _content_text(content: Sequence[Mapping[str, Any]]) -> str:
    parts = [str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type')} content]" for b in content]
    text = valid_text("\n".join(parts))
    if len(text) > TOOL_RESULT_CHARS:
        text = text[:TOOL_RESULT_CHARS] + f"\n[... truncated: {len(text) - TOOL_RESULT_CHARS} more characters]"
    return text


async def _not_called(params: dict[str, Any], ctx: Any) -> dict[str, Any]:  # the engine answers `finish` itself
    return {}


def finish_tool(result_schema: dict[str, Any] | None) -> ToolDefinition:
    """The control tool a model calls to end the turn with a result."""
    result = result_schema if result_schema is not None else {
        "description": "the outcome: text, or any JSON value the task asks for"}
    return define_tool(
        name=FINISH_TOOL,
        description="End the current task with its result. Call it once, when you are done.",
        input_schema={"type": "object", "properties": {"result": result}, "required": ["result"]},
        handler=_not_called,
    )


class _SessionJournal(ExecutionJournal):
    """The session's file as the executor's sink: a call's start record is written in one group with the
    session records queued ahead of it (the round that is the call's intent), so one fsync makes both
    durable before the handler runs."""

    take_ahead: Callable[[], list[tuple[str, dict[str, Any]]]] | None = None

    async def on_start(self, record: Any) -> None:
        if record.read_only:  # a read writes no start (it has no effect to have intended)
            return
        ahead = self.take_ahead() if self.take_ahead is not None else []
        await self.log.append_many([*ahead, ("start", record.to_dict())])


class Session:
    """A session over one record stream. Create with :meth:`open`; drive with :meth:`work`."""

    def __init__(self, config: SessionConfig, log: JournalLog, execution: ExecutionJournal, state: R.SessionState,
                 emit: Callable[[dict[str, Any]], None], resumed: bool) -> None:
        self.config = config
        self.log = log
        self.execution = execution
        self.state = state
        self.emit = emit
        self.resumed = resumed
        self.registry = ToolRegistry([t for t in config.tools if t.name != FINISH_TOOL], sink=execution)
        self._finish = finish_tool(config.result_schema)
        self._result_validator = Validator(config.result_schema, untrusted=False) if config.result_schema else None
        self._tools = [*self.registry.list(), self._finish]
        self._tools_chars = _tokens.tools_chars(self._tools)
        self._ctx = ToolExecutionContext(metadata={SESSION_KEY: state.session_id})
        self._buffer: list[tuple[str, dict[str, Any]]] = []
        self._flushes: set[asyncio.Future[Any]] = set()
        execution.take_ahead = self._take_buffer  # type: ignore[attr-defined]
        self._queue: deque[tuple[str, str]] = deque()  # ("prompt", text) or ("compact", ""), in order
        self._wake = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._stop_reason: str | None = None
        self._compact_requested = False
        self._closing = False
        self._interrupted = False
        self._running = False

    # -- open / close ------------------------------------------------------
    @classmethod
    async def open(cls, config: SessionConfig, *, session_id: str | None = None,
                   emit: Callable[[dict[str, Any]], None] | None = None) -> Session:
        """A new session, or (``session_id``) the recorded one, folded and ready to continue."""
        resumed = session_id is not None
        sid = check_session_id(session_id) if resumed else new_id("ses")
        path = session_path(config.data_dir, sid)
        if resumed and not path.exists():
            raise SessionNotFound(f"no session {sid!r} in {str(sessions_dir(config.data_dir))!r}",
                                  details={"session_id": sid})
        state = R.SessionState()
        # One file for the session's records and its tool calls' starts and receipts (see the module doc).
        # Never rotated: a session is read whole on resume. Opening it recovers any start left unsettled.
        execution = await _SessionJournal.open(path, rotate_over=None)
        log_ = execution.log
        try:
            await anyio.to_thread.run_sync(lambda: R.fold(state, log_.records()))
            if resumed and not state.header:
                raise SessionNotFound(f"session {sid!r} has no session record", details={"session_id": sid})
        except BaseException:
            await execution.close()
            raise
        try:
            if resumed:
                h = state.header
                # The recorded session decides what it is; the command line brings the model and the tools.
                config.mode = str(h.get("mode") or config.mode)
                config.system = str(h.get("system") or config.system)
                config.parent_session_id = h.get("parent_session_id")
                if h.get("context_ceiling") is not None and config.context_ceiling is None:
                    config.context_ceiling = int(h["context_ceiling"])
                if h.get("result_schema") is not None:
                    config.result_schema = dict(h["result_schema"])
                if config.limits is None and h.get("limits") is not None:
                    config.limits = Limits(**h["limits"])
            if config.limits is None:
                config.limits = Limits()
            self = cls(config, log_, execution, state, emit or (lambda event: None), resumed)
        except (TypeError, ValueError, EngineConfigError) as exc:
            await execution.close()
            raise SessionCorrupt(f"session {sid!r}: its session record is not valid ({exc})") from None
        except BaseException:
            await execution.close()
            raise
        if not resumed:
            await self._record(R.SESSION, {
                "v": R.VERSION, "session_id": sid, "model": f"{config.adapter.provider}:{config.adapter.model}",
                "mode": config.mode, "system": config.system, "limits": config.limits.to_dict(),
                "context_ceiling": config.context_ceiling, "parent_session_id": config.parent_session_id,
                "result_schema": config.result_schema,
            }, wait=True)
        skip = getattr(config.adapter, "skip", None)
        if callable(skip):  # a scripted model continues where the recorded session left its script
            skip(state.model_calls)
        return self

    async def close(self) -> None:
        """Write what is queued (one fsync) and close the session's file."""
        try:
            if self._flushes:
                await asyncio.gather(*self._flushes, return_exceptions=True)
            if self._buffer and not self.log.closed:
                records, self._buffer = self._buffer, []
                await self.log.append_many(records)
        finally:
            await self.execution.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    # -- records -------------------------------------------------------------
    def _take_buffer(self) -> list[tuple[str, dict[str, Any]]]:
        records, self._buffer = self._buffer, []
        return records

    async def _record(self, rtype: str, data: dict[str, Any], *, wait: bool) -> None:
        """Fold the record into the state, then queue it (``wait``: write it and everything queued, one fsync)."""
        R.apply(self.state, rtype, data)
        self._buffer.append((rtype, data))
        if wait:
            records, self._buffer = self._buffer, []
            await self.log.append_many(records)

    # -- commands --------------------------------------------------------------
    @property
    def session_id(self) -> str:
        return self.state.session_id

    @property
    def limits(self) -> Limits:
        """The session's limits (given, or the recorded ones of a resumed session: set when it opens)."""
        assert self.config.limits is not None, "a session's limits are settled when it opens"
        return self.config.limits

    def prompt(self, text: str) -> None:
        """Queue a turn (it starts, and its prompt record is written, when the session is free)."""
        self._queue.append(("prompt", text))
        self._wake.set()

    async def steer(self, text: str) -> str:
        """Queue steering for the next round boundary; durable when this returns. Returns its id."""
        sid = new_id("steer")
        await self._record(R.STEER, {"id": sid, "text": text}, wait=True)
        return sid

    async def set_goal(self, text: str) -> None:
        await self._record(R.GOAL, {"text": text}, wait=True)
        self.emit({"type": "goal", "text": self.state.goal})

    def request_compaction(self) -> None:
        """Compact before the next model call of the running turn; when idle, in order with queued prompts."""
        if self._running:
            self._compact_requested = True
        else:
            self._queue.append(("compact", ""))
        self._wake.set()

    def cancel(self) -> bool:
        """Abort the running turn; ``False`` when none runs."""
        if self._scope is None:
            return False
        self._stop_reason = "cancelled"
        self._scope.cancel()
        return True

    def interrupt(self) -> None:
        """Stop: the running turn ends ``interrupted`` (resumable); queued prompts stay unrecorded."""
        self._interrupted = True
        self._closing = True
        if self._scope is not None:
            self._stop_reason = "interrupted"
            self._scope.cancel()
        self._wake.set()

    def close_when_idle(self) -> None:
        """:meth:`work` returns once the queued prompts have run."""
        self._closing = True
        self._wake.set()

    def tokens(self) -> int:
        """The estimated context of the next model call (system prompt, messages, tool definitions)."""
        msgs = [Message.system(self._system()), *self.state.messages]
        return _tokens.estimate_messages(self.config.adapter.provider, msgs, self._tools_chars)

    def status(self) -> dict[str, Any]:
        s = self.state
        return {
            "type": "status", "session": s.session_id, "state": "running" if self._running or s.turn_open else "idle",
            "mode": self.config.mode, "turn": s.turn, "turn_open": s.turn_open, "rounds": s.rounds_total,
            "rounds_in_turn": s.rounds_in_turn, "tool_calls_in_turn": s.calls_in_turn,
            "messages": len(s.messages), "tokens": self.tokens(), "context_ceiling": self.config.context_ceiling,
            "steering_queued": len(s.steers), "prompts_queued": sum(1 for k, _ in self._queue if k == "prompt"), "goal": s.goal,
            "compactions": s.compactions, "parent_session": self.config.parent_session_id,
            "children": self.children(), "last_end": s.last_end,
        }

    def children(self) -> list[str]:
        """The sessions of this data dir started as ``subrun`` of this one (their first record names it)."""
        out = []
        for path in sorted(sessions_dir(self.config.data_dir).glob("*.journal")):
            if path.name == f"{self.session_id}.journal":
                continue
            try:
                first = next(iter(read_records(path)), None)
            except (OpenFunctionsError, OSError):
                continue  # another session's unreadable file is not this one's status to report
            if first is not None and first.type == R.SESSION and first.data.get("parent_session_id") == self.session_id:
                out.append(str(first.data.get("session_id")))
        return out

    # -- the worker --------------------------------------------------------------
    async def work(self) -> None:
        """Run turns as they come: an open turn first (a resumed session), then queued prompts, until closed."""
        while True:
            if self.state.turn_open and not self._interrupted:
                await self._run_turn()
            elif self._queue and not self._interrupted:
                kind, text = self._queue.popleft()
                if kind == "compact":
                    await self._compact("manual")
                    continue
                await self._record(R.PROMPT, {"turn": self.state.turn + 1, "text": text}, wait=True)
                self.emit({"type": "turn_start", "turn": self.state.turn, "prompt": text})
                await self._run_turn()
            elif self._closing:
                return
            else:
                self._wake = anyio.Event()
                await self._wake.wait()

    async def _run_turn(self) -> None:
        turn = self.state.turn
        outcome: dict[str, Any] | None = None
        self._stop_reason = None
        self._running = True
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    timeout = self.limits.turn_timeout_s
                    if timeout is not None:
                        with anyio.fail_after(timeout):
                            outcome = await self._rounds(turn)
                    else:
                        outcome = await self._rounds(turn)
                except TimeoutError:
                    outcome = {"state": "aborted", "reason": "turn_timeout",
                               "message": f"the turn exceeded its {self.limits.turn_timeout_s:g} s limit"}
                except OpenFunctionsError as exc:
                    outcome = {"state": "failed", "error": {"code": exc.code, "message": exc.message}}
                except Exception as exc:  # a bug below us: the turn still ends with its record
                    log.exception("engine_turn_raised")
                    outcome = {"state": "failed", "error": {"code": "engine_internal_error",
                                                            "message": f"{type(exc).__name__}: {exc}"[:2000]}}
            self._scope = None
            if outcome is None:  # the scope was cancelled: cancel or interrupt
                if self._stop_reason == "interrupted":
                    outcome = {"state": "interrupted", "reason": "interrupted",
                               "message": "the engine was stopped; start it with this session id to continue"}
                else:
                    outcome = {"state": "aborted", "reason": "cancelled", "message": "the turn was cancelled"}
            with anyio.CancelScope(shield=True):
                await self._settle_pending(turn, outcome)
                await self._record(R.END, {"turn": turn, **outcome}, wait=True)
        finally:
            self._running = False
        self.emit({"type": outcome["state"], "turn": turn, **{k: v for k, v in outcome.items() if k != "state"}})

    async def _settle_pending(self, turn: int, outcome: dict[str, Any]) -> None:
        """A turn ends with every call of its last round answered (a provider refuses a call without a result)."""
        for p in list(self.state.pending):
            content = (f"Not run, or cut short: the turn ended {outcome['state']} "
                       f"({outcome.get('reason') or outcome.get('error', {}).get('code', '')}).")
            if p["receipt_id"]:
                content += f" Receipt {p['receipt_id']} in the session's file says whether it ran."
            await self._record(R.RESULT, {"turn": turn, "round": p["round"], "call_id": p["call_id"], "name": p["name"],
                                          "receipt_id": p["receipt_id"], "outcome": "not_settled", "is_error": True,
                                          "error_code": "engine_turn_ended", "content": content}, wait=False)

    def _system(self) -> str:
        goal = self.state.goal
        return self.config.system if not goal else f"{self.config.system}\n\nThe session's goal: {goal}"

    async def _rounds(self, turn: int) -> dict[str, Any]:
        lim = self.limits
        state = self.state
        # Resumed after the turn's last round was recorded and before its end was: it ended as that round says.
        last = state.messages[-1] if state.messages and state.rounds_in_turn else None
        if state.finish is not None and not state.pending:
            return self._finish_outcome(state.finish[0])
        if last is not None and last.role == "assistant" and not last.tool_calls:
            return self._text_outcome(last.content)
        while True:
            if state.pending:  # resumed after a crash inside a round
                await self._resolve_pending(turn)
            if state.steers:
                ids = [s["id"] for s in state.steers]
                text = "\n\n".join(s["text"] for s in state.steers)
                await self._record(R.STEERED, {"turn": turn, "ids": ids, "text": text}, wait=False)
                self.emit({"type": "steered", "turn": turn, "ids": ids, "text": text})
            if self._compact_requested:
                await self._compact("manual")
            elif self.config.context_ceiling is not None and self.tokens() > self.config.context_ceiling:
                await self._compact("auto")
            if state.rounds_in_turn >= lim.max_rounds:
                return {"state": "aborted", "reason": "max_rounds",
                        "message": f"the turn reached its limit of {lim.max_rounds} rounds without finishing"}
            n = state.rounds_in_turn + 1
            reply = await self._ask(turn, n)
            if len({c.id for c in reply.tool_calls}) != len(reply.tool_calls):
                raise MalformedResponse(f"the model's reply in round {n} names one tool-call id twice: "
                                        f"{[c.id for c in reply.tool_calls]}")
            receipts = {c.id: new_id("rcpt") for c in reply.tool_calls if c.name != FINISH_TOOL}
            # The calls' intent. Not waited for here: it is written in one group with the first call's start
            # record, whose fsync the executor waits for before the handler runs (see the module doc).
            await self._record(R.ROUND, {"turn": turn, "n": n, "message": reply.as_message().to_dict(),
                                         "receipts": receipts, "usage": reply.usage.to_dict(), "model": reply.model,
                                         "stop_reason": reply.stop_reason}, wait=False)
            if not reply.tool_calls:
                self.emit({"type": "round_end", "turn": turn, "round": n, "tool_calls": 0})
                return self._text_outcome(reply.text or "")
            done: dict[str, Any] | None = None
            for call in reply.tool_calls:
                if done is not None:
                    await self._result(turn, n, call, None, "not_run", True, "engine_turn_ended",
                                       f"Not run: the turn ended ({done['state']}) before this call.")
                elif call.name == FINISH_TOOL:
                    self.emit({"type": "tool_call", "turn": turn, "round": n, "call_id": call.id, "name": call.name,
                               "arguments": call.arguments, "receipt_id": None})
                    done = await self._finish_call(turn, n, call)
                elif state.calls_in_turn >= lim.max_tool_calls:
                    done = {"state": "aborted", "reason": "max_tool_calls",
                            "message": f"the turn asked for more than {lim.max_tool_calls} tool calls"}
                    await self._result(turn, n, call, None, "not_run", True, "tool_call_limit",
                                       f"Not run: the turn's limit of {lim.max_tool_calls} tool calls was reached.")
                else:
                    await self._execute(turn, n, call, receipts[call.id])
            self.emit({"type": "round_end", "turn": turn, "round": n, "tool_calls": len(reply.tool_calls)})
            if done is not None:
                return done

    def _text_outcome(self, text: str) -> dict[str, Any]:
        if self._result_validator is None:
            return {"state": "finished", "result": text, "text": text}
        try:
            value = json.loads(text)
        except ValueError as exc:
            return {"state": "failed", "error": {"code": VerdictInvalid.code,
                                                 "message": f"the model answered text that is not JSON ({exc}); "
                                                            f"it began {text[:200]!r}"}}
        problems = self._result_validator.violations(value)
        if problems:
            return {"state": "failed", "error": {"code": VerdictInvalid.code,
                                                 "message": "the model's answer is not a valid result: "
                                                 + "; ".join(f"{p['path']}: {p['message']}" for p in problems[:5])}}
        return {"state": "finished", "result": value, "text": text}

    async def _finish_call(self, turn: int, n: int, call: Any) -> dict[str, Any] | None:
        args = call.arguments
        problems = [] if "result" in args else [{"path": "$", "message": "'result' is required"}]
        if not problems and self._result_validator is not None:
            problems = self._result_validator.violations(args["result"])
        if problems:  # the model may correct itself in the next round
            text = "finish refused: the result is not valid: " + "; ".join(
                f"{p['path']}: {p['message']}" for p in problems[:5]) + ". Call finish again with a valid result."
            await self._result(turn, n, call, None, "rejected", True, "engine_result_invalid", text)
            return None
        await self._result(turn, n, call, None, "succeeded", False, None, "Finished.")
        return self._finish_outcome(args["result"])

    @staticmethod
    def _finish_outcome(result: Any) -> dict[str, Any]:
        return {"state": "finished", "result": result, "text": result if isinstance(result, str) else
                json.dumps(result, ensure_ascii=False)}

    async def _result(self, turn: int, n: int, call: Any, receipt_id: str | None, outcome: str, is_error: bool,
                      error_code: str | None, content: str) -> None:
        await self._record(R.RESULT, {"turn": turn, "round": n, "call_id": call.id, "name": call.name,
                                      "receipt_id": receipt_id, "outcome": outcome, "is_error": is_error,
                                      "error_code": error_code, "content": content}, wait=False)
        self.emit({"type": "tool_result", "turn": turn, "round": n, "call_id": call.id, "name": call.name,
                   "receipt_id": receipt_id, "outcome": outcome, "is_error": is_error, "error_code": error_code,
                   "content": content[:EVENT_CONTENT_CHARS]})

    async def _execute(self, turn: int, n: int, call: Any, receipt_id: str) -> None:
        self.emit({"type": "tool_call", "turn": turn, "round": n, "call_id": call.id, "name": call.name,
                   "arguments": call.arguments, "receipt_id": receipt_id})
        try:
            tool = self.registry.get(call.name)
        except ToolNotFound as exc:
            names = ", ".join(t.name for t in self._tools)
            await self._result(turn, n, call, None, "not_found", True, exc.code,
                               f"{exc.message}. Tools available to you: {names}")
            return
        # The queued records (this call's intent among them) go into the file in one group with the call's
        # start record (_SessionJournal.on_start); a read writes no start, and needs no intent before it runs.
        detailed = await self.registry.executor.execute_detailed(tool, call.arguments, self._ctx, receipt_id=receipt_id)
        r = detailed.receipt
        await self._result(turn, n, call, r.receipt_id, r.outcome, detailed.result.is_error,
                           r.error.code if r.error else None, _content_text(detailed.result.content))

    async def _resolve_pending(self, turn: int) -> None:
        """Calls whose intent is recorded and whose result is not: reported uncertain, never run again."""
        wanted = {p["receipt_id"] for p in self.state.pending if p["receipt_id"]}
        found = {}
        if wanted:
            found = await anyio.to_thread.run_sync(
                lambda: {r.receipt_id: r for r in self.execution.receipts() if r.receipt_id in wanted})
        for p in list(self.state.pending):
            r = found.get(p["receipt_id"])
            receipt = None if r is None else {"outcome": r.outcome, "certainty": r.certainty,
                                              "handler_started": r.handler_started, "recovered": bool(r.recovered)}
            if r is None:
                what = ("the session's file holds no receipt for it: it never started (or it was a read, which "
                        "leaves none)") if p["receipt_id"] else "it never reached the executor"
            else:
                what = (f"receipt {r.receipt_id} says outcome {r.outcome!r} (certainty {r.certainty!r}, "
                        f"handler started: {r.handler_started})")
            content = (f"The result of this call was lost when the engine stopped; it was not run again: {what}. "
                       "Check its effect before repeating it.")
            await self._record(R.UNCERTAIN, {"turn": turn, "round": p["round"], "call_id": p["call_id"],
                                             "name": p["name"], "receipt_id": p["receipt_id"], "receipt": receipt,
                                             "content": content}, wait=False)
            self.emit({"type": "tool_uncertain", "turn": turn, "round": p["round"], "call_id": p["call_id"],
                       "name": p["name"], "receipt_id": p["receipt_id"], "receipt": receipt})

    async def _flush_behind(self) -> None:
        """Start writing the queued records (the last round's results) and return once they have their place
        in the file: their fsync runs while the model thinks, so they are on disk before its answer is."""
        records, self._buffer = self._buffer, []
        task = asyncio.ensure_future(self.log.append_many(records))
        # A failed write poisons the log, so the next waited record raises it: here it only must not go unseen.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)
        await asyncio.sleep(0)  # one loop iteration: the task encodes and queues its records, in order

    async def _ask(self, turn: int, n: int) -> Any:
        """One model call, its text streamed as ``text`` events."""
        if self._buffer:
            await self._flush_behind()
        adapter = self.config.adapter
        options = ChatOptions(max_tokens=self.limits.max_tokens)
        messages = [Message.system(self._system()), *self.state.messages]
        reply = None
        async for event in adapter.stream(messages, self._tools, options):
            if event.type == "text" and event.text:
                self.emit({"type": "text", "turn": turn, "round": n, "delta": event.text})
            elif event.type == "done":
                reply = event.reply
        if reply is None:
            raise MalformedResponse(f"the {adapter.provider} stream ended without its final reply")
        return reply

    # -- compaction ----------------------------------------------------------------
    async def _compact(self, trigger: str) -> None:
        """Replace the older messages by the model's summary of them (see the module docstring)."""
        self._compact_requested = False
        msgs = self.state.messages
        # Cut before the last message that is not a tool result: a tool call never loses its result.
        cut = next((i for i in range(len(msgs) - 1, 0, -1) if msgs[i].role != "tool"), 0)
        if cut == 0:
            if trigger == "manual":  # automatic: the next round may have something to compact
                self.emit({"type": "error", "code": "engine_nothing_to_compact",
                           "message": f"nothing to compact: the conversation has {len(msgs)} message(s) to keep"})
            return
        before = self.tokens()
        try:  # the summary step is the agents tier's, shared with the chat agent
            summary = await summarise(self.config.adapter, msgs[:cut], max_tokens=self.limits.max_tokens)
        except OpenFunctionsError as exc:
            self.emit({"type": "error", "code": "engine_compaction_failed",
                       "message": f"the summary request failed ({exc.code}): {exc.message}"})
            return
        if not summary:
            self.emit({"type": "error", "code": "engine_compaction_failed",
                       "message": "the model returned an empty summary; nothing was compacted"})
            return
        after_msgs = [Message.system(self._system()), Message.user(R.SUMMARY_PREFIX + summary), *msgs[cut:]]
        after = _tokens.estimate_messages(self.config.adapter.provider, after_msgs, self._tools_chars)
        await self._record(R.COMPACTION, {"trigger": trigger, "replaced": cut, "summary": summary,
                                          "tokens_before": before, "tokens_after": after}, wait=True)
        self.emit({"type": "compacted", "trigger": trigger, "replaced": cut, "tokens_before": before,
                   "tokens_after": after, "summary": summary[:EVENT_CONTENT_CHARS]})


__all__ = ["DEFAULT_SYSTEM", "FINISH_TOOL", "Limits", "Session", "SessionConfig", "check_session_id", "finish_tool",
           "session_path", "sessions_dir"]
