"""The session stream: the records one engine session writes, and the one fold that reads them.

A session is one journal file (:class:`~openfunctions.core.journal.JournalLog`, kind ``engine-session``,
the line format of docs/formats/journal.md: seq, checksum, chain) at
``<data-dir>/engine/sessions/<session_id>.journal``; the tool calls it makes go through the executor with
their starts and receipts in ``<session_id>.exec.journal`` beside it. docs/formats/engine.md shows both
with examples.

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

A round is *settled* once each of its calls has a ``result`` or ``uncertain`` record. Records after the
last settled round may be missing after a crash (``result`` records are not waited for: a lost one
makes its call uncertain, never re-run); ``round``, ``steer``, ``prompt``, ``goal`` and ``end`` are
durable before the engine moves on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openfunctions.adapters import Message

from ._errors import SessionCorrupt

KIND = "engine-session"
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
        state.pending = [p for p in state.pending if p["call_id"] != call_id]
        state.calls_in_turn += 1
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
    # an unknown type is skipped: a newer engine's record an older reader does not need


def settled(state: SessionState) -> bool:
    """Every call of the last round has its result (or was reported uncertain)."""
    return not state.pending


__all__ = ["COMPACTION", "END", "END_STATES", "GOAL", "KIND", "PROMPT", "RESULT", "ROUND", "SESSION", "STEER",
           "STEERED", "SessionState", "UNCERTAIN", "apply", "settled"]
