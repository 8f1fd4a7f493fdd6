"""What ``openfunctions-mcp demo`` shows of memory and RAG: a fact saved and found, a document
ingested and searched, each through the MCP client of a real server (the embedded default)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

RECEIPT_KEY = "dev.openfunctions/receipt"


async def demo_session(client: Any, say: Callable[[str], None]) -> None:
    """Drive the memory_* and rag_* tools the server lists (``client``: a connected MCP client)."""
    names = {t.name for t in (await client.list_tools()).tools}

    async def call(name: str, args: dict[str, Any], show: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        result = await client.call_tool(name, args)
        receipt = (result.meta or {}).get(RECEIPT_KEY, {})
        payload = result.structured_content or {}
        shown = show(payload) if not result.is_error else {"isError": True, "message": result.content[0].text}
        args_text = json.dumps(args)
        args_text = args_text if len(args_text) <= 60 else args_text[:57] + "..."
        say(f"  {name:<17} {args_text:<61} -> {json.dumps(shown)}  [receipt: {receipt.get('outcome')}]")
        return payload

    if "memory_save_fact" in names:
        say("\nmemory (facts kept in the data dir's store):")
        await call("memory_save_fact", {"text": "The demo user prefers green tea", "source": "demo"},
                   lambda p: {"id": p["id"]})
        await call("memory_search", {"query": "what tea does the user like?"},
                   lambda p: [{"text": r["text"], "score": r["score"]} for r in p["results"][:1]])
    if "rag_search" in names:
        say("\nRAG (embedded index, hybrid search: lexical vectors + BM25; no server, no model):")
        text = ("Rotate the deploy keys every month. The signing key lives in the vault. "
                "Revoked keys are listed in the audit log.")
        await call("rag_ingest", {"doc_id": "handbook/keys.md", "text": text}, lambda p: {k: p[k] for k in ("status", "chunks")})
        await call("rag_search", {"query": "how often should keys rotate", "k": 1},
                   lambda p: [{"chunk_id": r["chunk_id"], "score": r["score"]} for r in p["results"]])


__all__ = ["demo_session"]
