"""A conversation keeps its tool calls and results (history format 2) and replays them to the next turn's model,
whichever provider it is, across a restart; conversations written before (format 1) still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openfunctions.adapters import Message, OpenAIAdapter, ProviderPart, RetryPolicy, ScriptedAdapter, ToolCall
from openfunctions.chat import open_chat_agent
from openfunctions.chat._conversations import META_CHARS, STORED_CHARS, from_stored, stored

from .._datadirs import copy_data_dir
from ..adapters import _strict
from ..adapters._wire import Reply, WireServer

pytestmark = pytest.mark.anyio
V1 = Path(__file__).parent / "data" / "chat-v1"  # written by the chat before tool turns were kept
V1_CONVERSATION = "conv_rfwiffrkFu8qfq4McMdcrQ-RC1-zzvaX"


def _shown(model: ScriptedAdapter, call: int) -> list[tuple[str, str, list[str], str | None]]:
    """(role, content, tool call names, tool_call_id) of what call ``call`` of the model was shown, system left out."""
    return [(m.role, m.content, [c.name for c in m.tool_calls], m.tool_call_id) for m in model.calls[call][0][1:]]


@pytest.mark.parametrize("memory", [True, False])
async def test_the_next_turn_is_shown_the_tool_calls_and_results_of_the_last(tmp_path: Path, memory: bool) -> None:
    model = ScriptedAdapter([{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}]},
                             "2 + 3 = 5.", "It was 5."])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path,
                                       memory=memory) as agent:
        assert (await agent.chat("what is 2 + 3?")).ok
        assert (await agent.chat("what was the sum?")).text == "It was 5."
    shown = _shown(model, 2)
    assert shown[:4] == [("user", "what is 2 + 3?", [], None), ("assistant", "", ["add"], None),
                         ("tool", shown[2][1], [], "c1"), ("assistant", "2 + 3 = 5.", [], None)]
    assert json.loads(shown[2][1]) == {"sum": 5}
    assert shown[4] == ("user", "what was the sum?", [], None)


async def test_a_conversation_continues_after_a_restart_on_another_provider(tmp_path: Path) -> None:
    """Turn 1 (scripted model) calls a tool; the chat is closed; turn 2, in a new agent on the same data dir, goes
    to OpenAI's wire format, which refuses a tool call without its result (the strict fake)."""
    first = ScriptedAdapter([{"tool_calls": [{"id": "functions.add:0", "name": "add", "arguments": {"a": 1, "b": 1}}]},
                             "1 + 1 = 2."])
    async with await open_chat_agent(adapter=first, module="tests.chat.fixture_tools", data_dir=tmp_path) as agent:
        conversation = await agent.open_conversation()
        assert (await agent.chat("what is 1 + 1?", conversation=conversation)).ok
    server = WireServer()
    server.check = _strict.openai_pairing
    server.replies.append(Reply(body={"model": "gpt-4o-mini", "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "You asked 1 + 1."}}]}))
    gpt = OpenAIAdapter(model="gpt-4o-mini", api_key="k", base_url=server.url, retry=RetryPolicy(max_attempts=1))
    try:
        async with await open_chat_agent(adapter=gpt, module="tests.chat.fixture_tools", data_dir=tmp_path) as agent:
            reply = await agent.chat("what did I ask?", conversation=conversation)
        assert reply.ok and reply.text == "You asked 1 + 1."
        sent = server.requests[0]["json"]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
        assert sent[2]["tool_calls"][0]["id"] == "functions.add:0" and sent[3]["tool_call_id"] == "functions.add:0"
        assert json.loads(sent[3]["content"]) == {"sum": 2}
    finally:
        await gpt.aclose()
        server.close()


async def test_a_window_that_cuts_a_turn_starts_at_its_next_user_message(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, "3.", "ok"])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path,
                                       history_messages=3) as agent:
        await agent.chat("1 + 2?")
        await agent.chat("thanks")
    # the last 3 messages are the call, its result and the answer: no user message among them, so none is shown
    assert _shown(model, 2) == [("user", "thanks", [], None)]


async def test_a_conversation_written_before_tool_turns_were_kept_still_reads(tmp_path: Path) -> None:
    copy_data_dir(V1, tmp_path / "d")
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 4, "b": 4}}, "8.", "4 + 4, after 2 + 3."])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path / "d") as agent:
        assert (await agent.chat("and 4 + 4?", conversation=V1_CONVERSATION)).ok
        assert (await agent.chat("what did I ask?", conversation=V1_CONVERSATION)).ok
    assert _shown(model, 0) == [("user", "what is 2 + 3?", [], None), ("assistant", "2 + 3 = 5.", [], None),
                                ("user", "what did I ask?", [], None), ("assistant", "You asked about 2 + 3.", [], None),
                                ("user", "and 4 + 4?", [], None)]
    later = _shown(model, 2)  # format 1 and format 2 turns in one thread
    assert [r for r, *_ in later] == ["user", "assistant", "user", "assistant", "user", "assistant", "tool", "assistant",
                                      "user"]


def test_a_stored_message_is_bounded_and_reads_back() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2}, {"gemini": {"thoughtSignature": "c2ln"}})
    turn = Message.assistant("", [call], [ProviderPart("gemini", {"text": "", "thoughtSignature": "dA=="})])
    role, content, meta = stored(turn)
    assert (role, content, meta["chat"]["blank"]) == ("assistant", "(no text)", True)
    assert from_stored(role, content, meta) == turn  # calls, signatures and blocks as they were
    result = Message.tool_result(call, "r" * (STORED_CHARS + 7), is_error=True)
    back = from_stored(*stored(result))
    assert back is not None and back.is_error and back.tool_call_id == "c1"
    assert back.content.endswith("[... 7 more characters not kept]") and len(back.content) < STORED_CHARS + 60
    huge = Message.assistant("x", [ToolCall("c2", "add", {"t": "y" * META_CHARS})],
                             [ProviderPart("anthropic", {"type": "thinking", "thinking": "z" * META_CHARS, "signature": "s"})])
    _, _, meta = stored(huge)
    assert "parts" not in meta["chat"] and meta["chat"]["tool_calls"][0]["arguments"]["_not_kept"].endswith("characters")
    assert len(json.dumps(meta)) < META_CHARS
    assert from_stored("tool", "orphan", {}) is None and from_stored("assistant", "v1 text", {}) == Message.assistant("v1 text")
    assert from_stored("assistant", "x", {"chat": {"v": 2, "tool_calls": "not a list"}}) is None
