"""The ``rag`` profile: the RAG tools over an index opened when the server starts.

``--store postgresql://...`` (or ``$OPENFUNCTIONS_DATABASE_URL``): pgvector
index ``rag``; otherwise the embedded index in ``<data-dir>/store/rag/``.
``$OPENFUNCTIONS_EMBEDDER`` picks the embedder (default ``lexical``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openfunctions.core import DuplicateTool, ToolDefinitionError, ToolRegistry

from ._rag import Rag, open_rag
from ._tools import create_rag_tools

EMBEDDER_ENV = "OPENFUNCTIONS_EMBEDDER"
INSTRUCTIONS = (
    "Retrieval: rag_search finds passages of the ingested documents by similarity (cite chunk_id and source); "
    "rag_get_chunk reads one chunk and its neighbours by id; rag_ingest adds or updates a document "
    "(unchanged text is a no-op)."
)


@dataclass
class RagProfile:
    registry: ToolRegistry
    rag: Rag
    url: str | None
    data_dir: Path
    embedder_spec: str | None
    instructions: str = INSTRUCTIONS

    async def start(self) -> None:
        opened = await open_rag(url=self.url, data_dir=self.data_dir, embedder=self.embedder_spec)
        self.rag.index, self.rag.embedder = opened.index, opened.embedder

    async def aclose(self) -> None:
        await self.rag.aclose()


def build_rag_profile(*, data_dir: str | os.PathLike[str], registry: ToolRegistry | None = None,
                      principal: str | None = None, modules: Any = (), store: str | None = None,
                      upstreams: Any = None, embedder: str | None = None) -> RagProfile:
    """The profile builder servers/profiles.py calls (see ``LAYERS`` there)."""
    rag = Rag(None, None)
    tools = create_rag_tools(rag)
    if registry is None:
        reg = ToolRegistry(tools)
    else:
        try:
            for t in tools:
                registry.register(t)
            reg = registry
        except DuplicateTool:
            raise
        except ToolDefinitionError:  # a projection: a registry over the same executor
            reg = ToolRegistry([*registry.list(), *tools], executor=registry.executor)
    return RagProfile(reg, rag, store, Path(data_dir), embedder or os.environ.get(EMBEDDER_ENV) or None)


__all__ = ["RagProfile", "build_rag_profile"]
