"""RAG served as tools: ingest, search and read chunks through the registry's executor.

Replies are bounded. A search returns at most 20 chunks, a listing is paged,
and a reply over ``budget`` (32 KiB of JSON, the artifacts layer's default)
does not go out whole: a chunk is usually ~180 words, but one "word" can be
long (a text without spaces is cut only at the token budget), so a chunk can
be large.

- With an artifact store (``artifacts=``; the ``rag`` profile passes
  ``<data-dir>/artifacts``), such a reply is projected
  (:func:`openfunctions.artifacts.project_reply`): a summary whose chunk texts
  are cut (``text_truncated: true``), plus ``artifactProjection`` naming the
  artifact that holds the full reply, read with ``rag_artifact_read`` (which
  sees only this layer's artifacts, scope ``rag``).
- Without one, the chunk texts are cut to fit the budget and marked
  ``text_truncated: true``; nothing is lost from the index (the full text
  stays there).

Annotations and errors come from :func:`openfunctions.store.state_tool`
(shared with the memory tools).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from openfunctions.core import ToolDefinition, ToolExecutionContext
from openfunctions.store import obj, state_tool

from ._rag import Rag

MAX_TOOL_RESULTS = 20
MAX_INGEST_CHARS = 1_000_000
REPLY_BUDGET = 32 * 1024
ARTIFACT_SCOPE = "rag"
SUMMARY_TEXT_CHARS = 500

# Parameter types of the tools (module level: the tools' schemas are derived from their signatures).
DocId = Annotated[str, Field(min_length=1, max_length=512, description="your id for the document (no '#')")]
Label = Annotated[str, Field(max_length=1024)]
Query = Annotated[str, Field(min_length=1, max_length=4096)]

_HIT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "chunk_id": {"type": "string"}, "doc_id": {"type": "string"}, "n": {"type": "integer"},
        "text": {"type": "string"}, "score": {"type": "number"}, "source": {"type": ["string", "null"]},
        "title": {"type": ["string", "null"]}, "text_truncated": {"type": "boolean"},
        "vector_score": {"type": ["number", "null"]}, "text_score": {"type": ["number", "null"]},
    },
    "required": ["chunk_id", "doc_id", "n", "text"],
}


def _rounded(hit: dict[str, Any]) -> dict[str, Any]:
    return {**hit, **{k: round(v, 6) for k in ("score", "vector_score", "text_score")
                      if isinstance(v := hit.get(k), float)}}


def _cut(hit: dict[str, Any], chars: int) -> dict[str, Any]:
    if len(hit["text"]) <= chars:
        return hit
    return {**hit, "text": hit["text"][:chars], "text_truncated": True}


def _fits(payload: Any, budget: int) -> bool:
    return len(json.dumps(payload, ensure_ascii=False, indent=2).encode("utf-8", "surrogatepass")) <= budget


def _cut_to_fit(payload: dict[str, Any], budget: int) -> dict[str, Any]:
    """Without an artifact store: the same reply with chunk texts cut until it fits ``budget``."""
    chars = max(SUMMARY_TEXT_CHARS, budget)
    while True:
        if "results" in payload:
            out = {**payload, "results": [_cut(h, chars) for h in payload["results"]]}
        else:
            out = _cut(payload, chars)
        if _fits(out, budget) or chars <= 16:
            return out
        chars //= 2


def create_rag_tools(rag: Rag, *, prefix: str = "rag_", artifacts: Any = None,
                     budget: int = REPLY_BUDGET) -> list[ToolDefinition]:
    """``rag_ingest``, ``rag_search``, ``rag_get_chunk``, ``rag_list_documents``, ``rag_delete_document``;
    with ``artifacts`` (an ArtifactStore) also ``rag_artifact_read`` for replies over ``budget``."""
    read_tool = f"{prefix}artifact_read"

    async def bounded(payload: dict[str, Any]) -> dict[str, Any]:
        if _fits(payload, budget):
            return payload
        if artifacts is None:
            return _cut_to_fit(payload, budget)
        from openfunctions.artifacts import project_reply

        def summarize(p: dict[str, Any]) -> dict[str, Any]:
            if "results" in p:
                return {"results": [_cut(h, SUMMARY_TEXT_CHARS) for h in p["results"]]}
            return _cut(p, 8 * SUMMARY_TEXT_CHARS)

        return await project_reply(payload, store=artifacts, scope=ARTIFACT_SCOPE, budget=budget,
                                   summarize=summarize, keep=("results", "chunk_id"), read_tool=read_tool)

    def out(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return obj(properties, required, closed=False)  # output schemas stay open: a reply may grow fields

    @state_tool(f"{prefix}ingest", kind="write", title="Ingest a document", tag="rag",
                output=out({"doc_id": {"type": "string"},
                            "status": {"type": "string", "enum": ["added", "replaced", "unchanged"]},
                            "chunks": {"type": "integer"}, "digest": {"type": "string"}},
                           ["doc_id", "status", "chunks", "digest"]))
    async def ingest(doc_id: DocId, text: Annotated[str, Field(min_length=1, max_length=MAX_INGEST_CHARS)],
                     source: Label | None = None, title: Label | None = None,
                     ctx: ToolExecutionContext | None = None) -> dict[str, Any]:
        """Add a document (plain text) to the retrieval index, or update it. It is split into overlapping
        sentence chunks and embedded; ingesting unchanged text again does nothing.

        Args:
            source: where the text came from (URL, path)
        """
        async def progress(done: int, total: int) -> None:
            if ctx is not None:
                await ctx.report_progress(done, total, f"embedded {done}/{total} chunks")

        res = await rag.ingest(doc_id, text, source=source, title=title, progress=progress)
        return res.to_dict()

    @state_tool(f"{prefix}search", kind="read", title="Search documents", tag="rag",
                output=out({"results": {"type": "array", "items": _HIT}}, ["results"]))
    async def search(query: Query, k: Annotated[int, Field(ge=1, le=MAX_TOOL_RESULTS)] = 5,
                     mode: Literal["hybrid", "vector", "text"] | None = None) -> dict[str, Any]:
        """Find the passages that best match a query, best first. Default mode 'hybrid': embedding
        similarity fused with full-text ranking (finds exact words such as names and flags, and related
        wording); 'vector': embeddings only; 'text': words only.

        Args:
            mode: ranking (default: the server's, hybrid)
        """
        hits = await rag.search(query, k=k, mode=mode)
        return await bounded({"results": [_rounded(h) for h in hits]})

    @state_tool(f"{prefix}get_chunk", kind="read", title="Read a chunk", tag="rag",
                output=out({**_HIT["properties"], "chunks": {"type": ["integer", "null"]}},
                           ["chunk_id", "doc_id", "n", "text"]))
    async def get_chunk(chunk_id: Annotated[str, Field(min_length=8, max_length=520)]) -> dict[str, Any]:
        """Read one chunk by its id (<doc_id>#<n>, as rag_search returns it); neighbours are n-1 and n+1."""
        return await bounded(await rag.get_chunk(chunk_id))

    @state_tool(f"{prefix}list_documents", kind="read", title="List documents", tag="rag",
                output=out({"documents": {"type": "array", "items": {"type": "object"}},
                            "next_after": {"type": ["string", "null"]}}, ["documents", "next_after"]))
    async def list_documents(limit: Annotated[int, Field(ge=1, le=200)] = 50,
                             after: DocId | None = None) -> dict[str, Any]:
        """List ingested documents (id, source, chunk count, digest), one page at a time."""
        docs = await rag.list_documents(limit=limit, after=after)
        return {"documents": docs, "next_after": docs[-1]["doc_id"] if len(docs) == limit else None}

    @state_tool(f"{prefix}delete_document", kind="destroy", title="Delete a document", tag="rag",
                output=out({"doc_id": {"type": "string"}, "deleted": {"type": "boolean"}}, ["doc_id", "deleted"]))
    async def delete_document(doc_id: DocId) -> dict[str, Any]:
        """Remove a document and all its chunks from the index, permanently."""
        return {"doc_id": doc_id, "deleted": await rag.delete_document(doc_id)}

    tools = [ingest, search, get_chunk, list_documents, delete_document]
    if artifacts is not None:
        from openfunctions.artifacts import create_artifact_read_tool

        tools.append(create_artifact_read_tool(
            artifacts, name=read_tool, allow=lambda info, ctx: info.scope == ARTIFACT_SCOPE,
            title="Read a RAG reply artifact", source="the RAG layer's large replies", tags=("rag",)))
    return tools


__all__ = ["create_rag_tools"]
