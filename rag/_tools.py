"""RAG served as tools: ingest, search and read chunks through the registry's executor.

Replies are bounded by construction: a search returns at most 20 chunks of
at most ~180 words each; ``rag_get_chunk`` returns one chunk; document
listings are paged. Nothing here grows with the corpus.
"""

from __future__ import annotations

from typing import Any

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, define_tool

from ._rag import Rag

MAX_TOOL_RESULTS = 20
MAX_INGEST_CHARS = 1_000_000

_HIT = {
    "type": "object",
    "properties": {
        "chunk_id": {"type": "string"}, "doc_id": {"type": "string"}, "n": {"type": "integer"},
        "text": {"type": "string"}, "score": {"type": "number"}, "source": {"type": ["string", "null"]},
        "title": {"type": ["string", "null"]},
    },
    "required": ["chunk_id", "doc_id", "n", "text"],
}


def _guard(fn: Any) -> Any:
    async def handler(params: dict[str, Any], ctx: Any) -> Any:
        try:
            return await fn(params, ctx)
        except ToolError:
            raise
        except OpenFunctionsError as exc:
            raise ToolError(exc.message, code=exc.code, effect_happened=getattr(exc, "effect_happened", False),
                            details=exc.details) from None

    return handler


def create_rag_tools(rag: Rag, *, prefix: str = "rag_") -> list[ToolDefinition]:
    """``rag_ingest``, ``rag_search``, ``rag_get_chunk``, ``rag_list_documents``, ``rag_delete_document``."""

    async def ingest(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        async def progress(done: int, total: int) -> None:
            if ctx is not None and hasattr(ctx, "report_progress"):
                await ctx.report_progress(done, total, f"embedded {done}/{total} chunks")

        res = await rag.ingest(p["doc_id"], p["text"], source=p.get("source"), title=p.get("title"), progress=progress)
        return res.to_dict()

    async def search(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        hits = await rag.search(p["query"], k=p.get("k", 5))
        return {"results": [{**h, "score": round(h["score"], 6)} for h in hits]}

    async def get_chunk(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return await rag.get_chunk(p["chunk_id"])

    async def list_documents(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        docs = await rag.list_documents(limit=p.get("limit", 50), after=p.get("after"))
        return {"documents": docs, "next_after": docs[-1]["doc_id"] if len(docs) == p.get("limit", 50) else None}

    async def delete_document(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"doc_id": p["doc_id"], "deleted": await rag.delete_document(p["doc_id"])}

    read = {"effect": "read", "parallel_safe": True, "idempotent": True}
    doc_id = {"type": "string", "minLength": 1, "maxLength": 512, "description": "your id for the document (no '#')"}
    return [
        define_tool(
            name=f"{prefix}ingest",
            description="Add a document (plain text) to the retrieval index, or update it. It is split into "
                        "overlapping sentence chunks and embedded; ingesting unchanged text again does nothing.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["doc_id", "text"], "properties": {
                "doc_id": doc_id, "text": {"type": "string", "minLength": 1, "maxLength": MAX_INGEST_CHARS},
                "source": {"type": "string", "maxLength": 1024, "description": "where the text came from (URL, path)"},
                "title": {"type": "string", "maxLength": 1024}}},
            output_schema={"type": "object", "required": ["doc_id", "status", "chunks", "digest"], "properties": {
                "doc_id": {"type": "string"}, "status": {"type": "string", "enum": ["added", "replaced", "unchanged"]},
                "chunks": {"type": "integer"}, "digest": {"type": "string"}}},
            handler=_guard(ingest),
            annotations={"title": "Ingest a document", "read_only_hint": False, "destructive_hint": False,
                         "idempotent_hint": True, "open_world_hint": False},
            capability={"effect": "write", "idempotent": True}, tags=("rag",),
        ),
        define_tool(
            name=f"{prefix}search",
            description="Find the passages most similar to a query (cosine similarity of embeddings), best first.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["query"], "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 4096},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_RESULTS, "default": 5}}},
            output_schema={"type": "object", "required": ["results"], "properties": {
                "results": {"type": "array", "items": _HIT}}},
            handler=_guard(search),
            annotations={"title": "Search documents", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("rag",),
        ),
        define_tool(
            name=f"{prefix}get_chunk",
            description="Read one chunk by its id (<doc_id>#<n>, as rag_search returns it); neighbours are n-1 and n+1.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["chunk_id"], "properties": {
                "chunk_id": {"type": "string", "minLength": 8, "maxLength": 520}}},
            output_schema={"type": "object", "required": ["chunk_id", "doc_id", "n", "text"], "properties": {
                **_HIT["properties"], "chunks": {"type": ["integer", "null"]}}},
            handler=_guard(get_chunk),
            annotations={"title": "Read a chunk", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("rag",),
        ),
        define_tool(
            name=f"{prefix}list_documents",
            description="List ingested documents (id, source, chunk count, digest), one page at a time.",
            input_schema={"type": "object", "additionalProperties": False, "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "after": doc_id}},
            output_schema={"type": "object", "required": ["documents", "next_after"], "properties": {
                "documents": {"type": "array", "items": {"type": "object"}}, "next_after": {"type": ["string", "null"]}}},
            handler=_guard(list_documents),
            annotations={"title": "List documents", "read_only_hint": True, "open_world_hint": False},
            capability=read, tags=("rag",),
        ),
        define_tool(
            name=f"{prefix}delete_document",
            description="Remove a document and all its chunks from the index, permanently.",
            input_schema={"type": "object", "additionalProperties": False, "required": ["doc_id"],
                          "properties": {"doc_id": doc_id}},
            output_schema={"type": "object", "required": ["doc_id", "deleted"], "properties": {
                "doc_id": {"type": "string"}, "deleted": {"type": "boolean"}}},
            handler=_guard(delete_document),
            annotations={"title": "Delete a document", "read_only_hint": False, "destructive_hint": True,
                         "idempotent_hint": True, "open_world_hint": False},
            capability={"effect": "write", "idempotent": True}, tags=("rag",),
        ),
    ]


__all__ = ["create_rag_tools"]
