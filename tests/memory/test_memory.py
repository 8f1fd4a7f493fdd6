"""Conversation and fact memory on both stores, in Python and through the registry."""

from __future__ import annotations

import asyncio

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.memory import FactNotFound, InvalidMemoryInput, Memory, build_memory_profile, create_memory_tools
from openfunctions.store import LexicalEmbedder

pytestmark = pytest.mark.anyio


async def test_thread_pages_newest_first(memory_store):
    m = Memory(memory_store)
    for i in range(1, 26):
        await m.append_message("t-1", "user" if i % 2 else "assistant", f"message {i}")
    page = await m.get_thread("t-1", limit=10)
    assert [x.n for x in page.messages] == list(range(25, 15, -1))
    assert page.total == 25 and page.next_before == 16
    seen = [x.n for x in page.messages]
    while page.next_before is not None:
        page = await m.get_thread("t-1", limit=10, before=page.next_before)
        seen += [x.n for x in page.messages]
    assert seen == list(range(25, 0, -1))
    assert (await m.get_thread("t-1", limit=1)).messages[0].content == "message 25"
    empty = await m.get_thread("never-used")
    assert empty.messages == [] and empty.total == 0 and empty.next_before is None


async def test_concurrent_appends_get_distinct_numbers(memory_store):
    m = Memory(memory_store)
    msgs = await asyncio.gather(*(m.append_message("race", "user", f"m{i}") for i in range(20)))
    assert sorted(x.n for x in msgs) == list(range(1, 21))
    page = await m.get_thread("race", limit=100)
    assert sorted(x.content for x in page.messages) == sorted(f"m{i}" for i in range(20))
    assert page.total == 20


async def test_thread_reads_are_bounded_by_bytes(memory_store):
    m = Memory(memory_store)
    for _i in range(6):
        await m.append_message("big", "user", "x" * 30_000)
    page = await m.get_thread("big", limit=100, budget_bytes=100_000)
    assert 1 <= len(page.messages) < 6 and page.next_before is not None


async def test_threads_listed_and_deleted(memory_store):
    m = Memory(memory_store)
    await m.append_message("a", "user", "1")
    await m.append_message("a.b", "user", "2")
    await m.append_message("b", "user", "3")
    await m.append_message("b", "assistant", "4")
    threads = await m.list_threads()
    assert [(t["thread_id"], t["count"]) for t in threads] == [("a", 1), ("a.b", 1), ("b", 2)]
    assert await m.delete_thread("b") == 2
    assert [t["thread_id"] for t in await m.list_threads()] == ["a", "a.b"]
    assert (await m.get_thread("b")).messages == []


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "'; DROP TABLE of_store_entries; --", "x" * 129, " lead", 7])
async def test_hostile_thread_ids_refused(memory_store, bad):
    m = Memory(memory_store)
    with pytest.raises(InvalidMemoryInput):
        await m.append_message(bad, "user", "hi")
    with pytest.raises(InvalidMemoryInput):
        await m.get_thread(bad)


async def test_hostile_text_is_stored_verbatim(memory_store):
    m = Memory(memory_store)
    text = "Robert'); DROP TABLE of_store_entries;-- \u0000 %s {0}"
    f = await m.save_fact(text, source="x'--")
    assert (await m.get_fact(f.id)).text == text
    mode, hits = await m.search("Robert DROP")
    assert mode == "text" and hits[0].fact.id == f.id


async def test_facts_search_by_text_and_forget(memory_store):
    m = Memory(memory_store)
    a = await m.save_fact("The staging database password rotates every month", source="ops wiki", tags=["ops"])
    b = await m.save_fact("Alice prefers tea over coffee", source="chat 2026-11-30")
    await m.save_fact("The office is closed on Fridays")
    assert a.source == "ops wiki" and a.at.endswith("Z")
    mode, hits = await m.search("when does the database password rotate?")
    assert mode == "text" and hits[0].fact.id == a.id and hits[0].score > 0
    assert all(h.fact.id != b.id for h in hits)
    assert (await m.search("tea"))[1][0].fact.id == b.id
    assert await m.forget(a.id) is True
    assert await m.forget(a.id) is False
    with pytest.raises(FactNotFound):
        await m.get_fact(a.id)
    assert all(h.fact.id != a.id for h in (await m.search("database password"))[1])
    with pytest.raises(InvalidMemoryInput):
        await m.forget("../../etc")
    facts = await m.list_facts()
    assert [f.text for f in facts][0] == "The office is closed on Fridays"  # newest first


async def test_search_by_meaning_with_an_embedder(memory_store):
    m = Memory(memory_store, embedder=LexicalEmbedder())
    await m.save_fact("Invoices are due within thirty days")
    target = await m.save_fact("The cat sleeps on the red sofa")
    mode, hits = await m.search("where does the cat sleep", mode="auto")
    assert mode == "meaning" and hits[0].fact.id == target.id and 0 < hits[0].score <= 1.0001
    plain = Memory(memory_store)
    with pytest.raises(InvalidMemoryInput):
        await plain.search("cat", mode="meaning")


async def test_facts_of_an_older_lexical_embedder_stay_searchable_by_meaning(memory_store):
    """Facts saved when 'lexical' meant v1 are found by meaning after it means v2: the query is
    embedded by each lexical embedder the facts name; another embedder's facts are left out."""
    old = Memory(memory_store, embedder=LexicalEmbedder(version=1))
    cat = await old.save_fact("The cat sleeps on the red sofa")
    new = Memory(memory_store, embedder=LexicalEmbedder(version=2))
    invoices = await new.save_fact("Invoices are due within thirty days")
    await memory_store.put("fact/f_0000000000000000ffffffff",
                           {"text": "cat sofa", "source": None, "tags": [], "at": "2026-01-01T00:00:00Z",
                            "vec": [1.0, 0.0], "embedder": "some-model"})
    mode, hits = await new.search("where does the cat sleep")
    assert mode == "meaning" and [h.fact.id for h in hits] == [cat.id]
    mode, hits = await new.search("when are invoices due")
    assert [h.fact.id for h in hits] == [invoices.id]


async def test_oversized_fact_refused_before_write(memory_store):
    m = Memory(memory_store)
    with pytest.raises(InvalidMemoryInput) as info:
        await m.save_fact("x" * 9000)
    assert "limit" in info.value.message
    assert await m.list_facts() == []


async def test_memory_tools_through_the_registry(memory_store):
    m = Memory(memory_store)
    reg = ToolRegistry(create_memory_tools(m))
    names = {t.name for t in reg.list()}
    assert {"memory_save_fact", "memory_search", "memory_get_thread", "memory_forget"} <= names
    forget = reg.get("memory_forget")
    assert forget.annotations.destructive_hint is True
    assert reg.get("memory_search").annotations.read_only_hint is True
    saved = await reg.execute_detailed("memory_save_fact", {"text": "Bob's birthday is in May", "source": "Bob"})
    assert saved.error is None and saved.receipt.outcome == "succeeded"
    fid = saved.value["id"]
    assert saved.value["fact"]["id"] == fid and saved.value["fact"]["text"] == "Bob's birthday is in May"
    found = await reg.execute_detailed("memory_search", {"query": "Bob birthday"})
    assert found.value["results"][0]["id"] == fid
    bad = await reg.execute_detailed("memory_save_fact", {"text": "x" * 9000})
    assert bad.error is not None and bad.receipt.outcome == "rejected"  # the schema's maxLength
    wrong = await reg.execute_detailed("memory_get_thread", {"thread_id": "../etc"})
    assert wrong.error is not None and wrong.receipt.outcome == "rejected"
    gone = await reg.execute_detailed("memory_forget", {"id": fid})
    assert gone.value == {"id": fid, "forgotten": True}
    await reg.execute("memory_append_message", {"thread_id": "t", "role": "user", "content": "hi"})
    page = await reg.execute("memory_get_thread", {"thread_id": "t"})
    assert page["messages"][0]["content"] == "hi" and page["total"] == 1


async def test_the_role_parameter_offers_exactly_the_roles_memory_takes():
    from typing import get_args

    from openfunctions.memory._memory import ROLES
    from openfunctions.memory._tools import Role

    assert get_args(Role) == ROLES
    tool = {t.name: t for t in create_memory_tools(Memory(None))}["memory_append_message"]
    assert tool.input_schema["properties"]["role"]["enum"] == list(ROLES)


async def test_store_failure_is_a_tool_error_with_certainty(tmp_path):
    from openfunctions.store import open_local_store

    store = await open_local_store("memory", tmp_path)
    m = Memory(store)
    reg = ToolRegistry(create_memory_tools(m))
    await store.aclose()
    res = await reg.execute_detailed("memory_save_fact", {"text": "after close"})
    assert res.error is not None and res.error.code == "store_closed"
    assert res.receipt.certainty == "known"


async def test_memory_profile_builder_persists(tmp_path):
    prof = build_memory_profile(data_dir=tmp_path)
    await prof.start()
    try:
        r = await prof.registry.execute("memory_save_fact", {"text": "persist me"})
    finally:
        await prof.aclose()
    prof = build_memory_profile(data_dir=tmp_path)
    await prof.start()
    try:
        res = await prof.registry.execute("memory_search", {"query": "persist"})
        assert res["results"][0]["id"] == r["fact"]["id"]
    finally:
        await prof.aclose()
    assert (tmp_path / "store" / "memory" / "store.journal").exists()


async def test_memory_profile_joins_a_projection(tmp_path):
    base = ToolRegistry()
    view = base.project(names=[])
    prof = build_memory_profile(data_dir=tmp_path, registry=view)
    assert prof.registry.executor is base.executor
    assert "memory_search" in prof.registry


async def test_all_profile_serves_memory_and_rag_and_degrades_on_a_locked_store(tmp_path):
    from openfunctions.servers._profiles import build_profile
    from openfunctions.store import StoreLocked

    first = build_profile("all", data_dir=tmp_path)
    await first.start()
    try:
        names = {t.name for t in first.registry.list()}
        assert {"memory_save_fact", "memory_search", "rag_ingest", "rag_search", "rag_get_chunk"} <= names
        assert (await first.registry.execute("memory_save_fact", {"text": "in all"}))["fact"]["text"] == "in all"
        second = build_profile("all", data_dir=tmp_path)  # a second server on the same data dir
        await second.start()
        try:
            res = await second.registry.execute_detailed("memory_search", {"query": "all"})
            assert res.error is not None and res.error.code == "memory_not_open"
            assert "already open" in res.error.message
        finally:
            await second.aclose()
        alone = build_memory_profile(data_dir=tmp_path)  # the memory profile itself refuses to start
        with pytest.raises(StoreLocked):
            await alone.start()
    finally:
        await first.aclose()
