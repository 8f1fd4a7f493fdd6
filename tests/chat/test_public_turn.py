"""The public ChatAgent methods the HTTP server runs on (turn, check_message, conversation_thread, closed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.chat import ChatClosed, InvalidMessage, open_chat_agent

pytestmark = pytest.mark.anyio


async def test_a_turn_with_an_event_channel_streams_into_it(tmp_path: Path) -> None:
    events: list[Any] = []

    async def on_event(event: Any) -> None:
        events.append(event)

    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, "3.", "again."])
    async with await open_chat_agent(adapter=model, module="tests.chat.fixture_tools", data_dir=tmp_path) as agent:
        conv = await agent.open_conversation(principal="alice")
        reply = await agent.turn("1 + 2?", on_event=on_event, conversation=conv)
        plain = await agent.turn("again", conversation=conv)  # no channel: unstreamed
        thread = agent.conversation_thread(conv, principal="alice")
        assert agent.check_message("ok\udc80") == "ok\ufffd"
        with pytest.raises(InvalidMessage):
            agent.check_message("   ")
        assert not agent.closed
    assert agent.closed
    assert reply.ok and reply.text == "3." and plain.ok and plain.text == "again."
    kinds = [e.type for e in events]
    assert "tool_call" in kinds and kinds[-1] == "done"
    assert isinstance(thread, str) and thread == reply.thread_id
    with pytest.raises(ChatClosed):
        await agent.turn("after close")
