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
from openfunctions.chat import ChatConfigError, ConversationNotFound, open_chat_agent
from openfunctions.chat._conversations import Conversations, log_path
from openfunctions.core.journal import read_records, segment_paths

from .test_http import served

pytestmark = pytest.mark.anyio


def shown(model: ScriptedAdapter) -> list[str]:
    return [m.content for m in model.calls[-1][0][1:]]


async def test_a_reopened_agent_continues_its_conversations_in_least_recently_used_order(tmp_path: Path) -> None:
    model = ScriptedAdapter(["one", "two", "three"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        a, b, c = [await agent.open_conversation() for _ in range(3)]
        await agent.chat("to a", conversation=a)
        await agent.chat("to b", conversation=b)
        reset_thread = await agent.reset(c)
        await agent.chat("to c", conversation=c)  # order now: a, b, c (least recently used first)
    model = ScriptedAdapter(["four", "five"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        assert (await agent.health())["conversations"] == 3
        r = await agent.chat("b again", conversation=b)
        assert r.ok and shown(model) == ["to b", "two", "b again"]
        r = await agent.chat("c again", conversation=c)
        assert r.thread_id == reset_thread and shown(model) == ["to c", "three", "c again"]
    # Reopened with room for two: the least recently used (a) goes; the bound is written down at open.
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, max_conversations=2) as agent:
        with pytest.raises(ConversationNotFound):
            await agent.chat("a?", conversation=a)
        assert [conv.id for conv in agent._conversations.held()] == [b, c]
    types = [r.type for r in read_records(log_path(tmp_path, "chat"))]
    # c's turn after its reset writes no "used": the reset already made it the most recently used
    assert types == ["issued"] * 3 + ["used", "used", "reset", "used", "used", "evicted"]


async def test_with_memory_off_the_table_lives_in_the_process(tmp_path: Path) -> None:
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent:
        conv = await agent.open_conversation()
        assert (await agent.health())["conversations_durable"] is False
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent:
        with pytest.raises(ConversationNotFound):
            await agent.reset(conv)
    assert not log_path(tmp_path, "chat").exists()


async def test_an_id_is_bound_to_the_principal_that_created_it(tmp_path: Path) -> None:
    model = ScriptedAdapter(["hi", "hi again", "in process"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
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
        await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path)
    assert json.loads(path.read_text().splitlines()[1])  # nothing rewritten


def test_an_agent_name_that_is_no_file_name_is_hashed() -> None:
    assert log_path(Path("/d"), "helpdesk").name == "helpdesk.conversations.journal"
    assert log_path(Path("/d"), "../x y").name.startswith("sha256-")


async def test_a_table_held_by_another_agent_is_a_clear_error(tmp_path: Path) -> None:
    from openfunctions.memory import Memory
    from openfunctions.store import open_local_store

    memory = Memory(await open_local_store("memory", tmp_path / "shared"))  # the caller's memory, shared by both
    try:
        async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory) as first:
            assert (await first.health())["conversations_durable"] is True
            with pytest.raises(ChatConfigError, match=r"conversation table .*chat\.conversations\.journal.*lock"):
                await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory)
        # once the first is closed, a second agent of that name opens it
        async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=memory) as second:
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
        async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path / str(memory), memory=memory,
                                           max_conversations=1) as agent:
            got = await open_many(agent, 20)
            assert len(set(got)) == 20  # every open returned its own id (none crashed)
            assert len(agent._conversations) == 1 and agent._conversations.evicted == 19  # the bound held


async def test_concurrent_turns_without_an_id_over_http_past_the_limit_get_answers_not_500(tmp_path: Path) -> None:
    model = ScriptedAdapter(["ok"] * 10)
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, max_conversations=1) as agent:
        async with served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            codes: list[int] = []

            async def one() -> None:
                codes.append((await client.post("/chat", json={"message": "hi"})).status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(one)
    assert codes == [200] * 10


def rows(table: Conversations) -> list[tuple[str, str, str | None]]:
    return [(c.id, c.thread_id, c.principal) for c in table.held()]


async def test_concurrent_issues_past_the_compaction_threshold_reopen_to_the_live_table(tmp_path: Path) -> None:
    path = tmp_path / "chat" / "t.conversations.journal"
    table = await Conversations.open(path, 20, agent="t")
    for _ in range(30):  # 900 records: several compactions, each while 30 issues are in flight
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(table.issue, "p")
    live = rows(table)
    await table.close()
    table = await Conversations.open(path, 20, agent="t")
    assert rows(table) == live
    await table.close()
    assert len(live) == 20 and segment_paths(path) == []  # the bound held; no segment left behind


async def test_a_crash_between_any_two_steps_of_a_compaction_loses_nothing(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The files as a crash would leave them (copied at each step of each compaction, with 30 issues in flight)
    reopen to the table the process held at that moment."""
    import itertools
    import shutil

    import openfunctions.core.records._file as module  # the table's compaction is the core record stream's
    from openfunctions.core.journal import JournalLog

    path = tmp_path / "live" / "chat" / "t.conversations.journal"
    table = await Conversations.open(path, 20, agent="t")
    crashes: list[tuple[str, Path, list[tuple[str, str, str | None]]]] = []
    numbers = itertools.count()

    def crash_here(step: str) -> None:
        copy = tmp_path / f"crash{next(numbers)}"
        copy.mkdir(mode=0o700)
        for name in os.listdir(path.parent):
            try:
                shutil.copy2(path.parent / name, copy / name)
            except FileNotFoundError:  # deleted meanwhile: as a crash would find it
                pass
        crashes.append((step, copy / path.name, rows(table)))

    rotate, unlink = JournalLog.rotate, module._unlink

    async def rotate_then_crash(self: JournalLog, **kw: Any) -> Path:
        seg = await rotate(self, **kw)
        crash_here("after the rotate")
        return seg

    def unlink_then_crash(p: Path) -> None:  # one segment at a time, oldest first
        crash_here("after the snapshot")
        unlink(p)
        crash_here(f"after deleting {p.name}")

    monkeypatch.setattr(JournalLog, "rotate", rotate_then_crash)
    monkeypatch.setattr(module, "_unlink", unlink_then_crash)
    for _ in range(20):
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(table.issue, "p")
    await table.close()
    monkeypatch.undo()
    assert {step for step, _, _ in crashes} >= {"after the rotate", "after the snapshot"}
    for step, copy, held in crashes:
        reopened = await Conversations.open(copy, 20, agent="t")
        assert rows(reopened) == held, f"a crash {step} ({copy.parent.name}) lost conversations"
        await reopened.close()


async def test_a_change_whose_record_is_not_durable_does_not_change_the_table(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from openfunctions.core import JournalFailed

    path = tmp_path / "chat" / "t.conversations.journal"
    table = await Conversations.open(path, 2, agent="t")
    a = await table.issue("p")
    await table.issue("p")
    live, thread = rows(table), a.thread_id

    async def failing(records: Any) -> None:
        raise JournalFailed("the disk is gone (injected)")

    assert table._log is not None
    monkeypatch.setattr(table._log, "append_many", failing)
    with pytest.raises(JournalFailed):
        await table.reset(a)  # would move a to a new thread that a restart does not know
    with pytest.raises(JournalFailed):
        await table.issue("p")  # would evict a (the least recently used) from memory only
    with pytest.raises(JournalFailed):
        await table.used(a)
    assert rows(table) == live and a.thread_id == thread and table.get(a.id) is a and table.evicted == 0
    monkeypatch.undo()
    await table.close()
    reopened = await Conversations.open(path, 2, agent="t")
    assert rows(reopened) == live  # what the process served is what a restart finds
    await reopened.close()
