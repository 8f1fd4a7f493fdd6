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
from typing import Any

from openfunctions.core import ToolDefinition, ToolExecutionContext
from openfunctions.store import obj, state_tool

from ._rag import Rag

MAX_TOOL_RESULTS = 20
MAX_INGEST_CHARS = 1_000_000
REPLY_BUDGET = 32 * 1024
ARTIFACT_SCOPE = "rag"
SUMMARY_TEXT_CHARS = 500

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

    async def ingest(p: dict[str, Any], ctx: ToolExecutionContext | None) -> dict[str, Any]:
        async def progress(done: int, total: int) -> None:
            if ctx is not None:
                await ctx.report_progress(done, total, f"embedded {done}/{total} chunks")

        res = await rag.ingest(p["doc_id"], p["text"], source=p.get("source"), title=p.get("title"), progress=progress)
        return res.to_dict()

    async def search(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        hits = await rag.search(p["query"], k=p.get("k", 5), mode=p.get("mode"))
        return await bounded({"results": [_rounded(h) for h in hits]})

    async def get_chunk(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return await bounded(await rag.get_chunk(p["chunk_id"]))

    async def list_documents(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        docs = await rag.list_documents(limit=p.get("limit", 50), after=p.get("after"))
        return {"documents": docs, "next_after": docs[-1]["doc_id"] if len(docs) == p.get("limit", 50) else None}

    async def delete_document(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"doc_id": p["doc_id"], "deleted": await rag.delete_document(p["doc_id"])}

    doc_id = {"type": "string", "minLength": 1, "maxLength": 512, "description": "your id for the document (no '#')"}

    def out(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return obj(properties, required, closed=False)  # output schemas stay open: a reply may grow fields
    # Hand schemas rather than @tool: state_tool (shared with the memory tools) takes a schema and derives the
    # annotations, capability and error mapping from one word, so the two layers cannot drift apart.
    tools = [
        state_tool(
            f"{prefix}ingest", "Add a document (plain text) to the retrieval index, or update it. It is split into "
                               "overlapping sentence chunks and embedded; ingesting unchanged text again does nothing.",
            kind="write", title="Ingest a document", tag="rag", handler=ingest,
            input=obj({"doc_id": doc_id, "text": {"type": "string", "minLength": 1, "maxLength": MAX_INGEST_CHARS},
                       "source": {"type": "string", "maxLength": 1024, "description": "where the text came from (URL, path)"},
                       "title": {"type": "string", "maxLength": 1024}}, ["doc_id", "text"]),
            output=out({"doc_id": {"type": "string"}, "status": {"type": "string", "enum": ["added", "replaced", "unchanged"]},
                        "chunks": {"type": "integer"}, "digest": {"type": "string"}}, ["doc_id", "status", "chunks", "digest"]),
        ),
        state_tool(
            f"{prefix}search", "Find the passages that best match a query, best first. Default mode 'hybrid': "
                               "embedding similarity fused with full-text ranking (finds exact words such as names "
                               "and flags, and related wording); 'vector': embeddings only; 'text': words only.",
            kind="read", title="Search documents", tag="rag", handler=search,
            input=obj({"query": {"type": "string", "minLength": 1, "maxLength": 4096},
                       "k": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_RESULTS, "default": 5},
                       "mode": {"type": "string", "enum": ["hybrid", "vector", "text"],
                                "description": "ranking (default: the server's, hybrid)"}}, ["query"]),
            output=out({"results": {"type": "array", "items": _HIT}}, ["results"]),
        ),
        state_tool(
            f"{prefix}get_chunk", "Read one chunk by its id (<doc_id>#<n>, as rag_search returns it); neighbours are "
                                  "n-1 and n+1.",
            kind="read", title="Read a chunk", tag="rag", handler=get_chunk,
            input=obj({"chunk_id": {"type": "string", "minLength": 8, "maxLength": 520}}, ["chunk_id"]),
            output=out({**_HIT["properties"], "chunks": {"type": ["integer", "null"]}}, ["chunk_id", "doc_id", "n", "text"]),
        ),
        state_tool(
            f"{prefix}list_documents", "List ingested documents (id, source, chunk count, digest), one page at a time.",
            kind="read", title="List documents", tag="rag", handler=list_documents,
            input=obj({"limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "after": doc_id}),
            output=out({"documents": {"type": "array", "items": {"type": "object"}},
                        "next_after": {"type": ["string", "null"]}}, ["documents", "next_after"]),
        ),
        state_tool(
            f"{prefix}delete_document", "Remove a document and all its chunks from the index, permanently.",
            kind="destroy", title="Delete a document", tag="rag", handler=delete_document,
            input=obj({"doc_id": doc_id}, ["doc_id"]),
            output=out({"doc_id": {"type": "string"}, "deleted": {"type": "boolean"}}, ["doc_id", "deleted"]),
        ),
    ]
    if artifacts is not None:
        from openfunctions.artifacts import create_artifact_read_tool

        tools.append(create_artifact_read_tool(
            artifacts, name=read_tool, allow=lambda info, ctx: info.scope == ARTIFACT_SCOPE,
            title="Read a RAG reply artifact", source="the RAG layer's large replies", tags=("rag",)))
    return tools


__all__ = ["create_rag_tools"]
