"""Ingest, search and tools on both indexes (embedded and pgvector)."""

from __future__ import annotations

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.rag import (
    Chunker,
    ChunkNotFound,
    DocumentTooLarge,
    IndexMismatch,
    InvalidRagInput,
    LexicalEmbedder,
    create_rag_tools,
    open_rag,
)

pytestmark = pytest.mark.anyio

DOCS = {
    "garden.md": "Tomatoes need full sun and regular watering. Prune the suckers weekly. "
                 "Harvest when the fruit is deep red.",
    "keys.md": "Rotate the deploy keys every month. The vault stores the signing key. "
               "Revoked keys are listed in the audit log.",
    "trains.md": "The night train leaves at ten. Sleeper cabins have two berths. Tickets open ninety days ahead.",
}


class CountingEmbedder(LexicalEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts):
        self.calls += len(texts)
        return super().embed(texts)


async def test_ingest_search_and_get_chunk(rag_where):
    rag = await open_rag(**rag_where)
    try:
        for doc_id, text in DOCS.items():
            res = await rag.ingest(doc_id, text, source=f"/docs/{doc_id}")
            assert res.status == "added" and res.chunks >= 1 and res.digest.startswith("sha256:")
        hits = await rag.search("how often should deploy keys rotate", k=3)
        assert hits[0]["doc_id"] == "keys.md" and hits[0]["source"] == "/docs/keys.md"
        assert hits[0]["score"] > hits[-1]["score"] or len(hits) == 1
        assert -1.0001 <= hits[-1]["score"] <= 1.0001
        chunk = await rag.get_chunk(hits[0]["chunk_id"])
        assert chunk["text"] == hits[0]["text"] and chunk["doc_id"] == "keys.md"
        with pytest.raises(ChunkNotFound):
            await rag.get_chunk("keys.md#000099")
        with pytest.raises(InvalidRagInput):
            await rag.get_chunk("no-hash-here")
        docs = await rag.list_documents()
        assert [d["doc_id"] for d in docs] == sorted(DOCS)
    finally:
        await rag.aclose()


async def test_reingest_unchanged_is_a_noop_and_changed_replaces(rag_where):
    emb = CountingEmbedder()
    rag = await open_rag(embedder=emb, chunker=Chunker(max_tokens=10, overlap=0), **rag_where)
    try:
        long_text = " ".join(f"Sentence number {i} is here." for i in range(12))
        first = await rag.ingest("doc", long_text)
        calls = emb.calls
        again = await rag.ingest("doc", long_text)
        assert again.status == "unchanged" and again.chunks == first.chunks and emb.calls == calls
        shorter = await rag.ingest("doc", "Only one sentence now.")
        assert shorter.status == "replaced" and shorter.chunks == 1
        with pytest.raises(ChunkNotFound):
            await rag.get_chunk("doc#000001")  # the old tail is gone
        hits = await rag.search("sentence number", k=10)
        assert [h["chunk_id"] for h in hits] == ["doc#000000"]
    finally:
        await rag.aclose()
    reopened = await open_rag(embedder=CountingEmbedder(), chunker=Chunker(max_tokens=10, overlap=0), **rag_where)
    try:
        assert (await reopened.ingest("doc", "Only one sentence now.")).status == "unchanged"
        assert (await reopened.search("one sentence"))[0]["chunk_id"] == "doc#000000"
    finally:
        await reopened.aclose()


async def test_oversized_document_refused_before_write(rag_where):
    rag = await open_rag(max_document_bytes=1000, **rag_where)
    try:
        with pytest.raises(DocumentTooLarge) as info:
            await rag.ingest("big", "word. " * 500)
        assert "1000" in info.value.message
        assert await rag.list_documents() == []
    finally:
        await rag.aclose()


async def test_hostile_ids_and_texts(rag_where):
    rag = await open_rag(**rag_where)
    try:
        evil = "x'); DROP TABLE of_rag_docs; --"
        text = "Robert'); DROP TABLE of_store_entries;-- the quartz clock ticks. $1 %s {0}"
        await rag.ingest(evil, text, source="'; --", title="t\"itle")
        hits = await rag.search("quartz clock")
        assert hits[0]["doc_id"] == evil and hits[0]["text"] == text and hits[0]["source"] == "'; --"
        for bad in ["a#b", "", " lead", "nul\x00", "x" * 600]:
            with pytest.raises(InvalidRagInput):
                await rag.ingest(bad, "text.")
        assert await rag.delete_document(evil) is True
        assert await rag.search("quartz clock") == []
    finally:
        await rag.aclose()


async def test_dimension_mismatch_refused_at_open_naming_both(rag_where):
    rag = await open_rag(embedder="lexical", **rag_where)
    await rag.ingest("d", "Some text.")
    await rag.aclose()
    with pytest.raises(IndexMismatch) as info:
        await open_rag(embedder="lexical:128", **rag_where)
    msg = info.value.message
    assert "lexical-v2-512" in msg and "512 dimensions" in msg and "lexical-v2-128" in msg and "128 dimensions" in msg
    with pytest.raises(IndexMismatch) as info:  # same dimension, another version: refused too, naming both
        await open_rag(embedder="lexical-v1:512", **rag_where)
    assert "lexical-v2-512" in info.value.message and "lexical-v1-512" in info.value.message
    again = await open_rag(embedder="lexical", **rag_where)  # the right one still opens
    assert (await again.search("some text"))[0]["doc_id"] == "d"
    await again.aclose()


async def test_an_index_built_by_lexical_v1_keeps_opening_without_an_embedder(rag_where):
    """v2 became the default; an index built by v1 (any dimension) opens with v1 when no embedder
    is named, and its new documents are embedded by v1 too. Naming another embedder is refused."""
    old = await open_rag(embedder="lexical-v1", **rag_where)
    await old.ingest("old", "Obsidian is volcanic glass.")
    await old.aclose()
    rag = await open_rag(**rag_where)
    try:
        assert rag.embedder.name == "lexical-v1-256"
        await rag.ingest("new", "Bees dance to show where the flowers are.")
        assert (await rag.search("volcanic glass", k=1))[0]["doc_id"] == "old"
        assert (await rag.search("where are the flowers", k=1))[0]["doc_id"] == "new"
    finally:
        await rag.aclose()
    with pytest.raises(IndexMismatch) as info:
        await open_rag(embedder="lexical", **rag_where)
    assert "lexical-v1-256" in info.value.message and "lexical-v2-512" in info.value.message
    fresh = await open_rag(**{**rag_where, "name": rag_where["name"] + "2"})  # a new index: the current default
    try:
        assert fresh.embedder.name == "lexical-v2-512"
    finally:
        await fresh.aclose()


async def test_rag_tools_through_the_registry(rag_where):
    rag = await open_rag(**rag_where)
    try:
        reg = ToolRegistry(create_rag_tools(rag))
        assert {"rag_ingest", "rag_search", "rag_get_chunk"} <= {t.name for t in reg.list()}
        assert reg.get("rag_search").annotations.read_only_hint is True
        assert reg.get("rag_delete_document").annotations.destructive_hint is True
        r = await reg.execute_detailed("rag_ingest", {"doc_id": "trains", "text": DOCS["trains.md"]})
        assert r.error is None and r.value["status"] == "added" and r.receipt.outcome == "succeeded"
        r2 = await reg.execute("rag_ingest", {"doc_id": "trains", "text": DOCS["trains.md"]})
        assert r2["status"] == "unchanged"
        found = await reg.execute("rag_search", {"query": "sleeper cabins berths", "k": 2})
        cid = found["results"][0]["chunk_id"]
        assert (await reg.execute("rag_get_chunk", {"chunk_id": cid}))["doc_id"] == "trains"
        too_many = await reg.execute_detailed("rag_search", {"query": "x", "k": 500})
        assert too_many.error is not None and too_many.receipt.outcome == "rejected"
        bad = await reg.execute_detailed("rag_ingest", {"doc_id": "a#b", "text": "x."})
        assert bad.error.code == "rag_invalid_input" and bad.receipt.certainty == "known"
    finally:
        await rag.aclose()


async def test_large_replies_spill_to_an_artifact_or_are_cut_to_the_budget(tmp_path):
    import base64
    import json

    from openfunctions.artifacts import ArtifactStore

    rag = await open_rag(data_dir=tmp_path / "data", name="big")
    artifacts = ArtifactStore(tmp_path / "artifacts")
    try:
        # 10 chunks of 100 words of 400 characters each: ~40 KB per chunk
        blobs = [f"blob{i} " + " ".join(["x" * 400] * 100) for i in range(10)]
        await rag.ingest("big", ". ".join(blobs) + ".")
        await rag.ingest("small", "A small note about trains.")
        reg = ToolRegistry(create_rag_tools(rag, artifacts=artifacts))
        assert reg.get("rag_artifact_read").annotations.read_only_hint is True

        hit = await reg.execute("rag_get_chunk", {"chunk_id": "big#000003"})
        assert hit["text_truncated"] is True and len(hit["text"]) < 40_000
        proj = hit["artifactProjection"]
        assert proj["available"] is True and proj["size"] > 40_000
        got, offset = b"", 0
        while offset < proj["size"]:
            page = await reg.execute("rag_artifact_read", {"artifact_id": proj["artifact_id"], "offset": offset})
            got += base64.b64decode(page["data_base64"])
            offset = len(got)
        full = json.loads(got)
        assert full["text"] == (await rag.get_chunk("big#000003"))["text"] and len(full["text"]) > 40_000

        found = await reg.execute("rag_search", {"query": "blob3 xxxx", "k": 5})
        assert "artifactProjection" in found and all(len(h["text"]) <= 500 for h in found["results"])
        small = await reg.execute("rag_get_chunk", {"chunk_id": "small#000000"})  # a small reply: as is
        assert "artifactProjection" not in small and "text_truncated" not in small

        # without an artifact store the texts are cut to the budget and marked
        plain = ToolRegistry(create_rag_tools(rag, budget=8192))
        cut = await plain.execute("rag_search", {"query": "blob3 xxxx", "k": 5})
        assert len(json.dumps(cut, indent=2)) <= 8192 and all(h.get("text_truncated") for h in cut["results"])
    finally:
        artifacts.close()
        await rag.aclose()
