"""Rag.ingest_many (batched ingest) and Rag.bulk_load on both indexes."""

from __future__ import annotations

import pytest

from openfunctions.rag import Chunker, ChunkNotFound, DocumentTooLarge, InvalidRagInput, LexicalEmbedder, open_rag

pytestmark = pytest.mark.anyio


def _doc(i: int, sentences: int = 6) -> str:
    return " ".join(f"Document {i} sentence {j} talks about topic{i} and detail{j} at length here." for j in range(sentences))


async def test_ingest_many_matches_ingest_one_by_one(rag_where, tmp_path):
    rag = await open_rag(**rag_where, chunker=Chunker(max_tokens=20, overlap=5), max_document_bytes=4000)
    try:
        items = [{"doc_id": f"d{i}", "text": _doc(i), "source": f"src/{i}"} for i in range(7)]
        items.insert(3, {"doc_id": "big", "text": "x " * 3000})        # too large
        items.insert(5, {"doc_id": "d1", "text": "again"})            # the same id twice in one call
        items.append({"doc_id": "blank", "text": "   "})               # nothing to index
        items.append({"doc_id": "bad#id", "text": "x"})
        got = await rag.ingest_many(items, batch_chunks=8)           # several batches
        assert len(got) == len(items)
        assert isinstance(got[3], DocumentTooLarge) and isinstance(got[5], InvalidRagInput)
        assert isinstance(got[-2], InvalidRagInput) and isinstance(got[-1], InvalidRagInput)
        ok = [r for r in got if not isinstance(r, Exception)]
        assert [r.doc_id for r in ok] == [f"d{i}" for i in range(7)] and {r.status for r in ok} == {"added"}
        # the same chunks as ingest() makes
        single = await open_rag(data_dir=tmp_path / "single", chunker=Chunker(max_tokens=20, overlap=5))
        try:
            ref = await single.ingest("d4", _doc(4), source="src/4")
            assert ok[4].chunks == ref.chunks and ok[4].digest == ref.digest
            for n in range(ref.chunks):
                a, b = await rag.get_chunk(f"d4#{n:06d}"), await single.get_chunk(f"d4#{n:06d}")
                assert a["text"] == b["text"] and a["source"] == "src/4"
        finally:
            await single.aclose()
        hits = await rag.search("topic5 detail2", k=1)
        assert hits[0]["doc_id"] == "d5"
        # again: unchanged skipped, a shrunk document replaced and its extra chunks gone
        again = await rag.ingest_many([{"doc_id": "d0", "text": _doc(0), "source": "src/0"},
                                       {"doc_id": "d6", "text": _doc(6, sentences=1), "source": "src/6"}])
        assert [(r.doc_id, r.status) for r in again] == [("d0", "unchanged"), ("d6", "replaced")]
        assert again[1].chunks < ok[6].chunks
        assert (await rag.list_documents(limit=100))[-1]["chunks"] == again[1].chunks
        with pytest.raises(ChunkNotFound):
            await rag.get_chunk(f"d6#{ok[6].chunks - 1:06d}")
    finally:
        await rag.aclose()


class FailingEmbedder(LexicalEmbedder):
    def __init__(self, fail_after: int) -> None:
        super().__init__()
        self.left = fail_after

    def embed(self, texts):
        self.left -= len(texts)
        if self.left < 0:
            raise InvalidRagInput("the embedder gave up")
        return super().embed(texts)


async def test_an_embedder_error_surfaces_as_itself_and_earlier_batches_stay(tmp_path):
    rag = await open_rag(data_dir=tmp_path, embedder=FailingEmbedder(fail_after=70),
                         chunker=Chunker(max_tokens=20, overlap=5))
    try:
        items = [{"doc_id": f"d{i}", "text": _doc(i)} for i in range(40)]
        with pytest.raises(InvalidRagInput, match="gave up"):
            await rag.ingest_many(items, batch_chunks=32)
        kept = await rag.list_documents(limit=100)
        assert 0 < len(kept) < 40  # whole batches before the failure are in, nothing after
    finally:
        await rag.aclose()


async def test_bulk_load_drops_and_rebuilds_the_search_indexes(pg_dsn):
    import psycopg

    from tests._pg import unique_name

    name = unique_name("b").lower()
    rag = await open_rag(url=pg_dsn, name=name)
    table = f"of_rag_chunks_{name}"

    def indexes() -> set[str]:
        with psycopg.connect(pg_dsn) as c:
            return {r[0] for r in c.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))}

    try:
        assert {f"{table}_hnsw", f"{table}_fts"} <= indexes()
        async with rag.bulk_load(m=8, ef_construction=32):
            assert f"{table}_hnsw" not in indexes() and f"{table}_fts" not in indexes()
            await rag.ingest_many([{"doc_id": f"d{i}", "text": _doc(i)} for i in range(20)])
            assert (await rag.search("topic7 detail3", k=1))[0]["doc_id"] == "d7"  # exact scans meanwhile
        assert {f"{table}_hnsw", f"{table}_fts"} <= indexes()
        with pytest.raises(RuntimeError):
            async with rag.bulk_load():
                raise RuntimeError("the load failed")
        assert {f"{table}_hnsw", f"{table}_fts"} <= indexes()  # built again after a failed load too
        assert (await rag.search("topic7 detail3", k=1))[0]["doc_id"] == "d7"
    finally:
        await rag.aclose()


async def test_bulk_load_is_a_no_op_on_the_embedded_index(tmp_path):
    rag = await open_rag(data_dir=tmp_path)
    try:
        async with rag.bulk_load():
            await rag.ingest_many([{"doc_id": "a", "text": _doc(1)}])
        assert (await rag.search("topic1", k=1))[0]["doc_id"] == "a"
    finally:
        await rag.aclose()
