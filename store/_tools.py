"""One builder for the tools over state (memory, RAG): honest annotations from one word, clean errors.

``kind`` says what a call does to the state, and sets the MCP annotations and
the executor's capability together, so that two packages cannot drift apart:

======== ============ ============ ============== ==========================================
kind     read_only    destructive  idempotent     e.g.
======== ============ ============ ============== ==========================================
read     yes          -            yes            search, get a chunk, read a thread
write    no           no           yes            ingest a document (again: no change)
append   no           no           no             save a fact, append a message (twice = two)
destroy  no           yes          yes            forget a fact, delete a document
======== ============ ============ ============== ==========================================

A handler's error from this project (an :class:`OpenFunctionsError`, e.g. a
:class:`StoreError`) becomes a :class:`ToolError` with the same code and
message and ``effect_happened`` from the error's certainty (a write whose
outcome is unknown says so), instead of an internal error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, define_tool

Kind = Literal["read", "write", "append", "destroy"]
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]

_KINDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "read": ({"read_only_hint": True}, {"effect": "read", "parallel_safe": True, "idempotent": True}),
    "write": ({"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True},
              {"effect": "write", "idempotent": True}),
    "append": ({"read_only_hint": False, "destructive_hint": False, "idempotent_hint": False}, {"effect": "write"}),
    "destroy": ({"read_only_hint": False, "destructive_hint": True, "idempotent_hint": True},
                {"effect": "write", "idempotent": True}),
}


def obj(properties: Mapping[str, Any], required: Sequence[str] = (), *, closed: bool = True) -> dict[str, Any]:
    """A JSON Schema object (closed by default: input schemas refuse unknown fields)."""
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "required": list(required)}
    if closed:
        out["additionalProperties"] = False
    return out


def guard(fn: Handler) -> Handler:
    """Turn the layer's errors into clean tool errors that say whether anything was written."""

    async def handler(params: dict[str, Any], ctx: Any) -> Any:
        try:
            return await fn(params, ctx)
        except ToolError:
            raise
        except OpenFunctionsError as exc:
            raise ToolError(exc.message, code=exc.code, effect_happened=getattr(exc, "effect_happened", False),
                            details=exc.details) from None

    return handler


def state_tool(name: str, description: str, *, kind: Kind, title: str, tag: str, input: Mapping[str, Any],
               output: Mapping[str, Any], handler: Handler) -> ToolDefinition:
    """A tool over state whose annotations and capability follow from ``kind`` (module docstring)."""
    hints, capability = _KINDS[kind]
    return define_tool(
        name=name, description=description, input_schema=input, output_schema=output, handler=guard(handler),
        annotations={"title": title, **hints, "open_world_hint": False}, capability=capability, tags=(tag,),
    )


__all__ = ["guard", "obj", "state_tool"]
