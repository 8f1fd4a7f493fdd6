"""A run's conversation in its records (``run_messages``): rebuilt after a kill -9 mid-tool-turn and sent on,
bounded in size, and runs written before the record existed still read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.adapters import (
    NOT_RUN,
    AnthropicAdapter,
    ChatOptions,
    Message,
    OpenAIAdapter,
    ProviderPart,
    RetryPolicy,
    ScriptedAdapter,
    ToolCall,
)
from openfunctions.agents import RunJournal, define_agent, read_history, read_runs, run_agent
from openfunctions.agents import _records as R
from openfunctions.core import ToolRegistry, define_tool

from .._datadirs import copy_data_dir
from ..adapters import _strict
from ..adapters._wire import Reply, WireServer

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
V1 = REPO / "tests" / "chat" / "data" / "chat-v1"  # a data dir written before run_messages existed
THINKING = {"type": "thinking", "thinking": "Echo first, then wait.", "signature": "EqQBCkYIARgCKkB=="}
FIRST = {"model": "claude-test-1", "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 7},
         "content": [THINKING, {"type": "text", "text": "On it."},
                     {"type": "tool_use", "id": "toolu_echo", "name": "echo", "input": {"text": "Paris"}},
                     {"type": "tool_use", "id": "toolu_block", "name": "block", "input": {}}]}
ECHO = define_tool(name="echo", description="Echo a text.", handler=lambda p, c: f"echo: {p.get('text')}")
BLOCK = define_tool(name="block", description="Wait.", handler=lambda p, c: "done")


@pytest.fixture
def wire():
    server = WireServer()
    yield server
    server.close()


async def _killed_mid_tool_turn(data_dir: Path, wire: WireServer) -> str:
    """Run the child until its second tool call is running, kill -9 it, recover; returns the run id."""
    wire.replies.append(Reply(body=FIRST))
    proc = subprocess.Popen([sys.executable, "-m", "tests.agents._crash_mid_tool_turn", str(data_dir), wire.url],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with anyio.fail_after(60):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == "BLOCKED", proc.stderr.read() if proc.poll() is not None else line
    finally:
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(10)
    journal = await RunJournal.open_in(data_dir)  # recovery closes the run as interrupted
    [run_id] = journal.interrupted
    await journal.close()
    return run_id


@pytest.mark.parametrize("then", ["anthropic", "openai"])
async def test_a_run_killed_mid_tool_turn_is_rebuilt_from_its_records_and_sent_on(tmp_path: Path, wire: WireServer,
                                                                                  then: str) -> None:
    run_id = await _killed_mid_tool_turn(tmp_path, wire)
    history = read_history(tmp_path, run_id)
    assert [m.role for m in history] == ["system", "user", "assistant", "tool"]
    turn = history[2]
    assert turn.content == "On it." and [c.id for c in turn.tool_calls] == ["toolu_echo", "toolu_block"]
    assert turn.parts == (ProviderPart("anthropic", THINKING),)  # the thinking block, signature and all
    assert history[3].tool_call_id == "toolu_echo" and history[3].content == "echo: Paris"

    if then == "anthropic":  # the same provider, thinking on: its block goes back unchanged, block is "not run"
        wire.check = _strict.anthropic_pairing
        wire.replies.append(Reply(body={"model": "claude-test-1", "stop_reason": "end_turn",
                                        "content": [{"type": "text", "text": "Echoed; the wait did not finish."}]}))
        model: Any = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url,
                                      retry=RetryPolicy(max_attempts=1))
        reply = await model.chat(history, [ECHO, BLOCK], ChatOptions(thinking_budget=1024))
        body = wire.requests[-1]["json"]
        assert body["thinking"]["type"] == "enabled"  # the turn it continues is Anthropic's own, thinking first
        assert body["messages"][1]["content"][0] == THINKING
        results = [(b["tool_use_id"], b["content"]) for b in body["messages"][2]["content"]]
    else:  # moved to OpenAI mid-tool-turn: no thinking block, every call answered
        wire.check = _strict.openai_pairing
        wire.replies.append(Reply(body={"model": "gpt-4o-mini", "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "Echoed; the wait did not finish."}}]}))
        model = OpenAIAdapter(model="gpt-4o-mini", api_key="k", base_url=wire.url, retry=RetryPolicy(max_attempts=1))
        reply = await model.chat(history, [ECHO, BLOCK])
        body = wire.requests[-1]["json"]
        assert "signature" not in json.dumps(body)
        results = [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    assert reply.text == "Echoed; the wait did not finish."
    assert results == [("toolu_echo", "echo: Paris"), ("toolu_block", NOT_RUN)]
    await model.aclose()


async def test_a_finished_run_rebuilds_to_the_conversation_it_had(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    model = ScriptedAdapter([{"tool_calls": [{"name": "echo", "arguments": {"text": "a"}, "id": "c1"}]}, "done: a"])
    result = await run_agent(define_agent("a", "be brief", tools=["echo"], adapter=model), "echo a",
                             registry=ToolRegistry([ECHO]), runs=journal)
    await journal.close()
    rebuilt = read_history(tmp_path, result.run_id)
    assert rebuilt == [Message.from_dict(m.to_dict()) for m in result.messages]
    assert [m.role for m in rebuilt] == ["system", "user", "assistant", "tool", "assistant"]
    assert rebuilt[-1].content == "done: a" and rebuilt[3].content == "echo: a"
    rounds = [d["round"] for t, d in _records(tmp_path) if t == R.MESSAGES]
    assert rounds == [0, 1, 1, 2]


def _records(data_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    from openfunctions.agents._runlog import journal_files
    from openfunctions.core.journal import read_records

    return [(r.type, r.data) for p in journal_files(data_dir) for r in read_records(p)]


def test_a_record_is_bounded_and_says_what_it_left_out() -> None:
    big = "x" * (R.MESSAGE_CHARS + 500)
    huge_part = ProviderPart("anthropic", {"type": "thinking", "thinking": "t" * (R.PARTS_CHARS + 1), "signature": "s"})
    call = ToolCall("c", "echo", {"text": "y" * (R.MESSAGE_CHARS + 1)})
    rec = R.messages_(run_id="run_" + "0" * 32, n=1, messages=[
        Message.assistant(big, [call], [huge_part]), Message.tool_result(call, "ok")])
    first, second = rec["messages"]
    assert first["content"].startswith("x" * R.MESSAGE_CHARS) and first["content"].endswith("[... 500 more characters not kept]")
    assert "parts" not in first  # kept whole or not at all
    assert first["tool_calls"][0]["arguments"] == {"_not_kept": f"{R.MESSAGE_CHARS + 1 + 12} characters"}
    assert second["content"] == "ok" and rec["cut"] == 500 + R.MESSAGE_CHARS + 13 and rec["dropped"] == 0
    many = [Message.system("sys")] + [Message.user("u" * R.MESSAGE_CHARS) for _ in range(R.RECORD_CHARS // R.MESSAGE_CHARS + 5)]
    rec = R.messages_(run_id="run_" + "0" * 32, n=0, messages=many)
    assert len(json.dumps(rec["messages"])) <= R.RECORD_CHARS and rec["dropped"] > 0
    assert rec["messages"][0] == {"role": "system", "content": "sys"}  # the oldest but the first go


async def test_records_written_before_run_messages_still_read(tmp_path: Path) -> None:
    copy_data_dir(V1, tmp_path / "d")
    runs = read_runs(tmp_path / "d")
    assert len(runs) == 2 and all(r.status == "completed" for r in runs.values())
    first = min(runs.values(), key=lambda r: r.started["started_at"])
    assert first.rounds[0]["tool_calls"][0]["name"] == "add"
    assert all(read_history(tmp_path / "d", rid) == [] for rid in runs)  # nothing to rebuild from, nothing invented
    # The same journal takes new runs (with run_messages) beside the old ones.
    journal = await RunJournal.open_in(tmp_path / "d")
    result = await run_agent(define_agent("a", "x", adapter=ScriptedAdapter(["hi"])), "go", registry=ToolRegistry(),
                             runs=journal)
    await journal.close()
    assert [m.role for m in read_history(tmp_path / "d", result.run_id)] == ["system", "user", "assistant"]
    assert len(read_runs(tmp_path / "d")) == 3
