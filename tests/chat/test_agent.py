"""The chat agent as a library: turns, streaming, memory, providers, configuration errors (scripted model)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import read_runs
from openfunctions.chat import (
    PRESETS,
    ChatClosed,
    ChatConfig,
    ChatConfigError,
    InvalidMessage,
    MessageTooLarge,
    open_chat_agent,
)
from openfunctions.core.journal import read_records

from . import fixture_tools as fx

pytestmark = pytest.mark.anyio
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY",
        "OPENFUNCTIONS_PROVIDER", "OPENFUNCTIONS_MODEL")


def system_of(adapter: ScriptedAdapter, call: int = -1) -> str:
    return adapter.calls[call][0][0].content


async def test_a_turn_runs_tools_through_the_executor_and_leaves_a_run_record(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 2, "b": 3}}, "2 + 3 = 5."])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path) as agent:
        reply = await agent.chat("what is 2 + 3?")
    assert reply.ok and reply.text == "2 + 3 = 5." and reply.rounds == 2
    [call] = reply.tool_calls
    assert call["name"] == "add" and call["arguments"] == {"a": 2, "b": 3} and call["outcome"] == "succeeded"
    assert call["receipt_id"].startswith("rcpt_") and '"sum": 5' in call["content"]
    assert reply.metadata["provider"] == "scripted" and reply.metadata["receipt_id"].startswith("rcpt_")
    # The run record, folded from the run journal on disk (the agents package's format).
    run = read_runs(tmp_path)[reply.run_id]
    assert run.status == "completed" and run.agent == "chat" and run.finished["receipts"] == [call["receipt_id"]]
    assert run.rounds[0]["tool_calls"][0]["receipt_id"] == call["receipt_id"]
    # The tool's receipt is in the chat's execution journal, a child of the turn's own call.
    receipts = [r.data for r in read_records(tmp_path / "journal" / "chat.journal") if r.type == "receipt"]
    mine = next(r for r in receipts if r["receipt_id"] == call["receipt_id"])
    assert mine["parent_receipt_id"] == reply.metadata["receipt_id"] and mine["outcome"] == "succeeded"


async def test_streaming_yields_tool_call_then_tool_result_then_text_then_done(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "shout", "arguments": {"text": "hi"}}, "It says HI."])
    async with await open_chat_agent(adapter=model, registry=fx.registry, data_dir=tmp_path, memory=False) as agent:
        events = [e async for e in agent.chat("shout hi", stream=True)]
    assert [e.type for e in events] == ["tool_call", "tool_result", "text", "done"]
    call, result, text, done = events
    assert call.data["name"] == "shout" and call.data["arguments"] == {"text": "hi"}
    assert result.data["id"] == call.data["id"] and result.data["receipt_id"].startswith("rcpt_")
    assert text.data == {"text": "It says HI."}
    assert done.data["status"] == "completed" and done.data["text"] == "It says HI."
    assert done.data["tool_calls"][0]["receipt_id"] == result.data["receipt_id"]


async def test_a_stream_closed_early_cancels_the_turn_and_records_it_cancelled(tmp_path: Path) -> None:
    entered, cancelled = anyio.Event(), anyio.Event()

    slow = fx.blocking_reply(entered, cancelled)

    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 1}}, slow])
    async with await open_chat_agent(adapter=model, registry=fx.registry, data_dir=tmp_path) as agent:
        events = agent.chat("add", stream=True)
        async with contextlib.aclosing(events):
            async for event in events:
                if event.type == "tool_result":
                    break  # the reader goes away while the model is still thinking
        assert cancelled.is_set() and entered.is_set()
        [run] = [r for r in agent.runs.state.values()]
        assert run.status == "cancelled" and run.finished["error"]["code"] == "cancelled"
        # The conversation does not keep a cancelled turn; the agent still works.
        model._script.append("still here")
        reply = await agent.chat("are you there?")
        assert reply.text == "still here"
        assert [m.role for m in model.calls[-1][0]] == ["system", "user"]


async def test_memory_a_fact_saved_in_one_conversation_is_recalled_in_the_next(tmp_path: Path) -> None:
    model = ScriptedAdapter([
        {"tool": "memory_save_fact", "arguments": {"text": "The user's favourite colour is teal"}},
        "Noted: teal.",
        "Got it.",
        {"tool": "memory_search", "arguments": {"query": "favourite colour"}},
        "Your favourite colour is teal.",
    ])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        first = await agent.chat("My favourite colour is teal, remember it.")
        assert first.tool_calls[0]["outcome"] == "succeeded"
        await agent.chat("thanks")
        # Same conversation: the model is shown the earlier turns, its tool call and result included.
        shown = model.calls[-1][0][1:]
        assert [(m.role, m.content if m.role != "tool" else m.tool_call_id) for m in shown] == [
            ("user", "My favourite colour is teal, remember it."), ("assistant", ""),
            ("tool", shown[1].tool_calls[0].id), ("assistant", "Noted: teal."), ("user", "thanks")]
        old_thread = agent.thread_id
        assert await agent.reset() != old_thread
        second = await agent.chat("What is my favourite colour?")
    # A new conversation: no earlier turns, but the saved fact is in the prompt and found by the tool.
    shown = model.calls[3][0]
    assert [m.role for m in shown] == ["system", "user"]
    assert "The user's favourite colour is teal" in shown[0].content
    assert "teal" in second.tool_calls[0]["content"] and second.text == "Your favourite colour is teal."
    # A new agent on the same data dir (a restart) still has the fact and can continue the old thread.
    model2 = ScriptedAdapter(["Teal, as you said."])
    async with await open_chat_agent(adapter=model2, data_dir=tmp_path, thread_id=old_thread) as agent2:
        await agent2.chat("remind me of my colour")
    shown = model2.calls[0][0][1:5]
    assert [m.content for m in shown[:1] + shown[3:]] == ["My favourite colour is teal, remember it.", "Noted: teal."]
    assert shown[1].tool_calls[0].name == "memory_save_fact" and shown[2].tool_call_id == shown[1].tool_calls[0].id


async def test_memory_off_keeps_the_conversation_in_process_and_offers_no_memory_tools(tmp_path: Path) -> None:
    model = ScriptedAdapter(["one", "two"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False, registry=fx.registry) as agent:
        await agent.chat("first")
        await agent.chat("second")
        assert agent.tool_names == ["add", "shout"]
    assert [m.content for m in model.calls[1][0][1:]] == ["first", "one", "second"]
    assert not (tmp_path / "store" / "memory").exists()
    # An odd history window never starts with the assistant (providers want a user turn first).
    model = ScriptedAdapter(["one", "two", "three"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, history_messages=3) as agent:
        for text in ("first", "second", "third"):
            await agent.chat(text)
    assert [m.content for m in model.calls[2][0][1:]] == ["second", "two", "third"]


async def test_tool_selection_tags_and_exclusions(tmp_path: Path) -> None:
    async with await open_chat_agent(adapter=ScriptedAdapter([]), module="tests.chat.fixture_tools",
                                       tags=["math"], exclude=["memory_forget"], data_dir=tmp_path) as agent:
        assert agent.tool_names == ["add", "memory_save_fact", "memory_search"]
    async with await open_chat_agent({"adapter": ScriptedAdapter(["ok"]), "tools": ["shout"], "memory": False,
                                        "registry": fx.registry, "data_dir": tmp_path}) as agent:
        assert agent.tool_names == ["shout"]
    with pytest.raises(ChatConfigError, match=r"unknown tool\(s\) \['nope'\]; available: add, shout"):
        await open_chat_agent(adapter=ScriptedAdapter([]), registry=fx.registry, tools=["nope"], data_dir=tmp_path)
    with pytest.raises(ChatConfigError, match=r"exclude= names unknown tool\(s\) \['nope'\]"):
        await open_chat_agent(adapter=ScriptedAdapter([]), registry=fx.registry, exclude=["nope"], data_dir=tmp_path)


async def test_a_tool_the_model_was_not_offered_is_refused_and_fed_back(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, "Sorry, I cannot add."])
    async with await open_chat_agent(adapter=model, registry=fx.registry, tools=["shout"], memory=False,
                                       data_dir=tmp_path) as agent:
        reply = await agent.chat("add 1 and 2")
    [call] = reply.tool_calls
    assert call["outcome"] == "not_found" and call["receipt_id"] is None and call["is_error"]
    assert "Tools available to you: shout" in model.calls[1][0][-1].content


async def test_context_providers_bring_tools_and_context(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "projects_owner", "arguments": {"project": "Apollo"}}, "Grace owns Apollo."])
    async with await open_chat_agent(adapter=model, memory=False, data_dir=tmp_path,
                                       providers=["tests.chat.fixture_tools:projects"]) as agent:
        reply = await agent.chat("who owns Apollo?")
        health = await agent.health()
    assert "## Context\n\nActive project: Apollo (owner Grace)." in system_of(model, 0)
    assert "### projects\n- projects_owner" in system_of(model, 0)
    assert reply.tool_calls[0]["receipt_id"].startswith("rcpt_") and reply.text == "Grace owns Apollo."
    assert health["status"] == "ok" and health["providers"][0]["provider"] == "projects"


async def test_a_failing_context_provider_degrades_the_context_and_never_crashes_a_turn(tmp_path: Path) -> None:
    model = ScriptedAdapter(["Fine without it."])
    async with await open_chat_agent(adapter=model, memory=False, data_dir=tmp_path,
                                       providers=[fx.projects, fx.flaky]) as agent:
        reply = await agent.chat("status?")
        health = await agent.health()
    assert reply.ok and reply.text == "Fine without it."
    assert "Active project: Apollo" in system_of(model) and "database is down" not in system_of(model)
    assert health["status"] == "degraded"
    assert {p["provider"]: p["status"] for p in health["providers"]} == {"projects": "up", "flaky": "down"}


async def test_a_provider_that_cannot_connect_is_a_clear_error_and_nothing_stays_open(tmp_path: Path) -> None:
    with pytest.raises(ChatConfigError, match=r"context provider 'unreachable' failed to connect: ConnectionRefusedError"):
        await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, providers=[fx.unreachable])
    with pytest.raises(ChatConfigError, match=r"'tests.chat.fixture_tools:nothing'.*has no attribute 'nothing'"):
        await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, providers=["tests.chat.fixture_tools:nothing"])
    with pytest.raises(ChatConfigError, match="expected a ContextProvider"):
        await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, providers=[42])
    # The failed attempts closed the memory store and journals they opened: a new agent opens them again.
    async with await open_chat_agent(adapter=ScriptedAdapter(["ok"]), data_dir=tmp_path) as agent:
        assert (await agent.chat("hi")).ok


async def test_no_provider_configured_names_the_environment_variables(tmp_path: Path, monkeypatch: Any) -> None:
    for k in KEYS:
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ChatConfigError) as err:
        await open_chat_agent(data_dir=tmp_path)
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY"):
        assert var in err.value.message
    with pytest.raises(ChatConfigError, match="provider 'openai' needs an API key: pass api_key= or set OPENAI_API_KEY"):
        await open_chat_agent(provider="openai", data_dir=tmp_path)
    with pytest.raises(ChatConfigError, match="provider 'scripted' needs its script"):
        await open_chat_agent(provider="scripted", data_dir=tmp_path)


async def test_provider_auto_detected_from_the_environment(tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip("httpx")
    for k in KEYS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    async with await open_chat_agent(data_dir=tmp_path, memory=False) as agent:
        assert (agent.adapter.provider, agent.adapter.model) == ("openai", "gpt-4o-mini")


async def test_prompts_preset_inline_markdown_file_and_structured(tmp_path: Path) -> None:
    md = tmp_path / "persona.md"
    md.write_text("# Persona\n\nYou are Marvin, a gloomy robot.\n")

    async def system(prompt: Any) -> str:
        model = ScriptedAdapter(["ok"])
        async with await open_chat_agent(adapter=model, prompt=prompt, memory=False, data_dir=tmp_path) as agent:
            await agent.chat("hi")
        return system_of(model)

    assert (await system(None)).startswith(PRESETS["assistant"])
    assert (await system("concise")).startswith(PRESETS["concise"])
    assert (await system("You are a pirate. Say arr.")).startswith("You are a pirate. Say arr.")
    assert (await system(str(md))).startswith("# Persona\n\nYou are Marvin, a gloomy robot.")
    structured = await system({"preset": "researcher", "instructions": ["Cite tools.", "Be brief."], "tone": "dry",
                               "language": "French"})
    assert structured.startswith(PRESETS["researcher"] + "\n\n- Cite tools.\n- Be brief.\n\nTone: dry.\n\nAnswer in French.")
    for bad, match in [("concsie", "unknown prompt preset 'concsie': choose one of assistant, concise"),
                       (str(tmp_path / "missing.md"), "missing.md'?: cannot read it"),
                       ({"role": "x", "colour": "red"}, r"unknown key\(s\) \['colour'\]"),
                       (42, "prompt must be a preset name")]:
        with pytest.raises(ChatConfigError, match=match):
            await open_chat_agent(adapter=ScriptedAdapter([]), prompt=bad, memory=False, data_dir=tmp_path)


async def test_config_as_dict_model_or_keywords_and_unknown_keys(tmp_path: Path) -> None:
    cfg = ChatConfig(adapter=ScriptedAdapter(["a"]), memory=False, data_dir=tmp_path, name="helper")
    async with await open_chat_agent(cfg, max_rounds=3) as agent:
        assert agent.name == "helper" and agent.config.max_rounds == 3
        assert (await agent.chat("x")).text == "a"
    with pytest.raises(ChatConfigError, match="temprature: unknown key"):
        await open_chat_agent({"adapter": ScriptedAdapter([]), "temprature": 0.2})
    with pytest.raises(ChatConfigError, match="max_rounds: Input should be greater than or equal to 1"):
        await open_chat_agent(adapter=ScriptedAdapter([]), max_rounds=0)


async def test_bad_messages_are_refused_before_anything_runs(tmp_path: Path) -> None:
    model = ScriptedAdapter([])
    agent = await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False, max_message_chars=100)
    with pytest.raises(InvalidMessage, match="message is empty"):
        await agent.chat("   ")
    with pytest.raises(InvalidMessage, match="message must be a string, got int"):
        await agent.chat(7)  # type: ignore[arg-type]
    with pytest.raises(MessageTooLarge, match="message is 101 characters; the limit is 100"):
        agent.chat("x" * 101, stream=True)
    assert model.calls == [] and agent.runs.state == {}
    await agent.destroy()
    await agent.destroy()  # idempotent
    with pytest.raises(ChatClosed):
        await agent.chat("hello")


async def test_a_model_failure_ends_the_turn_failed_with_its_error(tmp_path: Path) -> None:
    model = ScriptedAdapter([])  # exhausted at once: a provider failure
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False) as agent:
        reply = await agent.chat("hi")
        events = [e async for e in agent.chat("again", stream=True)]
    assert reply.status == "failed" and reply.error["code"] == "script_exhausted" and not reply.ok
    assert [e.type for e in events] == ["done"] and events[0].data["status"] == "failed"
    assert read_runs(tmp_path)[reply.run_id].status == "failed"


async def test_issued_conversations_are_separate_and_bounded(tmp_path: Path) -> None:
    from openfunctions.chat import ConversationNotFound, InvalidConversation

    model = ScriptedAdapter(["one", "two", "three", "four"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False, max_conversations=2) as agent:
        first, second = await agent.open_conversation(), await agent.open_conversation()
        await agent.chat("to first", conversation=first)
        reply = await agent.chat("to second", conversation=second)
        assert reply.conversation_id == second and [m.content for m in model.calls[-1][0][1:]] == ["to second"]
        await agent.chat("to the agent's own")
        assert [m.content for m in model.calls[-1][0][1:]] == ["to the agent's own"]
        await agent.chat("first again", conversation=first)  # first is now the most recently used
        assert [m.content for m in model.calls[-1][0][1:]] == ["to first", "one", "first again"]
        third = await agent.open_conversation()  # over the bound: the least recently used (second) is forgotten
        with pytest.raises(ConversationNotFound, match="is unknown here"):
            await agent.chat("hello?", conversation=second)
        with pytest.raises(ConversationNotFound):
            await agent.reset(second)
        with pytest.raises(InvalidConversation):
            agent.chat("hello?", conversation="not-an-id")
        assert third != first and (await agent.health())["conversations"] == 2
        assert len(model.calls) == 4  # the refused turns never reached the model


class _FailingSync:
    """A core journal ``FileOps`` whose next ``sync`` fails once armed (what a dying disk looks like)."""

    def __init__(self) -> None:
        from openfunctions.core.journal._fsutil import FileOps

        self.armed = False
        self._ops = FileOps()

    def write_all(self, fd: int, data: bytes) -> None:
        self._ops.write_all(fd, data)

    def sync(self, fd: int) -> None:
        import errno

        if self.armed:
            raise OSError(errno.EIO, "Input/output error (injected)")
        self._ops.sync(fd)


async def test_a_turn_whose_conversation_use_cannot_be_recorded_still_delivers_its_answer_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import openfunctions.core.records._file as record_files
    from openfunctions.core import JournalFailed
    from openfunctions.core.journal import JournalLog

    ops = _FailingSync()

    class OnAFailingDisk:  # the record streams' name for the class: in a chat agent, the conversation table's only
        @staticmethod
        async def open(path: Any, **kw: Any) -> JournalLog:
            return await JournalLog.open(path, _ops=ops, **kw)

    monkeypatch.setattr(record_files, "JournalLog", OnAFailingDisk)
    model = ScriptedAdapter(["the answer", "another answer"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        first, second = await agent.open_conversation(), await agent.open_conversation()
        ops.armed = True  # the table's journal fails at its next fsync: the "used" record of first's turn
        reply = await agent.chat("hello", conversation=first)
        assert reply.ok and reply.text == "the answer" and reply.conversation_id == first
        [warning] = reply.warnings
        assert warning["code"] == "chat_conversation_use_not_recorded" and warning["cause"] == "journal_failed"
        assert "Input/output error" in warning["message"]
        assert reply.to_dict()["metadata"]["warnings"] == [warning]
        # The history did get the turn (the memory store is not the failing journal): the next turn sees it.
        again = await agent.chat("and?", conversation=first)
        assert again.ok and [m.content for m in model.calls[-1][0][1:]] == ["hello", "the answer", "and?"]
        assert [w["cause"] for w in again.warnings] == ["journal_failed"]  # fail-stop: refused again, said again
        with pytest.raises(JournalFailed):  # no new conversation until the chat is restarted
            await agent.open_conversation()
    ops.armed = False
    async with await open_chat_agent(adapter=ScriptedAdapter(["after the restart"]), data_dir=tmp_path) as agent:
        assert (await agent.chat("still here?", conversation=first)).ok  # the issued conversations survived
        assert [c.id for c in agent._conversations.held()] == [second, first]


async def test_a_compaction_that_fails_mid_rotate_neither_fails_the_turn_nor_loses_a_conversation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import openfunctions.core.journal._log as journal_log
    from openfunctions.core import JournalFailed

    model = ScriptedAdapter(["the answer"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        first, second = await agent.open_conversation(), await agent.open_conversation()
        agent._conversations._records = 10_000  # the next change compacts (as after 4 x max_conversations records)

        def dir_fsync_fails(path: Any) -> None:  # the rotate's rename happened; syncing its directory fails
            raise OSError(errno.EIO, "Input/output error (injected)")

        monkeypatch.setattr(journal_log, "fsync_dir", dir_fsync_fails)
        reply = await agent.chat("hello", conversation=first)  # its "used" record is durable, then the compaction
        monkeypatch.undo()
        assert reply.ok and reply.text == "the answer" and reply.warnings == []
        with pytest.raises(JournalFailed, match="its compaction failed .*Input/output error"):
            await agent.open_conversation()  # the half-switched file takes nothing more until a restart
        with pytest.raises(JournalFailed, match="its compaction failed"):
            await agent.reset(second)
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path) as agent:
        assert [c.id for c in agent._conversations.held()] == [second, first]  # the segment folded: nothing lost


async def test_lone_surrogates_in_a_message_or_a_reply_do_not_poison_the_journals(tmp_path: Path) -> None:
    """A client's message and a model's reply each carry a lone surrogate: both turns complete with U+FFFD in
    its place, the memory thread keeps them, and a later turn in the same process still works."""
    from openfunctions.adapters import ChatReply

    model = ScriptedAdapter([ChatReply(text="echo \udc80"), "still fine"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent:
        first = await agent.chat("hello \ud800 there")
        second = await agent.chat("and now?")
        assert [m.content for m in model.calls[-1][0][1:]] == ["hello \ufffd there", "echo \ufffd", "and now?"]
    assert first.ok and first.text == "echo \ufffd", first.error
    assert second.ok and second.text == "still fine", second.error
    runs = read_runs(tmp_path)
    assert runs[first.run_id].started["task"] == "hello \ufffd there" and runs[second.run_id].status == "completed"
