"""What the four reference providers share: the connected object and the read capability."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
from pydantic import Field

from openfunctions.core import ToolDefinition

from .._provider import ContextProvider, ProviderHealth

#: A reviewed parallel-safe read: these tools only read files below their root.
READ = {"effect": "read", "parallel_safe": True}
#: A write to the user's files (exclusive in the scheduler).
WRITE = {"effect": "write"}
READ_ONLY = {"read_only_hint": True, "open_world_hint": False}
WRITES = {"read_only_hint": False, "destructive_hint": False, "open_world_hint": False}
#: What every reference tool passes to ``@tool`` besides its own options: no output schema (the replies are
#: plain JSON objects the tool's description explains; a ``dict`` annotation would say nothing more).
NO_OUTPUT: dict[str, Any] = {"output_schema": None}


class Connected:
    """A connected reference provider: its tools, its context block and its health, computed by
    plain functions that run in a worker thread (they read files and run ``git``)."""

    def __init__(self, provider: ContextProvider, tools: list[ToolDefinition],
                 context: Callable[[], str], health: Callable[[], ProviderHealth]) -> None:
        self.provider = provider
        self._tools = tools
        self._context = context
        self._health = health

    def create_tools(self) -> list[ToolDefinition]:
        return list(self._tools)

    async def build_context(self) -> str:
        return await anyio.to_thread.run_sync(self._context)

    async def health(self) -> ProviderHealth:
        return await anyio.to_thread.run_sync(self._health)

    async def close(self) -> None:
        return None

    def metadata(self) -> dict[str, Any]:
        return {**self.provider.metadata(), "tools": [t.name for t in self._tools]}


def _limit_doc(default: int, maximum: int) -> str:
    return f"at most this many results (default {default}, at most {maximum})"


# ``limit`` parameters, one per (default, bound) the tools use; the default is also the parameter's own.
Limit20of200 = Annotated[int, Field(ge=1, le=200, description=_limit_doc(20, 200))]
Limit20of500 = Annotated[int, Field(ge=1, le=500, description=_limit_doc(20, 500))]
Limit50of500 = Annotated[int, Field(ge=1, le=500, description=_limit_doc(50, 500))]
Limit50of1000 = Annotated[int, Field(ge=1, le=1000, description=_limit_doc(50, 1000))]
Limit100of1000 = Annotated[int, Field(ge=1, le=1000, description=_limit_doc(100, 1000))]
Limit200of5000 = Annotated[int, Field(ge=1, le=5000, description=_limit_doc(200, 5000))]


__all__ = [
    "NO_OUTPUT", "READ", "READ_ONLY", "WRITE", "WRITES", "Connected", "Limit20of200", "Limit20of500", "Limit50of500",
    "Limit50of1000", "Limit100of1000", "Limit200of5000",
]
