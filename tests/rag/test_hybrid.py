"""Hybrid retrieval (vector + full text, fused by reciprocal rank) on both indexes, and its parts."""

from __future__ import annotations

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.rag import InvalidRagInput, LexicalEmbedder, create_rag_tools, open_rag
from openfunctions.rag._text import (
    LEXICAL_VECTOR_WEIGHT,
    RRF_K,
    Bm25,
    rrf,
    term_ids,
    terms,
    tsquery_words,
    vector_weight_for,
)

pytestmark = pytest.mark.anyio

# Chunks full of the question's common words, and one that holds its rare ones: the lexical
# embedder (no notion of word rarity) ranks the fillers first; full-text ranking does not.
FILLER = [f"How do I do the thing number {i}? I do it the way that I do it, and then I do it again, how else."
          for i in range(12)]
TARGET = "Restart pgbouncer to clear its connection pool."
QUESTION = "how do I clear the pgbouncer pool"


async def _corpus(rag) -> None:
    for i, t in enumerate(FILLER):
        await rag.ingest(f"filler{i:02d}", t)
    await rag.ingest("target", TARGET, source="ops.md")


async def test_hybrid_is_the_default_and_finds_the_rare_words(rag_where):
    rag = await open_rag(**rag_where)
    try:
        await _corpus(rag)
        vector = await rag.search(QUESTION, k=5, mode="vector")
        assert "target" not in [h["doc_id"] for h in vector]  # what the lexical embedder alone returns
        hits = await rag.search(QUESTION, k=5)
        assert hits[0]["doc_id"] == "target" and hits[0]["source"] == "ops.md"
        top = hits[0]
        vector_rank = [h["doc_id"] for h in await rag.search(QUESTION, k=50, mode="vector")].index("target") + 1
        assert top["text_score"] > 0 and top["vector_score"] is not None
        # first by text; the lexical embedder's vector list counts half (rag/_text.py)
        assert rag.vector_weight == LEXICAL_VECTOR_WEIGHT == 0.5
        assert top["score"] == pytest.approx(1 / (RRF_K + 1) + 0.5 / (RRF_K + vector_rank))
        assert all(h["text_score"] is None for h in hits[1:])  # the fillers share no word with the query's rare ones
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        text = await rag.search(QUESTION, k=5, mode="text")
        assert [h["doc_id"] for h in text] == ["target"]
        assert (await rag.stats())["search_mode"] == "hybrid"
        with pytest.raises(InvalidRagInput) as bad:
            await rag.search(QUESTION, mode="semantic")
        assert bad.value.code == "rag_invalid_input" and "hybrid" in bad.value.message
        assert await rag.search("the and of", k=3, mode="text") == []  # stop words only: nothing to rank
    finally:
        await rag.aclose()


async def test_text_ranking_follows_deletes_and_replacements(rag_where):
    rag = await open_rag(**rag_where)
    try:
        await _corpus(rag)
        await rag.ingest("target", "Nothing about poolers here any more.")
        assert await rag.search("pgbouncer", k=3, mode="text") == []
        await rag.ingest("other", "pgbouncer sits in front of PostgreSQL.")
        assert [h["doc_id"] for h in await rag.search("pgbouncer", k=3, mode="text")] == ["other"]
        await rag.delete_document("other")
        assert await rag.search("pgbouncer", k=3, mode="text") == []
    finally:
        await rag.aclose()


async def test_an_index_reopened_ranks_text_without_re_ingesting(rag_where):
    rag = await open_rag(**rag_where)
    await _corpus(rag)
    await rag.aclose()
    again = await open_rag(**rag_where)
    try:
        assert (await again.search(QUESTION, k=1))[0]["doc_id"] == "target"
    finally:
        await again.aclose()


async def test_pgvector_table_made_before_hybrid_search_is_migrated_on_open(pg_dsn):
    import psycopg

    from tests._pg import unique_name

    name = unique_name("h").lower()
    rag = await open_rag(url=pg_dsn, name=name)
    await _corpus(rag)
    await rag.aclose()
    table = f"of_rag_chunks_{name}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the table as it was before: no tsv, no GIN index
        conn.execute(f"DROP INDEX {table}_fts")
        conn.execute(f"ALTER TABLE {table} DROP COLUMN tsv")
    old = await open_rag(url=pg_dsn, name=name)
    try:
        assert [h["doc_id"] for h in await old.search(QUESTION, k=1, mode="text")] == ["target"]
    finally:
        await old.aclose()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", (f"{table}_fts",)).fetchone()[0] == 1


async def test_rag_search_tool_takes_a_mode_and_reports_both_scores(tmp_path):
    rag = await open_rag(data_dir=tmp_path)
    try:
        await _corpus(rag)
        reg = ToolRegistry(create_rag_tools(rag))
        got = await reg.execute("rag_search", {"query": QUESTION, "k": 2})
        assert got["results"][0]["doc_id"] == "target" and "vector_score" in got["results"][0]
        vec = await reg.execute("rag_search", {"query": QUESTION, "k": 2, "mode": "vector"})
        assert vec["results"][0]["doc_id"] != "target" and "text_score" not in vec["results"][0]
        bad = await reg.execute_detailed("rag_search", {"query": QUESTION, "mode": "fuzzy"})
        assert bad.error is not None
    finally:
        await rag.aclose()


def test_bm25_weighs_a_rare_word_over_a_common_one():
    rows = [term_ids("the server starts"), term_ids("the server stops"), term_ids("the server restarts pgbouncer")]
    top = Bm25(rows).top("server pgbouncer", 3)
    assert top[0][0] == 2 and len(top) == 3
    assert Bm25(rows).top("unrelated", 3) == [] and Bm25([]).top("x", 3) == []


def test_terms_drop_stop_words_and_share_a_stem():
    assert terms("How does it rotate?") == terms("rotates") == terms("rotating") == ["rotat"]
    assert terms("queries") == terms("query") and terms("class") == terms("classes")


def test_rrf_fuses_by_rank_and_reports_the_parts():
    fused = rrf([("a", 0.9), ("b", 0.8)], [("b", 5.0), ("c", 4.0)], 3)
    assert [f[0] for f in fused] == ["b", "a", "c"]
    assert fused[0] == ("b", pytest.approx(1 / 62 + 1 / 61), 0.8, 5.0)
    assert fused[1][3] is None and fused[2][2] is None


def test_rrf_weights_the_vector_list_and_lexical_embedders_get_half():
    fused = rrf([("a", 0.9)], [("b", 5.0)], 2, vector_weight=0.5)
    assert [f[0] for f in fused] == ["b", "a"] and fused[1][1] == pytest.approx(0.5 / 61)
    assert vector_weight_for(LexicalEmbedder()) == 0.5 and vector_weight_for(LexicalEmbedder(version=1)) == 0.5

    class Model:
        name, dimension = "all-MiniLM-L6-v2", 384

    assert vector_weight_for(Model()) == 1.0


def test_tsquery_words_let_no_operator_through():
    assert tsquery_words("a & b | !c ('d'):* <-> e_f") == "a | b | c | d | e | f"
    assert tsquery_words("!!! ???") == ""


async def test_embedded_search_in_a_worker_thread_is_not_torn_by_writes(tmp_path):
    """Searches build and rank over a snapshot; writes landing meanwhile are seen by the next search."""
    import anyio

    rag = await open_rag(data_dir=tmp_path)
    rag.index.THREAD_ABOVE = 0  # every search builds and ranks in a worker thread, as past 20,000 chunks
    try:
        await _corpus(rag)
        errors: list[BaseException] = []

        async def write(i: int) -> None:
            await rag.ingest(f"extra{i % 3}", f"pgbouncer note {i}: " + " ".join(f"word{j}" for j in range(i, i + 40)))
            if i % 4 == 0:
                await rag.delete_document(f"extra{(i + 1) % 3}")

        async def search() -> None:
            try:
                for h in await rag.search(QUESTION, k=10):
                    assert h["text"]
            except BaseException as exc:  # noqa: BLE001 - collected and reported below
                errors.append(exc)

        for i in range(40):
            async with anyio.create_task_group() as tg:
                tg.start_soon(search)
                tg.start_soon(write, i)
                tg.start_soon(search)
        assert errors == []
        last = await rag.search("pgbouncer note 39", k=3, mode="text")
        assert last[0]["doc_id"] == "extra0" and "note 39" in last[0]["text"]  # the last write is seen
    finally:
        await rag.aclose()


async def test_the_served_profile_weighs_the_lexical_vector_list_like_open_rag(tmp_path):
    # The served 'rag' profile builds its Rag before the index (and embedder) opens, then
    # attaches both in start(): the weight must follow the embedder it gets, not the None it began with.
    from openfunctions.rag import build_rag_profile

    profile = build_rag_profile(data_dir=tmp_path)
    await profile.start()
    try:
        rag = profile.rag
        await _corpus(rag)
        vector_rank = [h["doc_id"] for h in await rag.search(QUESTION, k=50, mode="vector")].index("target") + 1
        (top, *_) = await rag.search(QUESTION, k=5)
        assert top["doc_id"] == "target"
        assert top["score"] == pytest.approx(1 / (RRF_K + 1) + LEXICAL_VECTOR_WEIGHT / (RRF_K + vector_rank))
    finally:
        await profile.aclose()
