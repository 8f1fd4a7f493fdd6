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

import structlog

from openfunctions.core import DuplicateTool, OpenFunctionsError, ToolDefinitionError, ToolRegistry

from ._rag import Rag, open_rag
from ._tools import create_rag_tools

log = structlog.get_logger("openfunctions.rag")
EMBEDDER_ENV = "OPENFUNCTIONS_EMBEDDER"
INSTRUCTIONS = (
    "Retrieval: rag_search finds passages of the ingested documents by similarity (cite chunk_id and source); "
    "rag_get_chunk reads one chunk and its neighbours by id; rag_ingest adds or updates a document "
    "(unchanged text is a no-op). A reply over 32 KiB comes summarized with an artifactProjection: read it "
    "whole with rag_artifact_read."
)


@dataclass
class RagProfile:
    registry: ToolRegistry
    rag: Rag
    url: str | None
    data_dir: Path
    embedder_spec: str | None
    instructions: str = INSTRUCTIONS
    strict: bool = True
    artifacts: Any = None  # <data-dir>/artifacts: replies over the budget (rag_artifact_read)

    async def start(self) -> None:
        """Open the index. Under 'all' (``strict=False``) an index that cannot be opened leaves the
        tools answering why; the 'rag' profile itself fails to start instead."""
        try:
            opened = await open_rag(url=self.url, data_dir=self.data_dir, embedder=self.embedder_spec)
        except OpenFunctionsError as exc:
            if self.strict:
                raise
            self.rag.unavailable = exc.message
            log.warning("rag_unavailable", reason=exc.message)
            return
        self.rag.index, self.rag.embedder = opened.index, opened.embedder

    async def aclose(self) -> None:
        try:
            await self.rag.aclose()
        finally:
            if self.artifacts is not None:
                self.artifacts.close()


def build_rag_profile(*, data_dir: str | os.PathLike[str], registry: ToolRegistry | None = None,
                      principal: str | None = None, modules: Any = (), store: str | None = None,
                      upstreams: Any = None, embedder: str | None = None) -> RagProfile:
    """The profile builder servers/_profiles.py calls (see ``LAYERS`` there)."""
    from openfunctions.artifacts import ArtifactStore

    rag = Rag(None, None)
    artifacts = ArtifactStore(Path(data_dir) / "artifacts")
    tools = create_rag_tools(rag, artifacts=artifacts)
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
    return RagProfile(reg, rag, store, Path(data_dir), embedder or os.environ.get(EMBEDDER_ENV) or None,
                      strict=registry is None, artifacts=artifacts)


__all__ = ["RagProfile", "build_rag_profile"]
