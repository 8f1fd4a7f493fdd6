"""The conversations of one chat agent: ids the agent issues, each with its own thread, bounded.

A served chat gives every client its own conversation: the first turn
without a ``conversation_id`` gets one issued (``conv_`` + 32 random
URL-safe characters: an unguessable handle, so one client cannot talk
into another's conversation), and the client sends it back with its next
turns and its ``/reset``. The table lives in the process: at most
``limit`` conversations; issuing one past the limit evicts the least
recently used conversation that has no turn running (its id then gets
404, and its memory thread stays in the store). A server restart forgets
the table (the threads stay in the memory store); clients start a new
conversation.

The agent's own conversation (``chat()`` without ``conversation=``,
``interactive()``) is not in the table and is never evicted.
"""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import anyio

from openfunctions.core import new_id

from ._errors import ConversationNotFound, InvalidConversation

#: How many issued conversations an agent keeps by default (``ChatConfig.max_conversations``).
MAX_CONVERSATIONS = 256
CONVERSATION_ID_RE = re.compile(r"^conv_[A-Za-z0-9_-]{32}$")


@dataclass
class Conversation:
    """One conversation: its memory thread, and (memory off) its messages in this process."""

    id: str
    thread_id: str
    history: list[tuple[str, str]] = field(default_factory=list)  # memory off: (role, text)
    busy: int = 0  # turns running or waiting: never evicted meanwhile
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one turn at a time, first come first served

    def reset(self) -> str:
        self.thread_id = new_id("chat")
        self.history.clear()
        return self.thread_id


class Conversations:
    """Issued conversations by id, least recently used first (see the module docstring)."""

    def __init__(self, limit: int = MAX_CONVERSATIONS) -> None:
        self.limit = limit
        self._table: OrderedDict[str, Conversation] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._table)

    def issue(self) -> Conversation:
        """A new conversation (a fresh id and thread); evicts the least recently used idle one past the limit."""
        conv = Conversation(id="conv_" + secrets.token_urlsafe(24), thread_id=new_id("chat"))
        self._table[conv.id] = conv
        if len(self._table) > self.limit:
            for old in list(self._table.values()):
                if old.busy == 0 and old is not conv:
                    del self._table[old.id]
                    self.evicted += 1
                    break
        return conv

    def held(self) -> list[Conversation]:
        """The conversations held now (least recently used first)."""
        return list(self._table.values())

    def get(self, conversation_id: Any) -> Conversation:
        """The conversation ``conversation_id`` names (now the most recently used), or
        :class:`InvalidConversation` (not an id this agent issues) / :class:`ConversationNotFound`."""
        if not isinstance(conversation_id, str) or not CONVERSATION_ID_RE.match(conversation_id):
            shown = conversation_id[:40] if isinstance(conversation_id, str) else type(conversation_id).__name__
            raise InvalidConversation(
                f"conversation id {shown!r} is not one this chat issues (conv_ and 32 characters of A-Z a-z 0-9 _ -); "
                "send none to start a new conversation"
            )
        conv = self._table.get(conversation_id)
        if conv is None:
            raise ConversationNotFound(
                f"conversation {conversation_id[:13]}… is unknown here (never issued, evicted after "
                f"{self.limit} newer conversations, or the server restarted); send none to start a new one"
            )
        self._table.move_to_end(conversation_id)
        return conv


__all__ = ["CONVERSATION_ID_RE", "MAX_CONVERSATIONS", "Conversation", "Conversations"]
