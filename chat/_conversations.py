"""The conversations of one chat agent: ids the agent issues, each with its own thread, bounded, durable.

A served chat gives every client its own conversation: the first turn
without a ``conversation_id`` gets one issued (``conv_`` + 32 random
URL-safe characters: an unguessable handle, so one client cannot talk
into another's conversation), and the client sends it back with its next
turns and its ``/reset``. At most ``limit`` conversations are held; issuing
one past the limit evicts the least recently used conversation that has no
turn running (its id then gets 404, and its memory thread stays in the
store). "Used" means a completed turn (or the issue, or a reset).

An id is a bearer handle bound to the principal that created it: whoever
holds the id continues the conversation, as long as the transport
authenticated them as the same principal (the HTTP server's bearer-token
principal, or none on an open loopback bind); another principal gets the
same 404 as an unknown id. In-process callers (``chat(..., conversation=)``)
are trusted and not checked.

The agent's own conversation (``chat()`` without ``conversation=``,
``interactive()``) is not in the table and is never evicted.

Durable table, format version 1
===============================

With memory on (the threads are in the memory store, so a conversation's
history outlives the process), the table is a core journal
(``openfunctions.core.journal.JournalLog``: byte format, checksums, chain,
fsync and flock in ``core/journal/_encoder.py``)::

    <data-dir>/chat/<agent>.conversations.journal        (0600; dir 0700)
    <data-dir>/chat/<agent>.conversations.journal.lock   its writer's flock (one process)
    <data-dir>/chat/<agent>.conversations.journal.seg-N  only while a compaction is under way

(``<agent>`` is the agent's name if it is made of ``A-Z a-z 0-9 _ . -``
(at most 100 characters, not ``.`` or ``..``), else ``sha256-`` and the first
32 hex characters of the SHA-256 of its UTF-8 name; a conversation id is a
field of a record, never a path.) docs/formats/chat-conversations.md points
here: this is the one copy of the format. Header: ``kind``
``"chat-conversations"``, ``meta`` ``{"format":
"openfunctions.chat-conversations", "version": 1, "agent": name}`` (after a
compaction also ``previous``, the core journal's link to the segment it replaced).
The table is the core record stream :data:`CONVERSATIONS`
(``openfunctions.core.records``: one fold, :func:`apply`, used live and at
open; the file is a ``FileRecordLog``). Records (``type``: ``data``); the
table's order is least recently used first, and every record but
``evicted`` moves its conversation to the end:

- ``issued``: ``{id, thread_id, principal}`` — a new conversation
  (``principal``: the creator's, or null).
- ``reset``: ``{id, thread_id}`` — the conversation starts over in a new
  memory thread.
- ``used``: ``{id}`` — a turn of it completed (not written when it already
  is the most recently used).
- ``evicted``: ``{id}`` — forgotten (past the bound; written in the same
  batch as the ``issued`` that pushed it out, or at open when the bound
  shrank).
- ``snapshot``: ``{conversations: [[id, thread_id, principal], …]}`` —
  the whole table, least recently used first; it replaces whatever was
  folded before. Written only by a compaction.
- ``compacted``: ``{segments: [file names], kept}`` — the core record
  stream's end of a compaction's batch (not folded): the segments it names
  are superseded. Files compacted by earlier versions have none (their
  ``snapshot`` alone replaced the segments' state); earlier versions refuse
  a file that holds one (an unknown record type).

Every record is fsynced before the operation returns: an id is handed to a
client only once its ``issued`` record is durable. Record, then apply: one
change of the table at a time (a lock), its records appended and fsynced,
then folded; if the append fails the table is unchanged, as a restart would
find it (and the journal refuses later writes until the agent is reopened:
``JournalFailed``, 503 over HTTP). Compaction (when the file holds more
than ``max(4 × limit, 256)`` records) is the core record stream's one
mechanism: the file is rotated into a segment (``JournalLog.rotate``), one
``snapshot`` and a ``compacted`` record naming the superseded segments are
appended as one batch (one fsync), then the segments are deleted and the
directory fsynced. One compaction at a time (under the lock of every
change). The rotate (a rename and a new header: three fsyncs) and the
deletion (an unlink and a directory fsync) run on the event loop, so a live
server stalls that long once per compaction: medians of 4–12 ms measured on
a busy machine (``bench/bench_chat_compaction.py``, docs/CHAT.md), left
there. Reading starts at the newest of the file and its segments that
holds a ``compacted`` record and folds forward (with none, every segment
oldest first, then the file), so a crash at any point of a compaction loses
nothing; segments a finished compaction left behind are deleted on the next
open (those of a compaction by an earlier version, on the next compaction).
A compaction that fails (a rename or fsync error) does not undo the change
that started it (its records are durable); the table then refuses every
later change with ``JournalFailed`` until the agent is reopened, which
folds what is on disk. Reading fails closed (the stream's unknown-record
policy is ``REFUSE``: a conversation's principal decides who may continue
it, so a table folded without a newer writer's record is not served): an
unknown record type or a record missing a field raises
:class:`ChatConfigError` naming the file and the record (the agent is not
created).

With memory off the history lives in the process, so the table does too: a
restart forgets it (clients start a new conversation).

Conversation history, format version 2
======================================

A conversation's turns are messages of its memory thread (memory on; the
store's layout is in ``memory/_memory.py``) or of :attr:`Conversation.history`
(memory off, the same messages in the process). A completed turn adds, in
order: the user's message, each assistant reply that asked for tools (its
text, its calls, the provider's opaque blocks), the result of each call,
and the final answer: what the model saw, so the next turn replays the tool
calls and results to whichever provider answers it (the adapters pair them,
``openfunctions.adapters.replay_history``). One thread message per
:class:`openfunctions.adapters.Message`:

- ``role``: ``user``, ``assistant`` or ``tool``;
- ``content``: the text, at most :data:`STORED_CHARS` characters (then a
  marker saying how many more there were); a blank text is stored as
  ``(no text)`` (the thread refuses blank content) with ``blank: true``;
- ``meta.chat``: ``{"v": 2, "tool_calls"?: [{id, name, arguments,
  provider_data?}], "tool_call_id"?, "name"?, "is_error"?, "parts"?:
  [{provider, data}], "blank"?: true}`` (the fields of ``Message.to_dict``
  but role and content). Bounded to :data:`META_CHARS` characters of JSON:
  over it the opaque blocks are left out first (they are kept whole or not
  at all; a provider needs them back only within a tool turn, and a stored
  turn is complete), then each call's arguments become ``{"_not_kept":
  "<n> characters"}``.

A *summary* (the chat's ``context_ceiling``, docs/CHAT.md) is one more
thread message: role ``user``, content :data:`SUMMARY_PREFIX` and the
model's summary, ``meta.chat.summary`` ``{"through": n}``: it stands for
every message of the thread up to number ``n`` (the older turns it
summarises). It is appended after the messages it leaves out, so the
recent turns it keeps (numbers ``n+1`` up to its own) come before it in the
thread; a reader that finds a summary in its window shows the latest one,
then the window's messages numbered above its ``through`` (summaries
excepted), in thread order. A reader that ignores ``summary`` sees an
ordinary user message. With memory off the process's list is rewritten to
the summary message and the turns it keeps.

Version 1 (before tool turns were kept) stored a turn as two messages, the
user's and the final answer, with no ``meta.chat``; they still read, as
text turns. A thread may hold both. A turn is appended message by message:
a crash in between leaves its first messages, and a call whose result is
missing is replayed with a "not run" result. The model is shown the last
``history_messages`` messages (tool calls and results count), from the
first user message among them.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.adapters import Message, Role, valid_text
from openfunctions.core import JournalFailed, OpenFunctionsError, new_id
from openfunctions.core.journal import JournalLog
from openfunctions.core.records import Entry, FileRecordLog, RecordStream, StreamRecord, UnknownRecords

from ._errors import ChatConfigError, ConversationNotFound, InvalidConversation

log = structlog.get_logger("openfunctions.chat")

#: How many issued conversations an agent keeps by default (``ChatConfig.max_conversations``).
MAX_CONVERSATIONS = 256
CONVERSATION_ID_RE = re.compile(r"^conv_[A-Za-z0-9_-]{32}$")
KIND = "chat-conversations"
FORMAT = "openfunctions.chat-conversations"
VERSION = 1
#: ``get(..., principal=ANY)``: an in-process caller, not checked.
ANY = object()
#: The conversation history's format (see the module docstring).
HISTORY_VERSION = 2
STORED_CHARS = 8000
#: The start of a summary message's text (what the model reads before the summary).
SUMMARY_PREFIX = "Summary of the conversation so far (earlier messages were compacted into it):\n"
META_CHARS = 16 * 1024
_BLANK = "(no text)"


@dataclass
class Conversation:
    """One conversation: its memory thread, and (memory off) its messages in this process."""

    id: str
    thread_id: str
    principal: str | None = None  # who created it (the transport's principal)
    history: list[Message] = field(default_factory=list)  # memory off: its messages (format: the module docstring)
    busy: int = 0  # turns running or waiting: never evicted meanwhile
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one turn at a time, first come first served


Record = tuple[str, dict[str, Any]]


def apply(table: OrderedDict[str, Conversation], type: str, data: dict[str, Any]) -> str | None:
    """Fold one record into ``table`` (the only code that changes it). Returns the id it moved to the end
    (the most recently used), or None. Raises KeyError/TypeError/ValueError on a malformed record."""
    if type == "issued":
        principal = data["principal"]
        if principal is not None and not isinstance(principal, str):
            raise TypeError(f"principal must be a string or null, not {type_name(principal)}")
        table[_id(data)] = Conversation(id=_id(data), thread_id=_str(data, "thread_id"), principal=principal)
    elif type == "reset":
        conv = table.get(_id(data))
        if conv is None:
            return None
        conv.thread_id = _str(data, "thread_id")
        conv.history.clear()
    elif type == "used":
        if _id(data) not in table:
            return None
    elif type == "evicted":
        table.pop(_id(data), None)
        return None
    elif type == "snapshot":
        rows = data["conversations"]
        if not isinstance(rows, list):
            raise TypeError("conversations must be a list")
        table.clear()
        for row in rows:
            cid, thread, principal = row
            apply(table, "issued", {"id": cid, "thread_id": thread, "principal": principal})
        return None
    else:
        raise ValueError(f"unknown record type {type!r}")
    table.move_to_end(_id(data))
    return _id(data)


def _apply_record(table: OrderedDict[str, Conversation], rec: StreamRecord) -> None:
    apply(table, rec.type, rec.data)


def _malformed(where: Path | str, rec: StreamRecord, exc: Exception) -> ChatConfigError:
    why = getattr(exc, "message", None) or str(exc)
    return ChatConfigError(
        f"conversation table {str(where)!r}: record {rec.seq} ({rec.type!r}) is malformed: {why}; "
        "move the file aside to start with no conversations",
        details={"path": str(where), "seq": rec.seq})


def _snapshot(table: OrderedDict[str, Conversation]) -> list[tuple[str, dict[str, Any]]]:
    return [("snapshot", {"conversations": [[c.id, c.thread_id, c.principal] for c in table.values()]})]


def conversations_stream(agent: str | None = None) -> RecordStream[OrderedDict[str, Conversation]]:
    """The table's record stream; ``agent``: the name a new file's header (and a compaction's) carries."""
    meta: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    if agent is not None:
        meta["agent"] = agent
    return RecordStream(
        "chat conversations", kind=KIND, types={"issued", "reset", "used", "evicted", "snapshot"},
        new_state=OrderedDict, apply=_apply_record, unknown=UnknownRecords.REFUSE, meta=meta, snapshot=_snapshot,
        malformed=_malformed)


#: The conversation table as a core record stream (what a reader folds; a writer's names its agent).
CONVERSATIONS = conversations_stream()


def stored(message: Message) -> tuple[Role, str, dict[str, Any]]:
    """``(role, content, meta)`` of ``message`` as a thread keeps it (history format 2, bounded)."""
    d = message.to_dict()
    content = d.pop("content")
    role = message.role
    del d["role"]
    if len(content) > STORED_CHARS:
        content = content[:STORED_CHARS] + f"\n[... {len(content) - STORED_CHARS} more characters not kept]"
    if not content.strip():
        content, d["blank"] = _BLANK, True
    if "parts" in d and _size(d) > META_CHARS:
        del d["parts"]
    for call in d.get("tool_calls") or ():
        if _size(d) <= META_CHARS:
            break
        call["arguments"] = {"_not_kept": f"{_size(call['arguments'])} characters"}
    return role, content, {"chat": {"v": HISTORY_VERSION, **d}}


def stored_summary(summary: str, through: int) -> tuple[Role, str, dict[str, Any]]:
    """``(role, content, meta)`` of a summary message standing for the thread's messages up to ``through``."""
    role, content, meta = stored(Message.user(SUMMARY_PREFIX + summary))
    meta["chat"]["summary"] = {"through": through}
    return role, content, meta


def summary_through(meta: Any) -> int | None:
    """The ``through`` of a summary message's ``meta`` (see the module docstring); None: not a summary."""
    chat = meta.get("chat") if isinstance(meta, dict) else None
    summary = chat.get("summary") if isinstance(chat, dict) else None
    through = summary.get("through") if isinstance(summary, dict) else None
    return through if isinstance(through, int) and not isinstance(through, bool) and through >= 0 else None


def from_stored(role: str, content: str, meta: Any) -> Message | None:
    """The message a thread entry holds (format 2, or a format-1 text turn); None: not one to show the model."""
    chat = meta.get("chat") if isinstance(meta, dict) else None
    if isinstance(chat, dict) and chat.get("v") == HISTORY_VERSION:
        fields = {k: v for k, v in chat.items() if k not in ("v", "blank", "summary")}
        try:
            return Message.from_dict({**fields, "role": role, "content": "" if chat.get("blank") else content})
        except ValueError:
            return None  # an entry this reader cannot take: left out, as an orphan result would be
    if role == "user":
        return Message.user(content)
    if role == "assistant":
        return Message.assistant(content)
    return None


def _size(value: Any) -> int:
    import json

    return len(json.dumps(value, ensure_ascii=False))


def type_name(v: Any) -> str:
    return type(v).__name__


def _str(data: dict[str, Any], key: str) -> str:
    v = data[key]
    if not isinstance(v, str) or not v:
        raise TypeError(f"{key} must be a non-empty string, not {type_name(v)}")
    return v


def _id(data: dict[str, Any]) -> str:
    v = _str(data, "id")
    if not CONVERSATION_ID_RE.match(v):
        raise ValueError(f"id {v[:40]!r} is not a conversation id")
    return v


def log_path(data_dir: Path, agent: str) -> Path:
    """Where agent ``agent``'s table lives in ``data_dir``."""
    safe = agent if re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", agent) and agent not in (".", "..") else \
        "sha256-" + hashlib.sha256(agent.encode("utf-8")).hexdigest()[:32]
    return data_dir / "chat" / f"{safe}.conversations.journal"


class Conversations:
    """Issued conversations by id, least recently used first (see the module docstring).

    Build with ``Conversations(limit)`` (in the process only) or :meth:`open` (durable)."""

    def __init__(self, limit: int = MAX_CONVERSATIONS) -> None:
        self.limit = limit
        self._memory: OrderedDict[str, Conversation] = OrderedDict()  # the table while there is no file
        self._file: FileRecordLog[OrderedDict[str, Conversation]] | None = None
        self._records = 0  # records in the file since its start (a compaction past max(4 x limit, 256))
        self._lock = anyio.Lock()  # held by every change of the table: one at a time, compaction included
        self._leaving: set[str] = set()  # ids whose "evicted" record is being written (get: not found)
        self._failure: JournalFailed | None = None  # a compaction failed: every later change raises it
        self.evicted = 0

    @classmethod
    async def open(cls, path: Path, limit: int, *, agent: str) -> Conversations:
        """Open (creating) the durable table at ``path``, fold it, and apply the bound.

        Raises JournalLocked (another process holds it), JournalCorrupt, JournalUnsafe, ChatConfigError (a record
        the fold refuses)."""
        self = cls(limit)
        self._file = await FileRecordLog.open(conversations_stream(agent), path)
        try:
            self._records = self._file.log.last_seq
            extra = [("evicted", {"id": c.id}) for c in list(self._table.values())[: max(0, len(self._table) - limit)]]
            if extra:  # the bound shrank since the last run (--max-conversations)
                async with self._lock:
                    await self._change(extra)
        except BaseException:
            file, self._file = self._file, None
            await file.close()
            raise
        return self

    @property
    def _table(self) -> OrderedDict[str, Conversation]:
        return self._file.state if self._file is not None else self._memory

    @property
    def _log(self) -> JournalLog | None:
        """The table's journal (None: in the process only)."""
        return self._file.log if self._file is not None else None

    @property
    def durable(self) -> bool:
        return self._file is not None

    def __len__(self) -> int:
        return len(self._table)

    def held(self) -> list[Conversation]:
        """The conversations held now (least recently used first)."""
        return list(self._table.values())

    async def issue(self, principal: str | None = None) -> Conversation:
        """A new conversation (a fresh id and thread), durable before it returns; evicts the least recently
        used idle one past the limit."""
        cid = "conv_" + secrets.token_urlsafe(24)
        async with self._lock:  # the victim is chosen from the table this change applies to
            # the principal is the only text here that may come from outside (a transport's name for a client)
            who = valid_text(principal) if principal is not None else None
            records: list[Record] = [("issued", {"id": cid, "thread_id": new_id("chat"), "principal": who})]
            victim = next((c for c in self._table.values() if c.busy == 0), None) \
                if len(self._table) >= self.limit else None
            if victim is None:
                await self._change(records)
            else:
                records.append(("evicted", {"id": victim.id}))
                self._leaving.add(victim.id)  # no turn starts on it while its eviction is written
                try:
                    await self._change(records)
                finally:
                    self._leaving.discard(victim.id)
                self.evicted += 1
            return self._table[cid]

    async def reset(self, conv: Conversation) -> str:
        """Start ``conv`` over in a new thread (durable before it returns); returns the thread id."""
        async with self._lock:
            if self._table.get(conv.id) is not conv:
                raise ConversationNotFound(f"conversation {conv.id[:13]}… was evicted meanwhile; send none to start a new one")
            await self._change([("reset", {"id": conv.id, "thread_id": new_id("chat")})])
            return conv.thread_id

    async def used(self, conv: Conversation) -> None:
        """A turn of ``conv`` completed: it becomes the most recently used (no record if it already is)."""
        async with self._lock:
            if conv.id != next(reversed(self._table), None) and conv.id in self._table:
                await self._change([("used", {"id": conv.id})])

    async def _change(self, records: list[Record]) -> None:
        """Make ``records`` durable, then apply them (compacting past the threshold): if the append fails, the
        table is unchanged, as a restart would find it. The caller holds ``_lock``: one change (and one
        compaction) at a time, so log order is table order."""
        if self._failure is not None:
            raise self._failure
        if self._file is None:
            CONVERSATIONS.fold([Entry(t, d) for t, d in records], self._memory)
            return
        # shielded there: a cancelled caller's records are still written, and folded too
        await self._file.append_many(records)
        self._records += len(records)
        if self._records > max(4 * self.limit, 256):
            with anyio.CancelScope(shield=True):
                try:
                    await self._compact()
                except (OpenFunctionsError, OSError) as exc:
                    # This change is durable and applied: it stands. The file is half-switched (or its log failed):
                    # every later change is refused, as after a failed append, until the agent is reopened.
                    why = getattr(exc, "message", None) or f"{type_name(exc)}: {exc}"
                    self._failure = JournalFailed(
                        f"conversation table {str(self._file.path)!r}: its compaction failed ({why}); nothing is lost "
                        "(the next open folds what is on disk): restart the chat to use it again",
                        details={"path": str(self._file.path)})
                    log.error("chat_conversations_compaction_failed", path=str(self._file.path), error=why)

    async def _compact(self) -> None:
        """The core record stream's compaction (rotate; ``snapshot`` + ``compacted`` in one fsync; delete the
        segments). Runs under ``_lock``, so never two at once; a crash between any two steps loses nothing."""
        assert self._file is not None
        live = self._file.state
        done = await self._file.compact(kept=len(live))
        self._records = done.written
        # The fold of what was written is the live table (the same ids, threads, principals and order), made of
        # new objects: turns in flight hold the live ones (their lock, busy count and history), so keep those.
        folded = self._file.state
        for cid, conv in folded.items():
            old = live.get(cid)
            if old is not None and (old.thread_id, old.principal) == (conv.thread_id, conv.principal):
                folded[cid] = old

    def get(self, conversation_id: Any, *, principal: Any = ANY) -> Conversation:
        """The conversation ``conversation_id`` names, or :class:`InvalidConversation` (not an id this agent
        issues) / :class:`ConversationNotFound` (not held, or created by another ``principal``)."""
        if not isinstance(conversation_id, str) or not CONVERSATION_ID_RE.match(conversation_id):
            shown = conversation_id[:40] if isinstance(conversation_id, str) else type(conversation_id).__name__
            raise InvalidConversation(
                f"conversation id {shown!r} is not one this chat issues (conv_ and 32 characters of A-Z a-z 0-9 _ -); "
                "send none to start a new conversation"
            )
        conv = self._table.get(conversation_id)
        if conv is None or conversation_id in self._leaving or (principal is not ANY and conv.principal != principal):
            raise ConversationNotFound(
                f"conversation {conversation_id[:13]}… is unknown here (never issued, evicted after "
                f"{self.limit} newer conversations, or created by another principal); send none to start a new one"
            )
        return conv

    async def close(self) -> None:
        if self._file is not None:
            await self._file.close()


__all__ = ["CONVERSATIONS", "CONVERSATION_ID_RE", "HISTORY_VERSION", "MAX_CONVERSATIONS", "Conversation",
           "Conversations", "SUMMARY_PREFIX", "apply", "conversations_stream", "from_stored", "log_path", "stored",
           "stored_summary", "summary_through"]
