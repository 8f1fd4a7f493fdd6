"""Memory served as tools: every save, search and forget goes through the
registry's executor (validation, policy, scheduling, a receipt).

Annotations are honest hints (set by ``state_tool``'s kind, shared with the
RAG tools): searches and reads are read-only; saving appends (not
idempotent: the same fact saved twice is two facts); ``memory_forget`` and
``memory_delete_thread`` are destructive.
"""

from __future__ import annotations

from typing import Any

from openfunctions.core import ToolDefinition
from openfunctions.store import obj, state_tool

from ._memory import FACT_ID_RE, ID_RE, MAX_FACT_BYTES, MAX_MESSAGE_BYTES, MAX_PAGE, ROLES, Memory

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
_THREAD_ID = {"type": "string", "pattern": ID_RE.pattern, "description": "1-128 of A-Z a-z 0-9 _ . : -"}
_FACT_ID = {"type": "string", "pattern": FACT_ID_RE.pattern, "description": "a fact id (f_ + 24 hex digits)"}


def create_memory_tools(memory: Memory, *, prefix: str = "memory_") -> list[ToolDefinition]:
    """The memory tools over ``memory`` (register them on a ToolRegistry)."""

    async def save_fact(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        fact = await memory.save_fact(p["text"], source=p.get("source"), tags=p.get("tags"))
        d = fact.to_dict()
        return {"id": d["id"], "fact": d}  # "id" is what memory_forget takes; "fact" echoes what was stored

    async def search(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        mode, hits = await memory.search(p["query"], limit=p.get("limit", 10), mode=p.get("mode", "auto"))
        return {"mode": mode, "results": [h.to_dict() for h in hits]}

    async def forget(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"id": p["id"], "forgotten": await memory.forget(p["id"])}

    async def append_message(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        m = await memory.append_message(p["thread_id"], p["role"], p["content"])
        return {"message": m.to_dict()}

    async def get_thread(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        page = await memory.get_thread(p["thread_id"], limit=p.get("limit", 20), before=p.get("before"))
        return page.to_dict()

    async def list_threads(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"threads": await memory.list_threads(limit=p.get("limit", 50), after=p.get("after"))}

    async def delete_thread(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"thread_id": p["thread_id"], "deleted_messages": await memory.delete_thread(p["thread_id"])}

    def limit(default: int) -> dict[str, Any]:
        return {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": default}

    def out(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return obj(props, required, closed=False)

    return [
        state_tool(
            f"{prefix}save_fact", "Save a fact to long-term memory (with where it came from). Returns its id "
                                  "(what memory_forget takes) and the stored fact; search finds it later by words or, with an embedder, by meaning.",
            kind="append", title="Save a fact", tag="memory", handler=save_fact,
            input=obj({"text": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_BYTES},
                       "source": {"type": "string", "maxLength": 1024, "description": "where the fact came from"},
                       "tags": {"type": "array", "maxItems": 20,
                                "items": {"type": "string", "minLength": 1, "maxLength": 64}}}, ["text"]),
            output=out({"id": _FACT_ID, "fact": _FACT}, ["id", "fact"]),
        ),
        state_tool(
            f"{prefix}search", "Search saved facts; best matches first with a score. mode: 'text' (shared words), "
                               "'meaning' (embeddings; needs an embedder), 'auto' (meaning when available).",
            kind="read", title="Search memory", tag="memory", handler=search,
            input=obj({"query": {"type": "string", "minLength": 1, "maxLength": 4096}, "limit": limit(10),
                       "mode": {"type": "string", "enum": ["auto", "text", "meaning"], "default": "auto"}}, ["query"]),
            output=out({"mode": {"type": "string"}, "results": {"type": "array", "items": _FACT}}, ["mode", "results"]),
        ),
        state_tool(
            f"{prefix}forget", "Delete a saved fact by id, permanently.",
            kind="destroy", title="Forget a fact", tag="memory", handler=forget,
            input=obj({"id": _FACT_ID}, ["id"]),
            output=out({"id": {"type": "string"}, "forgotten": {"type": "boolean"}}, ["id", "forgotten"]),
        ),
        state_tool(
            f"{prefix}append_message", "Append a message to a conversation thread (created on first use).",
            kind="append", title="Append to a thread", tag="memory", handler=append_message,
            input=obj({"thread_id": _THREAD_ID, "role": {"type": "string", "enum": list(ROLES)},
                       "content": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES}},
                      ["thread_id", "role", "content"]),
            output=out({"message": _MESSAGE}, ["message"]),
        ),
        state_tool(
            f"{prefix}get_thread", "Read a conversation thread, newest message first, one bounded page at a time: "
                                   "pass next_before back as 'before' for older messages.",
            kind="read", title="Read a thread", tag="memory", handler=get_thread,
            input=obj({"thread_id": _THREAD_ID, "limit": limit(20),
                       "before": {"type": "integer", "minimum": 1, "description": "only messages numbered below this"}},
                      ["thread_id"]),
            output=out({"thread_id": {"type": "string"}, "messages": {"type": "array", "items": _MESSAGE},
                        "next_before": {"type": ["integer", "null"]}, "total": {"type": "integer"}},
                       ["thread_id", "messages", "next_before", "total"]),
        ),
        state_tool(
            f"{prefix}list_threads", "List conversation threads by id (with message counts), one page at a time.",
            kind="read", title="List threads", tag="memory", handler=list_threads,
            input=obj({"limit": limit(50), "after": _THREAD_ID}),
            output=out({"threads": {"type": "array", "items": {"type": "object"}}}, ["threads"]),
        ),
        state_tool(
            f"{prefix}delete_thread", "Delete a conversation thread and all its messages, permanently.",
            kind="destroy", title="Delete a thread", tag="memory", handler=delete_thread,
            input=obj({"thread_id": _THREAD_ID}, ["thread_id"]),
            output=out({"thread_id": {"type": "string"}, "deleted_messages": {"type": "integer"}},
                       ["thread_id", "deleted_messages"]),
        ),
    ]


__all__ = ["create_memory_tools"]
