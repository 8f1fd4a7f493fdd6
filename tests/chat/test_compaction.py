"""``context_ceiling``: over it, a conversation's older turns are summarised by the model (the agents tier's summary
step, the engine's) and the summary is kept in the conversation, replayed after a restart with the recent turns;
a tool call is never separated from its result."""

from __future__ import annotations

from pathlib import Path

import pytest

from openfunctions.adapters import Message, RateLimited, ScriptedAdapter
from openfunctions.agents.compaction import SUMMARY_SYSTEM
from openfunctions.chat import open_chat_agent
from openfunctions.chat._conversations import SUMMARY_PREFIX, summary_through

pytestmark = pytest.mark.anyio
STORY = "once upon a time " * 240  # ~4,000 characters: turn 1 alone puts the context over the ceiling
CEILING = 900
ADD_TURN = [{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]}, "2 + 3 = 5."]


def _summary_calls(model: ScriptedAdapter) -> list[int]:
    return [i for i, (msgs, _, _) in enumerate(model.calls) if msgs[0].content == SUMMARY_SYSTEM]


def _shown(model: ScriptedAdapter, call: int) -> list[tuple[str, str, list[str], str | None]]:
    """(role, content, tool call ids, tool_call_id) of what call ``call`` was shown, its system prompt left out."""
    return [(m.role, m.content, [c.id for c in m.tool_calls], m.tool_call_id) for m in model.calls[call][0][1:]]


def _pairs_intact(messages: list[Message]) -> bool:
    """Every tool result follows the assistant message that asked for it, and every call asked for has its result."""
    asked: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        asked |= {c.id for c in m.tool_calls}
        if m.role == "tool":
            if m.tool_call_id not in asked:
                return False
            answered.add(m.tool_call_id or "")
    return asked == answered


TURN2 = [("user", "what is 2 + 3?", [], None), ("assistant", "", ["c1"], None), ("tool", '{\n  "sum": 5\n}', [], "c1"),
         ("assistant", "2 + 3 = 5.", [], None)]


@pytest.mark.parametrize("memory", [True, False])
async def test_over_the_ceiling_the_older_turns_become_one_kept_summary(tmp_path: Path, memory: bool) -> None:
    model = ScriptedAdapter([STORY, *ADD_TURN, "the user asked for a story; it was told", "Done.", "Fine."])
    summary = ("user", SUMMARY_PREFIX + "the user asked for a story; it was told", [], None)
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path,
                                       memory=memory, context_ceiling=CEILING) as agent:
        assert (await agent.chat("tell me a long story")).ok
        # over the ceiling already, but one turn is all there is: nothing to compact, no summary asked for
        assert (await agent.chat("what is 2 + 3?")).ok
        assert _summary_calls(model) == []
        reply = await agent.chat("and now?")
        assert reply.ok and reply.text == "Done." and reply.warnings == []
        assert _summary_calls(model) == [3]
        transcript = model.calls[3][0][1].content
        assert "tell me a long story" in transcript and "what is 2 + 3?" not in transcript  # the last turn is kept
        assert _shown(model, 4) == [summary, *TURN2, ("user", "and now?", [], None)]
        assert _pairs_intact(model.calls[4][0])
        thread = agent.thread_id
        if memory:
            page = await agent.memory.get_thread(thread, limit=100)
            kept = [(e.n, summary_through(e.meta)) for e in page.messages if summary_through(e.meta) is not None]
            assert kept == [(7, 2)]  # one summary, standing for turn 1 (messages 1 and 2), after turn 2's four
        else:  # the history lives in this process: the next turn, in the same agent
            assert (await agent.chat("again?")).text == "Fine."
    if memory:  # a restart: a new agent and a new model on the same data dir continue the thread
        model = ScriptedAdapter(["Fine."])
        async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path,
                                           thread_id=thread, context_ceiling=CEILING) as agent:
            assert (await agent.chat("again?")).text == "Fine."
    assert len(_summary_calls(model)) == (0 if memory else 1)  # under the ceiling now: not asked for again
    last = len(model.calls) - 1
    assert _shown(model, last) == [summary, *TURN2, ("user", "and now?", [], None), ("assistant", "Done.", [], None),
                                   ("user", "again?", [], None)]
    assert _pairs_intact(model.calls[last][0])


async def test_a_failed_summary_leaves_the_history_whole_and_says_so(tmp_path: Path) -> None:
    model = ScriptedAdapter([STORY, *ADD_TURN, RateLimited("slow down"), "Done.",
                             "the user asked for a story", "Fine."])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path,
                                       context_ceiling=CEILING) as agent:
        assert (await agent.chat("tell me a long story")).ok
        assert (await agent.chat("what is 2 + 3?")).ok
        reply = await agent.chat("and now?")
        assert reply.ok and reply.text == "Done."
        assert [(w["code"], w["cause"]) for w in reply.warnings] == [("chat_compaction_failed", RateLimited.code)]
        assert _shown(model, 4)[0] == ("user", "tell me a long story", [], None)  # the turn ran on the whole history
        page = await agent.memory.get_thread(agent.thread_id, limit=100)
        assert not any(summary_through(e.meta) is not None for e in page.messages)
        # the next turn tries again, and this time the summary is made and kept
        assert (await agent.chat("again?")).text == "Fine."
        assert _summary_calls(model) == [3, 5]
        assert _shown(model, 6)[0] == ("user", SUMMARY_PREFIX + "the user asked for a story", [], None)
        assert _pairs_intact(model.calls[6][0])
