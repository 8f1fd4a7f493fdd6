"""Memory served as tools: every save, search and forget goes through the
registry's executor (validation, policy, scheduling, a receipt).

Annotations are honest hints (set by ``state_tool``'s kind, shared with the
RAG tools): searches and reads are read-only; saving appends (not
idempotent: the same fact saved twice is two facts); ``memory_forget`` and
``memory_delete_thread`` are destructive.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from openfunctions.core import ToolDefinition
from openfunctions.store import obj, state_tool

from ._memory import FACT_ID_RE, ID_RE, MAX_FACT_BYTES, MAX_MESSAGE_BYTES, MAX_PAGE, Memory

_FACT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"}, "text": {"type": "string"}, "source": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}}, "saved_at": {"type": "string"},
        "score": {"type": "number"},
    },
    "required": ["id", "text", "saved_at"],
}
_MESSAGE = {
    "type": "object",
    "properties": {
        "thread_id": {"type": "string"}, "n": {"type": "integer"}, "role": {"type": "string"},
        "content": {"type": "string"}, "at": {"type": "string"}, "meta": {"type": "object"},
    },
    "required": ["thread_id", "n", "role", "content", "at"],
}
_FACT_ID = {"type": "string", "pattern": FACT_ID_RE.pattern, "description": "a fact id (f_ + 24 hex digits)"}

# Parameter types of the tools (module level: the tools' schemas are derived from their signatures).
ThreadId = Annotated[str, Field(pattern=ID_RE.pattern, description="1-128 of A-Z a-z 0-9 _ . : -")]
FactId = Annotated[str, Field(pattern=FACT_ID_RE.pattern, description=_FACT_ID["description"])]
#: The roles ``_memory.ROLES`` lists (a test keeps the two equal).
Role = Literal["user", "assistant", "system", "tool"]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE)]
Tag = Annotated[str, Field(min_length=1, max_length=64)]


def create_memory_tools(memory: Memory, *, prefix: str = "memory_") -> list[ToolDefinition]:
    """The memory tools over ``memory`` (register them on a ToolRegistry)."""

    def out(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return obj(props, required, closed=False)

    @state_tool(f"{prefix}save_fact", kind="append", title="Save a fact", tag="memory",
                output=out({"id": _FACT_ID, "fact": _FACT}, ["id", "fact"]))
    async def save_fact(text: Annotated[str, Field(min_length=1, max_length=MAX_FACT_BYTES)],
                        source: Annotated[str, Field(max_length=1024)] | None = None,
                        tags: Annotated[list[Tag], Field(max_length=20)] | None = None) -> dict[str, Any]:
        """Save a fact to long-term memory (with where it came from). Returns its id (what memory_forget
        takes) and the stored fact; search finds it later by words or, with an embedder, by meaning.

        Args:
            source: where the fact came from
        """
        d = (await memory.save_fact(text, source=source, tags=tags)).to_dict()
        return {"id": d["id"], "fact": d}  # "id" is what memory_forget takes; "fact" echoes what was stored

    @state_tool(f"{prefix}search", kind="read", title="Search memory", tag="memory",
                output=out({"mode": {"type": "string"}, "results": {"type": "array", "items": _FACT}},
                           ["mode", "results"]))
    async def search(query: Annotated[str, Field(min_length=1, max_length=4096)], limit: Limit = 10,
                     mode: Literal["auto", "text", "meaning"] = "auto") -> dict[str, Any]:
        """Search saved facts; best matches first with a score. mode: 'text' (shared words), 'meaning'
        (embeddings; needs an embedder), 'auto' (meaning when available)."""
        used, hits = await memory.search(query, limit=limit, mode=mode)
        return {"mode": used, "results": [h.to_dict() for h in hits]}

    @state_tool(f"{prefix}forget", kind="destroy", title="Forget a fact", tag="memory",
                output=out({"id": {"type": "string"}, "forgotten": {"type": "boolean"}}, ["id", "forgotten"]))
    async def forget(id: FactId) -> dict[str, Any]:
        """Delete a saved fact by id, permanently."""
        return {"id": id, "forgotten": await memory.forget(id)}

    @state_tool(f"{prefix}append_message", kind="append", title="Append to a thread", tag="memory",
                output=out({"message": _MESSAGE}, ["message"]))
    async def append_message(thread_id: ThreadId, role: Role,
                             content: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE_BYTES)]) -> dict[str, Any]:
        """Append a message to a conversation thread (created on first use)."""
        return {"message": (await memory.append_message(thread_id, role, content)).to_dict()}

    @state_tool(f"{prefix}get_thread", kind="read", title="Read a thread", tag="memory",
                output=out({"thread_id": {"type": "string"}, "messages": {"type": "array", "items": _MESSAGE},
                            "next_before": {"type": ["integer", "null"]}, "total": {"type": "integer"}},
                           ["thread_id", "messages", "next_before", "total"]))
    async def get_thread(thread_id: ThreadId, limit: Limit = 20,
                         before: Annotated[int, Field(ge=1)] | None = None) -> dict[str, Any]:
        """Read a conversation thread, newest message first, one bounded page at a time: pass next_before
        back as 'before' for older messages.

        Args:
            before: only messages numbered below this
        """
        return (await memory.get_thread(thread_id, limit=limit, before=before)).to_dict()

    @state_tool(f"{prefix}list_threads", kind="read", title="List threads", tag="memory",
                output=out({"threads": {"type": "array", "items": {"type": "object"}}}, ["threads"]))
    async def list_threads(limit: Limit = 50, after: ThreadId | None = None) -> dict[str, Any]:
        """List conversation threads by id (with message counts), one page at a time."""
        return {"threads": await memory.list_threads(limit=limit, after=after)}

    @state_tool(f"{prefix}delete_thread", kind="destroy", title="Delete a thread", tag="memory",
                output=out({"thread_id": {"type": "string"}, "deleted_messages": {"type": "integer"}},
                           ["thread_id", "deleted_messages"]))
    async def delete_thread(thread_id: ThreadId) -> dict[str, Any]:
        """Delete a conversation thread and all its messages, permanently."""
        return {"thread_id": thread_id, "deleted_messages": await memory.delete_thread(thread_id)}

    return [save_fact, search, forget, append_message, get_thread, list_threads, delete_thread]


__all__ = ["create_memory_tools"]
