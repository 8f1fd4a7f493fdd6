"""One builder for the tools over state (memory, RAG): honest annotations from one word, clean errors.

:func:`state_tool` is a decorator over a typed async function, like
:func:`openfunctions.core.tool` (which it calls): the input schema comes from
the signature (``Annotated[T, Field(...)]`` for bounds and patterns), the
description from the docstring, each parameter's description from its
``Args:`` entry (or the ``Field``). The output schema is given (``output=``):
these replies stay open to new fields (a projected RAG reply carries an
``artifactProjection``), and the reply goes out as the handler returned it.

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

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, tool

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

    handler.__wrapped__ = fn  # type: ignore[attr-defined]  # a registry's duplicate-name error names the function
    return handler


def state_tool(name: str, *, kind: Kind, title: str, tag: str, output: Mapping[str, Any],
               description: str | None = None) -> Callable[[Callable[..., Awaitable[Any]]], ToolDefinition]:
    """Decorator: a tool over state whose annotations and capability follow from ``kind`` (module docstring).

    The decorated function is turned into a tool exactly as ``@tool`` does it
    (same schema, same docstring rules: a bad ``Args:`` section is a
    :class:`~openfunctions.core.errors.ToolDocstringInvalid`); ``description``
    replaces the docstring's text. Its errors from this project become clean
    tool errors (:func:`guard`). Type hints are resolved in the function's
    module, so a constrained type it uses (``Annotated[...]``) is defined at
    module level, not inside the function that builds the tools.

    ::

        @state_tool("notes_forget", kind="destroy", title="Forget a note", tag="notes",
                    output=obj({"forgotten": {"type": "boolean"}}, ["forgotten"], closed=False))
        async def forget(note_id: Annotated[str, Field(min_length=1, max_length=64)]) -> dict[str, Any]:
            '''Delete a note, permanently.

            Args:
                note_id: the id notes_save returned
            '''
            return {"forgotten": await notes.forget(note_id)}
    """
    hints, capability = _KINDS[kind]

    def decorate(fn: Callable[..., Awaitable[Any]]) -> ToolDefinition:
        t = tool(name, description=description, output_schema=dict(output),
                 annotations={"title": title, **hints, "open_world_hint": False}, capability=capability, tags=(tag,))(fn)
        return dataclasses.replace(t, handler=guard(t.handler))

    return decorate


__all__ = ["guard", "obj", "state_tool"]
