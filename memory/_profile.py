"""The ``memory`` profile: the memory tools over a store opened when the server starts.

Where the data lives: ``--store postgresql://...`` (or
``$OPENFUNCTIONS_DATABASE_URL``) puts it in PostgreSQL (store ``memory``);
otherwise ``<data-dir>/store/memory/``. ``$OPENFUNCTIONS_EMBEDDER``
(``lexical``, ``minilm``) turns on search by meaning; unset, search is by text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.core import DuplicateTool, OpenFunctionsError, ToolDefinition, ToolDefinitionError, ToolRegistry
from openfunctions.store import create_embedder, open_store

from ._memory import Memory
from ._tools import create_memory_tools

log = structlog.get_logger("openfunctions.memory")
EMBEDDER_ENV = "OPENFUNCTIONS_EMBEDDER"
INSTRUCTIONS = (
    "Memory: save facts worth keeping with memory_save_fact (say where they came from), find them with "
    "memory_search, and keep conversation threads with memory_append_message / memory_get_thread "
    "(newest first, paged). memory_forget and memory_delete_thread delete permanently."
)


def join_registry(registry: ToolRegistry | None, tools: list[ToolDefinition]) -> ToolRegistry:
    """Register ``tools`` into ``registry`` (sharing its executor); a new registry if None.

    A projection cannot register tools: then a new registry over the same
    executor holds what the projection showed plus ``tools``.
    """
    if registry is None:
        return ToolRegistry(tools)
    try:
        for t in tools:
            registry.register(t)
        return registry
    except DuplicateTool:
        raise
    except ToolDefinitionError:
        return ToolRegistry([*registry.list(), *tools], executor=registry.executor)


@dataclass
class MemoryProfile:
    registry: ToolRegistry
    memory: Memory
    instructions: str = INSTRUCTIONS
    url: str | None = None
    data_dir: Path | None = None
    embedder_spec: str | None = field(default=None)
    strict: bool = True

    async def start(self) -> None:
        """Open the store. Under 'all' (``strict=False``) a store that cannot be opened (locked by
        another server on this data dir, database down) leaves the tools answering why, and the
        rest of the server serves; the 'memory' profile itself fails to start instead."""
        try:
            if self.embedder_spec and self.memory.embedder is None:
                self.memory.embedder = await anyio.to_thread.run_sync(create_embedder, self.embedder_spec)
            self.memory.attach(await open_store("memory", url=self.url, data_dir=self.data_dir))
        except OpenFunctionsError as exc:
            if self.strict:
                raise
            self.memory.unavailable = exc.message
            log.warning("memory_unavailable", reason=exc.message)

    async def aclose(self) -> None:
        await self.memory.aclose()


def build_memory_profile(*, data_dir: str | os.PathLike[str], registry: ToolRegistry | None = None,
                         principal: str | None = None, modules: Any = (), store: str | None = None,
                         upstreams: Any = None, embedder: str | None = None) -> MemoryProfile:
    """The profile builder servers/_profiles.py calls (see ``LAYERS`` there)."""
    memory = Memory(None)
    reg = join_registry(registry, create_memory_tools(memory))
    return MemoryProfile(reg, memory, url=store, data_dir=Path(data_dir),
                         embedder_spec=embedder or os.environ.get(EMBEDDER_ENV) or None, strict=registry is None)


__all__ = ["EMBEDDER_ENV", "MemoryProfile", "build_memory_profile", "join_registry"]
