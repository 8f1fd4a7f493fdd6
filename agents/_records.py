"""Run records: what every agent loop leaves behind, and the one fold that reads them.

Written to a :class:`~openfunctions.core.journal.JournalLog` of kind
``"runs"`` (byte format, checksums and recovery: ``core/journal/_encoder.py``)
by :mod:`._runlog`; this module builds every record and :func:`apply` folds
them into :class:`RunState`, live and at recovery alike. Format version 1;
each record's ``data`` has ``v: 1`` and ``run_id`` (``run_`` + 32 hex).

``run_started`` (before the first model call)
    ``agent``, ``parent_run_id`` (a delegating run, or null),
    ``parent_receipt_id`` (the tool call that started this run, or null),
    ``principal``, ``provider``, ``model`` (as resolved; the model the
    provider names in its replies is in ``run_round``),
    ``instructions_sha256``, ``capability_sha256`` (sha256 of the canonical
    sorted list of ``{name, spec_sha256}`` the filtered registry exposed),
    ``tools`` (that list), ``limits`` (``max_rounds``, ``max_tool_calls``,
    ``max_tokens``, ``timeout_s``, ``sampling_timeout_s``), ``task_sha256``, ``task`` (first 4,000 characters),
    ``crew`` (crew name or null).
``run_round`` (after the round's tool calls settled; not waited for: the
    run's ``run_finished`` is written after it and waited for)
    ``round`` (1-based), ``model`` (as the provider named it),
    ``stop_reason``, ``usage`` ``{input_tokens, output_tokens}``,
    ``tool_calls``: ``[{id, name, receipt_id, outcome, error_code}]``
    (``receipt_id`` null for a call refused before the executor, e.g. an
    unknown tool), ``text`` (first 4,000 characters of any text the model
    sent along).
``run_messages`` (the conversation, as it grows; optional: runs written
    before it existed have none, and every reader skips a type it does not
    know) ``round`` (0: what the run opened with: the system prompt, any
    history, the task; n: the messages round n added: the model's reply,
    then each tool result as it settled, or the reminder after a reply
    without the submit call), ``messages`` (each as ``Message.to_dict`` of
    :mod:`openfunctions.adapters`: role, content, tool calls with their
    ids, tool results with the call they answer, and the provider's opaque
    blocks tagged with that provider), ``cut`` (characters of content left
    out), ``dropped`` (messages left out). Bounded: a message's content
    keeps its first :data:`MESSAGE_CHARS` characters (then a marker saying
    how many more there were), a call's arguments over :data:`MESSAGE_CHARS`
    characters of JSON are replaced by ``{"_not_kept": "<n> characters"}``,
    a message's opaque blocks are kept whole or, over
    :data:`PARTS_CHARS` characters, not at all (an altered block would be
    refused), and a record over :data:`RECORD_CHARS` characters leaves out
    its oldest messages but the first. Not waited for, like ``run_round``:
    the reply with tool calls is queued before its tools run and written
    while they run (a process killed after that keeps it; a machine crash
    may lose the records since the last fsync). Waiting for it would cost
    an fsync per tool round (+2.5 ms a round measured, against the loop's
    target of at most 1 ms).
    :func:`history` rebuilds the run's conversation from these records
    (``openfunctions.agents.read_history`` from the files): after a restart
    mid-tool-turn it ends with the calls whose results never came, which the
    adapters send with a "not run" result (``openfunctions.adapters.replay_history``).
``run_finished`` (before the result is returned; exactly one per run)
    ``status``: ``completed`` | ``max_rounds`` | ``cancelled`` | ``failed``
    | ``timeout`` (a deadline passed: ``error.code`` ``run_timeout``,
    ``sampling_timeout`` or ``adapter_timeout``) | ``interrupted``; ``rounds``, ``usage`` (summed), ``receipts`` (every
    tool call's receipt id, in order), ``text`` (the final text, first 16,384
    characters), ``text_sha256`` (of the whole text), ``output`` (structured
    output or null), ``error`` ``{code, message}`` or null,
    ``recovered`` (true only when written by recovery: ``interrupted``).
``outcome_claim`` (optional, after a ``completed`` run)
    ``claim_id`` (``claim_`` + 32 hex), ``agent``, ``text_sha256``,
    ``requires_verification`` (receipt ids of the run's calls whose tool
    declares ``capability.requires_verification``; may be empty): the run
    *claims* this outcome. A claim is never a verification.
``claim_verified`` (any time after the claim; written by :mod:`._claims`)
    ``verification_id`` (``ver_`` + 32 hex), ``claim_id``, ``evidence``:
    ``{"kind": "receipt", "receipt_id", "tool", "outcome"}`` (a verifier
    tool call that succeeded) or ``{"kind": "work_proof", "attempt_id",
    "proof_digest"}`` (the work controller's proof of an attempt whose
    verifiers passed),
    ``covers`` (receipt ids of the run's calls this evidence verifies),
    ``by``, ``verified_at``.
``task_fulfilled`` (at most one counts: the first)
    ``fulfilment_id`` (``ful_`` + 32 hex), ``claim_ids`` (the claims it rests
    on), ``reason`` (null when every claim was verified; an operator's words
    when fulfilled without that), ``by``, ``fulfilled_at``.

A claim is *verified* once at least one ``claim_verified`` links to it and
every receipt in its ``requires_verification`` is in some such record's
``covers``. A task is *fulfilled* once a ``task_fulfilled`` record is written:
:func:`._claims.fulfil_task` writes one only when every claim is verified, or
with an explicit ``reason``. Claim -> verification -> fulfilment are linked
by ids only; nothing is folded into the claim record itself.

Tool call entries in ``run_round`` may also carry ``requires_verification:
true`` (the tool's capability says so) and ``rerun_of`` (the receipt id of an
earlier call of the same idempotent tool whose effect was unknown; this entry
is its re-run).

The stream (``core.records``): :data:`AGENT_RUNS` is these records' definition and
its one fold (:func:`apply`), used live by every run log and at replay by every
reader. Records of a type this version does not know are **kept** unfolded
(``UnknownRecords.KEEP``): runs are history, read to list and show what
happened, and a reader that refused a data directory over a newer writer's
record would hide every run in it (``run_messages`` itself was added on that
promise: the version before it skips it). Run journals are never compacted,
so such a record is never re-written or dropped either. A future record that
changes what a claim or a fulfilment means must not rely on this: it comes
with a new format version, which older readers refuse. A record of a known
type that cannot be folded (no ``run_id``, a field of the wrong type) is
refused (``record_malformed``), naming it.

Two views fold the same records through that one apply: a run's *summary*
(:class:`RunState` without its conversation: the live run logs, ``read_runs``)
leaves ``run_messages`` out before the fold, so listing runs never holds
every conversation in memory; one run's *history* (``read_history``) folds
all of that run's records and reads :meth:`RunState.history`.

Recovery (on open) writes ``run_finished`` with ``status: "interrupted"``,
``recovered: true`` for every run that has a ``run_started`` and no
``run_finished``. It never resumes a run and never re-dispatches its tool
calls (their receipts are the execution journal's, whose own recovery marks
unfinished calls ``unknown``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openfunctions.adapters import Message, valid_json
from openfunctions.core import digest, new_id, utc_timestamp
from openfunctions.core.records import Entry, RecordStream, StreamRecord, UnknownRecords

VERSION = 1
KIND = "runs"
STARTED, ROUND, FINISHED, CLAIM = "run_started", "run_round", "run_finished", "outcome_claim"
VERIFIED, FULFILLED = "claim_verified", "task_fulfilled"
MESSAGES = "run_messages"
TERMINAL = ("completed", "max_rounds", "cancelled", "failed", "timeout", "interrupted")
TASK_CHARS = 4000
TEXT_CHARS = 16384
#: Bounds of a ``run_messages`` record (see the module docstring).
MESSAGE_CHARS = 16384
PARTS_CHARS = 64 * 1024
RECORD_CHARS = 512 * 1024


def _text_digest(text: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def started(*, run_id: str, agent: str, provider: str, model: str, instructions: str, tools: list[dict[str, str]],
            limits: dict[str, Any], task: str, principal: str | None, parent_run_id: str | None,
            parent_receipt_id: str | None, crew: str | None = None) -> dict[str, Any]:
    tools = sorted(tools, key=lambda t: t["name"])
    return {
        "v": VERSION, "run_id": run_id, "agent": agent, "crew": crew, "parent_run_id": parent_run_id,
        "parent_receipt_id": parent_receipt_id, "principal": principal, "provider": provider, "model": model,
        "instructions_sha256": _text_digest(instructions), "capability_sha256": digest(tools), "tools": tools,
        "limits": limits, "task_sha256": _text_digest(task), "task": task[:TASK_CHARS], "started_at": utc_timestamp(),
    }


def round_(*, run_id: str, n: int, model: str, stop_reason: str, usage: dict[str, int], tool_calls: list[dict[str, Any]],
           text: str | None) -> dict[str, Any]:
    return {"v": VERSION, "run_id": run_id, "round": n, "model": model, "stop_reason": stop_reason, "usage": usage,
            "tool_calls": tool_calls, "text": (text or "")[:TASK_CHARS]}


def messages_(*, run_id: str, n: int, messages: Sequence[Message]) -> dict[str, Any]:
    """A ``run_messages`` record: ``messages`` as round ``n`` added them, bounded (see the module docstring)."""
    out: list[dict[str, Any]] = []
    cut = 0
    for m in messages:
        d = m.to_dict()
        if len(d["content"]) > MESSAGE_CHARS:
            more = len(d["content"]) - MESSAGE_CHARS
            cut += more
            d["content"] = d["content"][:MESSAGE_CHARS] + f"\n[... {more} more characters not kept]"
        for call in d.get("tool_calls") or ():
            size = len(json.dumps(call["arguments"], ensure_ascii=False))
            if size > MESSAGE_CHARS:
                call["arguments"] = {"_not_kept": f"{size} characters"}
                cut += size
        if "parts" in d and len(json.dumps(d["parts"], ensure_ascii=False)) > PARTS_CHARS:
            del d["parts"]
        out.append(d)
    dropped = 0
    while len(out) > 1 and len(json.dumps(out, ensure_ascii=False)) > RECORD_CHARS:
        out.pop(1 if len(out) > 2 else 0)  # the oldest but the first (the system prompt, or the reply)
        dropped += 1
    return {"v": VERSION, "run_id": run_id, "round": n, "messages": valid_json(out), "cut": cut, "dropped": dropped}


def history(records: Iterable[tuple[str, dict[str, Any]]], run_id: str) -> list[Message]:
    """Run ``run_id``'s conversation from its records (``(type, data)``, any runs'), folded by :func:`apply`
    (see :meth:`RunState.history`); empty for a run written before ``run_messages`` existed."""
    run = AGENT_RUNS.fold(Entry(t, d) for t, d in records if d.get("run_id") == run_id).get(run_id)
    return run.history() if run is not None else []


def finished(*, run_id: str, status: str, rounds: int, usage: dict[str, int], receipts: list[str], text: str | None,
             output: Any = None, error: dict[str, Any] | None = None, recovered: bool = False) -> dict[str, Any]:
    assert status in TERMINAL, status
    return {
        "v": VERSION, "run_id": run_id, "status": status, "rounds": rounds, "usage": usage, "receipts": receipts,
        "text": (text or "")[:TEXT_CHARS], "text_sha256": _text_digest(text or ""), "output": output,
        "error": valid_json(error),  # its message may quote anything an exception carried
        "recovered": recovered, "finished_at": utc_timestamp(),
    }


def claim(*, run_id: str, agent: str, text: str, requires_verification: list[str] | None = None) -> dict[str, Any]:
    return {"v": VERSION, "run_id": run_id, "claim_id": new_id("claim"), "agent": agent, "text_sha256": _text_digest(text),
            "requires_verification": list(requires_verification or []), "claimed_at": utc_timestamp()}


def verified(*, run_id: str, claim_id: str, evidence: dict[str, Any], covers: list[str], by: str | None) -> dict[str, Any]:
    return {"v": VERSION, "run_id": run_id, "verification_id": new_id("ver"), "claim_id": claim_id,
            "evidence": evidence, "covers": list(covers), "by": by, "verified_at": utc_timestamp()}


def fulfilled(*, run_id: str, claim_ids: list[str], reason: str | None, by: str | None) -> dict[str, Any]:
    return {"v": VERSION, "run_id": run_id, "fulfilment_id": new_id("ful"), "claim_ids": list(claim_ids),
            "reason": reason, "by": by, "fulfilled_at": utc_timestamp()}


@dataclass
class RunState:
    """One run as its records say (built only by :func:`apply`)."""

    run_id: str
    started: dict[str, Any]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)
    verifications: list[dict[str, Any]] = field(default_factory=list)
    fulfilment: dict[str, Any] | None = None
    #: the ``run_messages`` records' data, in order (empty in a summary view: see the module docstring)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def history(self) -> list[Message]:
        """The run's conversation from its ``run_messages`` records, in order. A message a record holds that
        does not read back is skipped (its content was bounded when written; see :func:`messages_`)."""
        out: list[Message] = []
        for data in self.messages:
            for raw in data.get("messages") or ():
                try:
                    out.append(Message.from_dict(raw))
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
        return out

    @property
    def status(self) -> str:
        return self.finished["status"] if self.finished else "running"

    @property
    def agent(self) -> str:
        return str(self.started.get("agent", "?"))

    def pending(self, claim_id: str) -> list[str] | None:
        """Receipts of ``claim_id``'s calls that still await a verification (``None``: no such claim)."""
        c = next((c for c in self.claims if c.get("claim_id") == claim_id), None)
        if c is None:
            return None
        covered = {r for v in self.verifications if v.get("claim_id") == claim_id for r in v.get("covers") or ()}
        return [r for r in c.get("requires_verification") or () if r not in covered]

    def claim_verified(self, claim_id: str) -> bool:
        """At least one verification links to the claim and every call that requires one is covered."""
        pending = self.pending(claim_id)
        return pending == [] and any(v.get("claim_id") == claim_id for v in self.verifications)

    @property
    def fulfilled(self) -> bool:
        return self.fulfilment is not None

    def chain(self) -> list[dict[str, Any]]:
        """Each claim with its verifications and whether the task's fulfilment rests on it."""
        ful = self.fulfilment or {}
        return [{"claim_id": c["claim_id"], "verified": self.claim_verified(c["claim_id"]),
                 "pending": self.pending(c["claim_id"]),
                 "verifications": [v["verification_id"] for v in self.verifications if v.get("claim_id") == c["claim_id"]],
                 "fulfilled_by": ful.get("fulfilment_id") if c["claim_id"] in (ful.get("claim_ids") or ()) else None}
                for c in self.claims if isinstance(c.get("claim_id"), str)]

    def summary(self) -> dict[str, Any]:
        f = self.finished or {}
        return {
            "run_id": self.run_id, "agent": self.agent, "status": self.status, "crew": self.started.get("crew"),
            "parent_run_id": self.started.get("parent_run_id"), "provider": self.started.get("provider"),
            "model": self.started.get("model"), "rounds": f.get("rounds", len(self.rounds)),
            "started_at": self.started.get("started_at"), "finished_at": f.get("finished_at"),
            "claims": len(self.claims), "verified": all(self.claim_verified(c.get("claim_id", "")) for c in self.claims)
            if self.claims else False, "fulfilled": self.fulfilled,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "started": self.started, "rounds": self.rounds,
                "finished": self.finished, "claims": self.claims, "verifications": self.verifications,
                "fulfilment": self.fulfilment, "chain": self.chain()}


def _apply(state: dict[str, RunState], rec: StreamRecord) -> None:
    data, rtype = rec.data, rec.type
    rid = data["run_id"]
    if not isinstance(rid, str):
        raise TypeError(f"run_id is {type(rid).__name__}, not a string")
    if rtype == STARTED:
        state[rid] = RunState(rid, data)
        return
    run = state.get(rid)
    if run is None:  # records of a run whose start is in an older segment: keep what we know
        run = state[rid] = RunState(rid, {"run_id": rid})
    if rtype == ROUND:
        run.rounds.append(data)
    elif rtype == MESSAGES:
        run.messages.append(data)
    elif rtype == FINISHED and run.finished is None:
        run.finished = data
    elif rtype == CLAIM:
        run.claims.append(data)
    elif rtype == VERIFIED:
        run.verifications.append(data)
    elif rtype == FULFILLED and run.fulfilment is None:
        run.fulfilment = data


#: The agent runs' record stream: its types, its one fold, and its policy for a type it does not know
#: (``KEEP``: see the module docstring). No snapshot: run journals are history, rotated, never compacted.
AGENT_RUNS: RecordStream[dict[str, RunState]] = RecordStream(
    "agent-runs", kind=KIND, types=(STARTED, ROUND, MESSAGES, FINISHED, CLAIM, VERIFIED, FULFILLED),
    new_state=dict, apply=_apply, unknown=UnknownRecords.KEEP, keep_segments=True)


def _apply_summary(state: dict[str, RunState], rec: StreamRecord) -> None:
    if in_summary(rec.type):
        _apply(state, rec)


#: The summary view of :data:`AGENT_RUNS` as a stream (for a backend that folds through a stream's ``apply``:
#: the database run log's live runs): the same fold, a ``run_messages`` record known and left out.
RUN_SUMMARIES: RecordStream[dict[str, RunState]] = RecordStream(
    "agent-runs", kind=KIND, types=AGENT_RUNS.types, new_state=dict, apply=_apply_summary,
    unknown=UnknownRecords.KEEP, keep_segments=True)


def in_summary(rtype: str) -> bool:
    """Whether the summary view folds records of ``rtype`` (all but the conversation; see the module docstring)."""
    return rtype != MESSAGES


def apply(state: dict[str, RunState], rtype: str, data: dict[str, Any]) -> bool:
    """Fold one record into ``state`` (run id -> :class:`RunState`) through :data:`AGENT_RUNS`. ``False``: a type
    this version does not know, kept unfolded. Raises ``RecordMalformed`` for a record it cannot fold."""
    return AGENT_RUNS.apply(state, Entry(rtype, data))


def fold(records: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, RunState]:
    """``(type, data)`` records folded into a fresh state by :func:`apply`."""
    return AGENT_RUNS.fold(Entry(t, d) for t, d in records)


def unfinished(state: dict[str, RunState]) -> list[RunState]:
    return [r for r in state.values() if r.finished is None and r.started.get("agent") is not None]


__all__ = ["AGENT_RUNS", "RUN_SUMMARIES", "KIND", "MESSAGES", "RunState", "TERMINAL", "VERSION", "apply", "claim", "finished", "fold", "fulfilled",
           "history", "in_summary", "messages_", "round_", "started", "unfinished", "verified"]
