"""openfunctions.rag: retrieval over ingested documents, served as tools.

Usage::

    from openfunctions.rag import create_rag_tools, open_rag

    rag = await open_rag()                                 # embedded: <cwd>/.data/store/rag/, lexical embedder
    rag = await open_rag(url="postgresql://...", embedder="minilm")   # pgvector HNSW, a real model
    await rag.ingest("handbook.md", text, source="docs/handbook.md")  # again, unchanged: a no-op
    hits = await rag.search("how do I rotate keys?", k=5)             # [{chunk_id, text, score, ...}]
    registry = ToolRegistry(create_rag_tools(rag))         # rag_ingest, rag_search, rag_get_chunk, ...

Command line: ``openfunctions-mcp rag ingest PATH...`` / ``rag search QUERY``.
See docs/STATE.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openfunctions.core.deprecation import old_names
from openfunctions.store import Embedder, LexicalEmbedder, MiniLMEmbedder, OpenAIEmbedder, create_embedder

from ._chunk import Chunker
from ._demo import demo_session
from ._errors import (
    ChunkNotFound,
    DocumentTooLarge,
    IndexMismatch,
    InvalidRagInput,
    RagError,
    RagNotOpen,
    VectorExtensionMissing,
)
from ._index import PgVectorIndex, StoreIndex
from ._profile import RagProfile, build_rag_profile
from ._rag import CollectedFiles, IngestResult, Rag, collect_files, open_rag
from ._tools import create_rag_tools

__all__ = [
    "ChunkNotFound", "Chunker", "CollectedFiles", "DocumentTooLarge", "Embedder", "IndexMismatch", "IngestResult", "InvalidRagInput",
    "LexicalEmbedder", "MiniLMEmbedder", "OpenAIEmbedder", "PgVectorIndex", "Rag", "RagError", "RagNotOpen", "RagProfile", "StoreIndex",
    "VectorExtensionMissing", "build_rag_profile", "collect_files", "create_embedder", "create_rag_tools", "demo_session", "open_rag",
]


# Old names of renamed functions, kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"create_tools": "create_rag_tools"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)
