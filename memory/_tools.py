"""Memory served as tools: every save, search and forget goes through the
registry's executor (validation, policy, scheduling, a receipt).

Annotations are honest hints: searches and reads are read-only; saving
appends (not idempotent: the same fact saved twice is two facts);
``memory_forget`` and ``memory_delete_thread`` are destructive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, define_tool

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


def _guard(fn: Callable[[dict[str, Any]], Awaitable[Any]]) -> Callable[[dict[str, Any], Any], Awaitable[Any]]:
    """Turn the layer's errors into clean tool errors that say whether anything was written."""

    async def handler(params: dict[str, Any], ctx: Any) -> Any:
        try:
            return await fn(params)
        except ToolError:
            raise
        except OpenFunctionsError as exc:
            happened = getattr(exc, "effect_happened", False)
            raise ToolError(exc.message, code=exc.code, effect_happened=happened, details=exc.details) from None

    return handler


def create_memory_tools(memory: Memory, *, prefix: str = "memory_") -> list[ToolDefinition]:
    """The memory tools over ``memory`` (register them on a ToolRegistry)."""

    async def save_fact(p: dict[str, Any]) -> dict[str, Any]:
        fact = await memory.save_fact(p["text"], source=p.get("source"), tags=p.get("tags"))
        return {"fact": fact.to_dict()}

    async def search(p: dict[str, Any]) -> dict[str, Any]:
        mode, hits = await memory.search(p["query"], limit=p.get("limit", 10), mode=p.get("mode", "auto"))
        return {"mode": mode, "results": [h.to_dict() for h in hits]}

    async def forget(p: dict[str, Any]) -> dict[str, Any]:
        return {"id": p["id"], "forgotten": await memory.forget(p["id"])}

    async def append_message(p: dict[str, Any]) -> dict[str, Any]:
        m = await memory.append_message(p["thread_id"], p["role"], p["content"])
        return {"message": m.to_dict()}

    async def get_thread(p: dict[str, Any]) -> dict[str, Any]:
        page = await memory.get_thread(p["thread_id"], limit=p.get("limit", 20), before=p.get("before"))
        return page.to_dict()

    async def list_threads(p: dict[str, Any]) -> dict[str, Any]:
        return {"threads": await memory.list_threads(limit=p.get("limit", 50), after=p.get("after"))}

    async def delete_thread(p: dict[str, Any]) -> dict[str, Any]:
        return {"thread_id": p["thread_id"], "deleted_messages": await memory.delete_thread(p["thread_id"])}

    limit = lambda default: {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": default}  # noqa: E731
    read = {"effect": "read", "parallel_safe": True, "idempotent": True}
    return [
        define_tool(
            name=f"{prefix}save_fact",
            description="Save a fact to long-term memory (with where it came from). Returns its id; "
                        "search finds it later by words or, with an embedder, by meaning.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["text"], "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_BYTES},
                "source": {"type": "string", "maxLength": 1024, "description": "where the fact came from"},
                "tags": {"type": "array", "maxItems": 20, "items": {"type": "string", "minLength": 1, "maxLength": 64}},
            }},
            output_schema={"type": "object", "properties": {"fact": _FACT}, "required": ["fact"]},
            handler=_guard(save_fact),
            annotations={"title": "Save a fact", "read_only_hint": False, "destructive_hint": False,
                         "idempotent_hint": False, "open_world_hint": False},
            capability={"effect": "write"}, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}search",
            description="Search saved facts; best matches first with a score. mode: 'text' (shared words), "
                        "'meaning' (embeddings; needs an embedder), 'auto' (meaning when available).",
            input_schema={"type": "object", "additionalProperties": False, "required": ["query"], "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 4096},
                "limit": limit(10),
                "mode": {"type": "string", "enum": ["auto", "text", "meaning"], "default": "auto"},
            }},
            output_schema={"type": "object", "required": ["mode", "results"], "properties": {
                "mode": {"type": "string"}, "results": {"type": "array", "items": _FACT}}},
            handler=_guard(search),
            annotations={"title": "Search memory", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}forget",
            description="Delete a saved fact by id, permanently.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["id"],
                          "properties": {"id": _FACT_ID}},
            output_schema={"type": "object", "required": ["id", "forgotten"], "properties": {
                "id": {"type": "string"}, "forgotten": {"type": "boolean"}}},
            handler=_guard(forget),
            annotations={"title": "Forget a fact", "read_only_hint": False, "destructive_hint": True,
                         "idempotent_hint": True, "open_world_hint": False},
            capability={"effect": "write", "idempotent": True}, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}append_message",
            description="Append a message to a conversation thread (created on first use).",
            input_schema={"type": "object", "additionalProperties": False,
                          "required": ["thread_id", "role", "content"], "properties": {
                              "thread_id": _THREAD_ID, "role": {"type": "string", "enum": list(ROLES)},
                              "content": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES}}},
            output_schema={"type": "object", "properties": {"message": _MESSAGE}, "required": ["message"]},
            handler=_guard(append_message),
            annotations={"title": "Append to a thread", "read_only_hint": False, "destructive_hint": False,
                         "idempotent_hint": False, "open_world_hint": False},
            capability={"effect": "write"}, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}get_thread",
            description="Read a conversation thread, newest message first, one bounded page at a time: pass "
                        "next_before back as 'before' for older messages.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["thread_id"], "properties": {
                "thread_id": _THREAD_ID, "limit": limit(20),
                "before": {"type": "integer", "minimum": 1, "description": "only messages numbered below this"}}},
            output_schema={"type": "object", "required": ["thread_id", "messages", "next_before", "total"], "properties": {
                "thread_id": {"type": "string"}, "messages": {"type": "array", "items": _MESSAGE},
                "next_before": {"type": ["integer", "null"]}, "total": {"type": "integer"}}},
            handler=_guard(get_thread),
            annotations={"title": "Read a thread", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}list_threads",
            description="List conversation threads by id (with message counts), one page at a time.",
            input_schema={"type": "object", "additionalProperties": False, "properties": {
                "limit": limit(50), "after": _THREAD_ID}},
            output_schema={"type": "object", "required": ["threads"], "properties": {
                "threads": {"type": "array", "items": {"type": "object"}}}},
            handler=_guard(list_threads),
            annotations={"title": "List threads", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("memory",),
        ),
        define_tool(
            name=f"{prefix}delete_thread",
            description="Delete a conversation thread and all its messages, permanently.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["thread_id"],
                          "properties": {"thread_id": _THREAD_ID}},
            output_schema={"type": "object", "required": ["thread_id", "deleted_messages"], "properties": {
                "thread_id": {"type": "string"}, "deleted_messages": {"type": "integer"}}},
            handler=_guard(delete_thread),
            annotations={"title": "Delete a thread", "read_only_hint": False, "destructive_hint": True,
                         "idempotent_hint": True, "open_world_hint": False},
            capability={"effect": "write", "idempotent": True}, tags=("memory",),
        ),
    ]


__all__ = ["create_memory_tools"]
