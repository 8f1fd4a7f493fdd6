"""RAG errors (each with a stable ``code``). Store errors pass through unchanged."""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class RagError(OpenFunctionsError):
    code = "rag_error"


class InvalidRagInput(RagError):
    """A bad document id, chunk id, query or limit: nothing was written."""

    code = "rag_invalid_input"


class DocumentTooLarge(RagError):
    """A document over ``max_document_bytes``: refused before anything was written."""

    code = "rag_document_too_large"


class IndexMismatch(RagError):
    """The index was built by another embedder (name or dimension): refused at open."""

    code = "rag_index_mismatch"


class VectorExtensionMissing(RagError):
    """A pgvector index's database has no ``vector`` extension and this role could not create it; the message
    names the statement a superuser runs (or the package to install on the server)."""

    code = "rag_vector_extension_missing"


class ChunkNotFound(RagError):
    code = "rag_chunk_not_found"


class RagNotOpen(RagError):
    code = "rag_not_open"


__all__ = ["ChunkNotFound", "DocumentTooLarge", "IndexMismatch", "InvalidRagInput", "RagError", "RagNotOpen",
           "VectorExtensionMissing"]
