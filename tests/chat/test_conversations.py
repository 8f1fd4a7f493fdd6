"""The issued conversations' durable table (chat/_conversations.py): one fold live and at reopen, the bound,
principals, compaction, and a file that does not fold."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.chat import ChatConfigError, ConversationNotFound, create_chat_agent
from openfunctions.chat._conversations import Conversations, log_path
from openfunctions.core.journal import read_records, segment_paths

from .test_http import served

pytestmark = pytest.mark.anyio


def shown(model: ScriptedAdapter) -> list[str]:
    return [m.content for m in model.calls[-1][0][1:]]


async def test_a_reopened_agent_continues_its_conversations_in_least_recently_used_order(tmp_path: Path) -> None:
    model = ScriptedAdapter(["one", "two", "three"])
    async with await create_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        a, b, c = [await agent.open_conversation() for _ in range(3)]
        await agent.chat("to a", conversation=a)
        await agent.chat("to b", conversation=b)
        reset_thread = await agent.reset(c)
        await agent.chat("to c", conversation=c)  # order now: a, b, c (least recently used first)
    model = ScriptedAdapter(["four", "five"])
    async with await create_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        assert (await agent.health())["conversations"] == 3
        r = await agent.chat("b again", conversation=b)
        assert r.ok and shown(model) == ["to b", "two", "b again"]
        r = await agent.chat("c again", conversation=c)
        assert r.thread_id == reset_thread and shown(model) == ["to c", "three", "c again"]
    # Reopened with room for two: the least recently used (a) goes; the bound is written down at open.
    async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, max_conversations=2) as agent:
        with pytest.raises(ConversationNotFound):
            await agent.chat("a?", conversation=a)
        assert [conv.id for conv in agent._conversations.held()] == [b, c]
    types = [r.type for r in read_records(log_path(tmp_path, "chat"))]
    # c's turn after its reset writes no "used": the reset already made it the most recently used
    assert types == ["issued"] * 3 + ["used", "used", "reset", "used", "used", "evicted"]


async def test_with_memory_off_the_table_lives_in_the_process(tmp_path: Path) -> None:
    async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent:
        conv = await agent.open_conversation()
        assert (await agent.health())["conversations_durable"] is False
    async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent:
        with pytest.raises(ConversationNotFound):
            await agent.reset(conv)
    assert not log_path(tmp_path, "chat").exists()


async def test_an_id_is_bound_to_the_principal_that_created_it(tmp_path: Path) -> None:
    model = ScriptedAdapter(["hi", "hi again", "in process"])
    async with await create_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        async with served(agent, token="s3cret") as url, \
                httpx.AsyncClient(base_url=url, timeout=30, headers={"authorization": "Bearer s3cret"}) as client:
            conv = (await client.post("/chat", json={"message": "hello"})).headers["x-conversation-id"]
            r = await client.post("/chat", json={"message": "me again", "conversation_id": conv})
            assert r.status_code == 200 and r.json()["text"] == "hi again"
        async with served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:  # no token: no principal
            for path, body in (("/chat", {"message": "me?"}), ("/reset", {})):
                r = await client.post(path, json={**body, "conversation_id": conv})
                assert r.status_code == 404 and r.json()["error"]["code"] == "chat_conversation_not_found", r.text
        assert (await agent.chat("trusted caller", conversation=conv)).text == "in process"  # in-process: not checked
    assert len(model.calls) == 3


async def test_compaction_keeps_the_table_and_a_crash_in_the_middle_of_one_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chat" / "t.conversations.journal"
    table = await Conversations.open(path, 50, agent="t")
    ids = [(await table.issue("p")).id for _ in range(300)]  # past max(4 x 50, 256) records: compacted
    kept = [(c.id, c.thread_id) for c in table.held()]
    assert [i for i, _ in kept] == ids[-50:] and segment_paths(path) == []
    assert [r.type for r in read_records(path)][0] == "snapshot"
    await table.close()
    # A compaction that stopped after its rotate: the segment holds everything, the new file nothing yet.
    os.rename(path, f"{path}.seg-000001")
    table = await Conversations.open(path, 50, agent="t")
    assert [(c.id, c.thread_id) for c in table.held()] == kept and table.get(ids[-1], principal="p").id == ids[-1]
    with pytest.raises(ConversationNotFound):
        table.get(ids[-1], principal="someone else")
    await table.close()


async def test_a_record_that_does_not_fold_is_a_clear_error_naming_the_file(tmp_path: Path) -> None:
    path = log_path(tmp_path, "chat")
    table = await Conversations.open(path, 5, agent="chat")
    await table._log.append("issued", {"id": "not-a-conversation", "thread_id": "t"})  # type: ignore[union-attr]
    await table.close()
    with pytest.raises(ChatConfigError, match=r"conversation table .*chat\.conversations\.journal.*record 1 \('issued'\)"):
        await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path)
    assert json.loads(path.read_text().splitlines()[1])  # nothing rewritten


def test_an_agent_name_that_is_no_file_name_is_hashed() -> None:
    assert log_path(Path("/d"), "helpdesk").name == "helpdesk.conversations.journal"
    assert log_path(Path("/d"), "../x y").name.startswith("sha256-")


async def test_a_table_held_by_another_agent_is_a_clear_error(tmp_path: Path) -> None:
    from openfunctions.memory import Memory
    from openfunctions.store import create_store

    memory = Memory(await create_store("memory", tmp_path / "shared"))  # the caller's memory, shared by both
    try:
        async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory) as first:
            assert (await first.health())["conversations_durable"] is True
            with pytest.raises(ChatConfigError, match=r"conversation table .*chat\.conversations\.journal.*lock"):
                await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory)
        # once the first is closed, a second agent of that name opens it
        async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory) as second:
            assert (await second.health())["conversations_durable"] is True
    finally:
        await memory.aclose()


async def open_many(agent: Any, n: int) -> list[str]:
    """``n`` concurrent ``open_conversation`` calls; each id is checked valid at the moment it is returned."""
    got: list[str] = []

    async def open_one() -> None:
        cid = await agent.open_conversation(principal="p")
        assert agent._conversations.get(cid).id == cid
        got.append(cid)

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(open_one)
    return got


async def test_concurrent_issues_past_the_limit_each_return_the_conversation_they_issued(tmp_path: Path) -> None:
    for memory in (True, False):  # durable (each issue awaits its append) and in the process only
        async with await create_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path / str(memory), memory=memory,
                                           max_conversations=1) as agent:
            got = await open_many(agent, 20)
            assert len(set(got)) == 20  # every open returned its own id (none crashed)


async def test_concurrent_turns_without_an_id_over_http_past_the_limit_get_answers_not_500(tmp_path: Path) -> None:
    model = ScriptedAdapter(["ok"] * 10)
    async with await create_chat_agent(adapter=model, data_dir=tmp_path, max_conversations=1) as agent:
        async with served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            codes: list[int] = []

            async def one() -> None:
                codes.append((await client.post("/chat", json={"message": "hi"})).status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(one)
    assert codes == [200] * 10
