"""The session stream: the records one engine session writes, and the one fold that reads them.

A session is one journal file, ``<data-dir>/engine/sessions/<session_id>.journal``: an execution journal
(:class:`~openfunctions.core.journal.ExecutionJournal`, kind ``execution``, the line format of
docs/formats/journal.md: seq, checksum, chain) that carries the session's records below beside the
executor's ``start`` and ``receipt`` records of the session's tool calls. Sharing the file orders them:
a tool call's intent is in the file before its start record, so the fsync that makes the start durable
makes the intent durable too. docs/formats/engine.md shows the file with examples.

Record types (``type``: ``data``), in the order a session writes them:

- ``session``: ``{"v": 1, "session_id", "model", "mode", "system", "limits", "context_ceiling",
  "parent_session_id"}``: the first record. ``mode``: ``session`` (stdin/stdout), ``run``, ``review``
  or ``subrun``; ``parent_session_id``: the session a ``subrun`` was started from (else ``null``).
- ``prompt``: ``{"turn", "text"}``: a turn starts; ``text`` becomes a user message.
- ``goal``: ``{"text"}``: the session's goal (appended to the system prompt, kept through compaction).
- ``steer``: ``{"id", "text"}``: a steering message was received and queued (durable before it is
  acknowledged).
- ``steered``: ``{"turn", "ids", "text"}``: queued steering injected between two rounds, as one user message.
- ``round``: ``{"turn", "n", "message", "receipts", "usage", "model", "stop_reason"}``: the model's reply
  (``message``: an assistant :class:`~openfunctions.adapters.Message` as ``to_dict`` writes it).
  ``receipts`` maps each tool call's id to the receipt id the executor will give it: this record is the
  calls' intent, and it is durable before the first of them runs.
- ``result``: ``{"turn", "round", "call_id", "name", "receipt_id", "outcome", "is_error", "error_code",
  "content"}``: a call settled (``content``: the text the model is shown; ``receipt_id`` is ``null`` for
  a call that never reached the executor: an unknown tool, the ``finish`` tool, a call past a limit).
- ``uncertain``: ``{"turn", "round", "call_id", "name", "receipt_id", "receipt", "content"}``: written on
  resume for a call whose intent is recorded and whose result is not. It is never run again;
  ``receipt`` is the executor journal's receipt for ``receipt_id`` (``outcome``, ``certainty``,
  ``handler_started``, ``recovered``), or ``null`` when the executor has none (the call never started, or
  it was a read, which writes no start).
- ``compaction``: ``{"trigger", "replaced", "summary", "tokens_before", "tokens_after"}``: the first
  ``replaced`` messages of the conversation were replaced by one user message carrying ``summary``
  (``trigger``: ``manual`` or ``auto``).
- ``end``: ``{"turn", "state", "result"?, "text"?, "reason"?, "error"?}``: the turn ended ``finished``,
  ``aborted``, ``failed`` or ``interrupted``. An ``interrupted`` turn stays open: the next start of the
  session continues it.

A round is *settled* once each of its calls has a ``result`` or ``uncertain`` record. ``prompt``,
``goal``, ``steer``, ``compaction`` and ``end`` are durable before the engine moves on; a ``round`` is
durable before its first call's handler runs (the call's start record follows it in the file and is
fsynced first); ``result`` and ``steered`` records are written while the model is asked for the next
round, so a crash may lose the last of them: a lost ``result`` makes its call uncertain (never re-run),
a lost ``steered`` leaves its steering queued, to be injected again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from openfunctions.adapters import Message

from ._errors import SessionCorrupt

VERSION = 1

SESSION = "session"
PROMPT = "prompt"
GOAL = "goal"
STEER = "steer"
STEERED = "steered"
ROUND = "round"
RESULT = "result"
UNCERTAIN = "uncertain"
COMPACTION = "compaction"
END = "end"

#: How a turn ends. ``interrupted`` leaves it open (resumable).
END_STATES = ("finished", "aborted", "failed", "interrupted")

SUMMARY_PREFIX = "Summary of the session so far (earlier messages were compacted into it):\n"
STEER_PREFIX = "Steering from the user, received while you worked:\n"


@dataclass
class SessionState:
    """The fold of a session stream: what the engine needs to continue."""

    header: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    goal: str | None = None
    turn: int = 0
    turn_open: bool = False
    rounds_in_turn: int = 0
    calls_in_turn: int = 0
    rounds_total: int = 0
    #: the last round's calls still without a result: ``{"call_id", "name", "receipt_id", "round", "arguments"}``
    pending: list[dict[str, Any]] = field(default_factory=list)
    #: steering received and not yet injected: ``{"id", "text"}``
    steers: list[dict[str, Any]] = field(default_factory=list)
    #: model calls recorded (rounds and compaction summaries): where a scripted model continues
    model_calls: int = 0
    compactions: int = 0
    last_end: dict[str, Any] | None = None
    #: ``(result,)`` once the open turn's ``finish`` call succeeded (a restart before its ``end`` ends it so)
    finish: tuple[Any] | None = None

    @property
    def session_id(self) -> str:
        return str(self.header.get("session_id", ""))


def apply(state: SessionState, rtype: str, data: dict[str, Any]) -> None:
    """Fold one record into ``state``; :class:`SessionCorrupt` names a record that does not fit."""
    try:
        _apply(state, rtype, data)
    except SessionCorrupt:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SessionCorrupt(f"session record {rtype!r} does not fold: {type(exc).__name__}: {exc}",
                             details={"type": rtype}) from None


def _apply(state: SessionState, rtype: str, data: dict[str, Any]) -> None:
    if rtype == SESSION:
        if data.get("v") != VERSION:
            raise SessionCorrupt(f"session record version {data.get('v')!r} is not {VERSION}")
        state.header = dict(data)
        return
    if not state.header:
        raise SessionCorrupt(f"record {rtype!r} comes before the session record")
    if rtype == PROMPT:
        state.turn = int(data["turn"])
        state.turn_open = True
        state.rounds_in_turn = state.calls_in_turn = 0
        state.pending = []
        state.finish = None
        state.messages.append(Message.user(str(data["text"])))
    elif rtype == GOAL:
        state.goal = str(data["text"]) or None
    elif rtype == STEER:
        state.steers.append({"id": str(data["id"]), "text": str(data["text"])})
    elif rtype == STEERED:
        ids = set(data["ids"])
        state.steers = [s for s in state.steers if s["id"] not in ids]
        state.messages.append(Message.user(STEER_PREFIX + str(data["text"])))
    elif rtype == ROUND:
        message = Message.from_dict(data["message"])
        receipts = data["receipts"]
        state.messages.append(message)
        state.rounds_in_turn = int(data["n"])
        state.rounds_total += 1
        state.model_calls += 1
        state.pending = [{"call_id": c.id, "name": c.name, "arguments": c.arguments, "round": int(data["n"]),
                          "receipt_id": receipts.get(c.id)} for c in message.tool_calls]
    elif rtype in (RESULT, UNCERTAIN):
        call_id = str(data["call_id"])
        if not any(p["call_id"] == call_id for p in state.pending):
            raise SessionCorrupt(f"{rtype} record for call {call_id!r}, which is not a pending call of the last round")
        call = next(p for p in state.pending if p["call_id"] == call_id)
        state.pending = [p for p in state.pending if p["call_id"] != call_id]
        state.calls_in_turn += 1
        if rtype == RESULT and call["name"] == "finish" and data.get("outcome") == "succeeded":
            state.finish = (call["arguments"].get("result"),)
        is_error = bool(data.get("is_error", True)) if rtype == RESULT else True
        state.messages.append(Message("tool", str(data["content"]), tool_call_id=call_id, name=str(data["name"]),
                                      is_error=is_error))
    elif rtype == COMPACTION:
        replaced = int(data["replaced"])
        if not 0 < replaced <= len(state.messages):
            raise SessionCorrupt(f"compaction replaces {replaced} messages of {len(state.messages)}")
        state.messages = [Message.user(SUMMARY_PREFIX + str(data["summary"])), *state.messages[replaced:]]
        state.model_calls += 1
        state.compactions += 1
    elif rtype == END:
        if data["state"] not in END_STATES:
            raise SessionCorrupt(f"end state {data['state']!r} is not one of {', '.join(END_STATES)}")
        state.last_end = dict(data)
        state.turn_open = data["state"] == "interrupted"
        state.finish = None
    # an unknown type is skipped: a newer engine's record an older reader does not need


#: The executor's own records, which share the session's file: not the session's to fold.
EXECUTION_TYPES = frozenset({"start", "receipt"})


def fold(state: SessionState, records: Iterable[Any]) -> SessionState:
    """Fold a session file's records (:class:`~openfunctions.core.journal.Record`) into ``state``."""
    for rec in records:
        if rec.type not in EXECUTION_TYPES:
            apply(state, rec.type, rec.data)
    return state


def settled(state: SessionState) -> bool:
    """Every call of the last round has its result (or was reported uncertain)."""
    return not state.pending


__all__ = ["COMPACTION", "END", "END_STATES", "EXECUTION_TYPES", "GOAL", "PROMPT", "RESULT", "ROUND", "SESSION", "STEER",
           "STEERED", "SessionState", "UNCERTAIN", "apply", "fold", "settled"]
