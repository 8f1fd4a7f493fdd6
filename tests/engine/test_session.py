"""The session in process: compaction (manual, automatic), steering and goal as the model sees them, finish,
limits, the fold of the stream, token estimates, and bad scripts and ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openfunctions.adapters import Message
from openfunctions.core.journal import read_records
from openfunctions.engine import (
    EngineConfigError,
    Limits,
    ScriptFileAdapter,
    Session,
    SessionConfig,
    SessionCorrupt,
    SessionInvalid,
)
from openfunctions.engine._records import SUMMARY_PREFIX, SessionState, apply
from openfunctions.engine._scripted import load_script
from openfunctions.engine._session import check_session_id
from openfunctions.engine._tokens import estimate

from . import engine_tools

pytestmark = pytest.mark.anyio


class Spy(ScriptFileAdapter):
    """The scripted model, keeping what each call was shown (a fake model: it answers from its script)."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies)
        self.shown: list[list[Message]] = []

    async def chat(self, messages, tools=(), options=None):
        self.shown.append(list(messages))
        return await super().chat(messages, tools, options)


async def _run(tmp: Path, replies: list[Any], prompts: list[str], *, before=None, **config: Any):
    events: list[dict[str, Any]] = []
    adapter = Spy(replies)
    cfg = SessionConfig(adapter=adapter, data_dir=tmp, tools=engine_tools.tools, **config)
    session = await Session.open(cfg, emit=events.append)
    async with session:
        if before is not None:
            await before(session)
        for p in prompts:
            session.prompt(p)
        session.close_when_idle()
        await session.work()
    return session, adapter, events


def _types(tmp: Path, session: Session) -> list[str]:
    path = tmp / "engine" / "sessions" / f"{session.session_id}.journal"
    return [r.type for r in read_records(path) if r.type not in ("start", "receipt")]


async def test_manual_compaction_replaces_older_messages_by_the_models_summary(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_EFFECTS", str(tmp_path / "fx"))

    async def compact_after_first(session: Session) -> None:
        session.prompt("first question")
        session.request_compaction()

    session, adapter, events = await _run(
        tmp_path, ["answer one", "the user asked a first question", "answer two"], ["second question"],
        before=compact_after_first)
    compacted = next(e for e in events if e["type"] == "compacted")
    assert compacted["trigger"] == "manual" and compacted["replaced"] == 1
    assert compacted["summary"] == "the user asked a first question"
    # the summary request showed the model the transcript, and the next turn saw the summary instead
    assert "first question" in adapter.shown[1][1].content
    assert adapter.shown[2][1].content == SUMMARY_PREFIX + "the user asked a first question"
    assert [m.content for m in adapter.shown[2][1:]][1:] == ["answer one", "second question"]
    assert _types(tmp_path, session) == ["session", "prompt", "round", "end", "compaction", "prompt", "round", "end"]


async def test_automatic_compaction_at_the_context_ceiling(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_EFFECTS", str(tmp_path / "fx"))
    long_prompt = "details " * 300  # ~2,400 characters, ~600 tokens
    session, adapter, events = await _run(
        tmp_path, [{"tool": "noop"}, "summary: a long request, noop called", {"tool": "finish", "arguments": {"result": 1}}],
        [long_prompt], context_ceiling=400)
    compacted = [e for e in events if e["type"] == "compacted"]
    assert len(compacted) == 1 and compacted[0]["trigger"] == "auto"
    assert compacted[0]["tokens_before"] > 400 > compacted[0]["tokens_after"]
    assert not [e for e in events if e["type"] == "error"]  # the first round had nothing to compact: no error
    # the round after the compaction was asked with the summary, the call and its result
    assert [m.role for m in adapter.shown[2]] == ["system", "user", "assistant", "tool"]
    assert events[-1]["type"] == "finished" and events[-1]["result"] == 1
    assert session.tokens() < 400


async def test_manual_compaction_with_nothing_to_compact_says_so(tmp_path) -> None:
    session, _, events = await _run(tmp_path, [], [], before=lambda s: _request(s))
    assert events == [{"type": "error", "code": "engine_nothing_to_compact",
                       "message": "nothing to compact: the conversation has 0 message(s) to keep"}]


async def _request(session: Session) -> None:
    session.request_compaction()


async def test_goal_and_queued_steering_reach_the_model(tmp_path) -> None:
    async def setup(session: Session) -> None:
        await session.set_goal("ship the release")
        await session.steer("use the staging server")

    session, adapter, events = await _run(tmp_path, ["on it"], ["deploy"], before=setup)
    shown = adapter.shown[0]
    assert shown[0].content.endswith("The session's goal: ship the release")
    assert [m.content for m in shown[1:]] == ["deploy", "Steering from the user, received while you worked:\n"
                                              "use the staging server"]
    assert [e["type"] for e in events] == ["goal", "turn_start", "steered", "text", "round_end", "finished"]
    assert session.state.steers == []


async def test_finish_ends_the_turn_and_later_calls_of_its_round_do_not_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_EFFECTS", str(tmp_path / "fx"))
    session, _, events = await _run(tmp_path, [{"tool_calls": [
        {"name": "finish", "arguments": {"result": {"answer": 42}}}, {"name": "effect", "arguments": {}}]}], ["go"])
    results = [(e["name"], e["outcome"]) for e in events if e["type"] == "tool_result"]
    assert results == [("finish", "succeeded"), ("effect", "not_run")]
    assert not (tmp_path / "fx").exists()
    assert events[-1] == {"type": "finished", "turn": 1, "result": {"answer": 42}, "text": '{"answer": 42}'}


async def test_finish_without_a_result_is_refused_to_the_model(tmp_path) -> None:
    session, adapter, events = await _run(
        tmp_path, [{"tool": "finish", "arguments": {}}, {"tool": "finish", "arguments": {"result": "ok"}}], ["go"])
    refused = next(e for e in events if e["type"] == "tool_result")
    assert refused["outcome"] == "rejected" and "'result' is required" in refused["content"]
    assert events[-1]["type"] == "finished" and events[-1]["result"] == "ok"


async def test_an_unknown_tool_is_answered_with_the_tools_available(tmp_path) -> None:
    session, _, events = await _run(tmp_path, [{"tool": "nope"}, "fine"], ["go"])
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["outcome"] == "not_found" and "effect, hold, noop, noop_read, finish" in result["content"]


async def test_the_turn_deadline_aborts(tmp_path) -> None:
    session, _, events = await _run(tmp_path, [{"wait_file": str(tmp_path / "never"), "then": "x"}], ["go"],
                                    limits=Limits(turn_timeout_s=0.2))
    assert events[-1]["type"] == "aborted" and events[-1]["reason"] == "turn_timeout"


async def test_the_fold_of_the_file_is_the_state_the_session_ran_with(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENGINE_EFFECTS", str(tmp_path / "fx"))

    async def setup(session: Session) -> None:
        await session.steer("hurry")
        await session.set_goal("g")

    session, _, _ = await _run(tmp_path, [{"tool": "effect"}, "one", "two"], ["a", "b"], before=setup)
    again = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path),
                               session_id=session.session_id)
    async with again:
        a, b = session.state, again.state
        assert [m.to_dict() for m in a.messages] == [m.to_dict() for m in b.messages]
        assert (a.turn, a.rounds_total, a.model_calls, a.goal, a.last_end, a.turn_open) == \
               (b.turn, b.rounds_total, b.model_calls, b.goal, b.last_end, b.turn_open) == \
               (2, 3, 3, "g", {"turn": 2, "state": "finished", "result": "two", "text": "two"}, False)


def test_a_result_for_a_call_that_is_not_pending_is_refused_by_the_fold() -> None:
    state = SessionState()
    apply(state, "session", {"v": 1, "session_id": "ses_x"})
    with pytest.raises(SessionCorrupt, match="not a pending call"):
        apply(state, "result", {"call_id": "c1", "name": "x", "content": ""})
    with pytest.raises(SessionCorrupt, match="does not fold"):
        apply(state, "prompt", {"text": "no turn number"})
    with pytest.raises(SessionCorrupt, match="before the session record"):
        apply(SessionState(), "prompt", {"turn": 1, "text": "x"})


def test_token_estimates_follow_the_adapter_family() -> None:
    assert estimate("anthropic", 3500, 0) == 1000
    assert estimate("openai", 4000, 0) == 1000
    assert estimate("somebody-new", 4000, 0) == 1000  # chars/4 fallback
    assert estimate("openai", 4000, 10) == 1040  # per-message overhead


def test_bad_scripts_ids_and_limits_are_named(tmp_path) -> None:
    (tmp_path / "bad.jsonl").write_text('"ok"\n# a comment\n{"tool": 3}\n')
    with pytest.raises(EngineConfigError, match="line 3"):
        load_script(tmp_path / "bad.jsonl")
    (tmp_path / "notjson.jsonl").write_text("{nope\n")
    with pytest.raises(EngineConfigError, match="line 1 is not JSON"):
        load_script(tmp_path / "notjson.jsonl")
    for bad in ("../etc", "", "a/b", "x" * 101, 5):
        with pytest.raises(SessionInvalid):
            check_session_id(bad)
    with pytest.raises(EngineConfigError, match="max_rounds"):
        Limits(max_rounds=0)
    assert json.loads(json.dumps(Limits().to_dict()))["max_rounds"] == 32


class CrashBeforeEnd(Session):
    """Dies (as a process would) when it comes to write a turn's end record."""

    async def _record(self, rtype, data, *, wait):
        if rtype == "end":
            raise RuntimeError("the process died here")
        await super()._record(rtype, data, wait=wait)


@pytest.mark.parametrize("reply, result", [
    ("the answer", "the answer"),
    ({"tool": "finish", "arguments": {"result": {"n": 1}}}, {"n": 1}),
])
async def test_a_turn_whose_last_round_is_recorded_ends_on_resume_without_asking_the_model(
        tmp_path, reply, result) -> None:
    session = await CrashBeforeEnd.open(SessionConfig(adapter=ScriptFileAdapter([reply]), data_dir=tmp_path))
    session.prompt("go")
    session.close_when_idle()
    with pytest.raises(RuntimeError, match="died"):
        await session.work()
    await session.close()  # what was queued reaches the file (a crash may lose it: then the round is asked again)
    events: list[dict] = []
    model = Spy([])  # no reply left: asking it would fail the turn
    again = await Session.open(SessionConfig(adapter=model, data_dir=tmp_path), session_id=session.session_id,
                               emit=events.append)
    async with again:
        again.close_when_idle()
        await again.work()
    assert model.shown == [] and events[-1]["type"] == "finished" and events[-1]["result"] == result


async def test_a_reply_naming_one_call_id_twice_fails_the_turn(tmp_path) -> None:
    _, _, events = await _run(tmp_path, [{"tool_calls": [{"name": "noop", "id": "a"}, {"name": "noop", "id": "a"}]}],
                              ["go"])
    assert events[-1]["type"] == "failed" and "names one tool-call id twice" in events[-1]["error"]["message"]


async def test_status_names_the_parent_and_the_children(tmp_path) -> None:
    parent = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path))
    async with parent:
        child = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path, mode="subrun",
                                                 parent_session_id=parent.session_id))
        async with child:
            assert parent.status()["children"] == [child.session_id]
            assert child.status()["parent_session"] == parent.session_id and child.status()["children"] == []


async def test_a_resumed_session_keeps_its_recorded_limits_unless_given_new_ones(tmp_path) -> None:
    first = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path,
                                             limits=Limits(max_rounds=3)))
    await first.close()
    kept = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path),
                              session_id=first.session_id)
    await kept.close()
    assert kept.config.limits.max_rounds == 3
    moved = await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path,
                                             limits=Limits(max_rounds=9)), session_id=first.session_id)
    await moved.close()
    assert moved.config.limits.max_rounds == 9


async def test_a_session_file_whose_records_do_not_fold_is_refused_with_what_is_wrong(tmp_path) -> None:
    from openfunctions.core.journal import ExecutionJournal
    from openfunctions.engine._session import session_path

    path = session_path(tmp_path, "ses_bad")
    journal = await ExecutionJournal.open(path)
    await journal.log.append("session", {"v": 1, "session_id": "ses_bad"})
    await journal.log.append("result", {"call_id": "nobody", "name": "x", "content": ""})
    await journal.close()
    with pytest.raises(SessionCorrupt, match="'nobody', which is not a pending call"):
        await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path), session_id="ses_bad")
    # and the file is not left locked: a second open gets the same answer
    with pytest.raises(SessionCorrupt):
        await Session.open(SessionConfig(adapter=ScriptFileAdapter([]), data_dir=tmp_path), session_id="ses_bad")


async def test_compaction_asked_for_during_a_turn_runs_before_its_next_model_call(tmp_path, monkeypatch) -> None:
    import anyio

    monkeypatch.setenv("ENGINE_EFFECTS", str(tmp_path / "fx"))
    go = tmp_path / "go"
    events: list[dict] = []
    model = Spy([{"wait_file": str(go), "then": {"tool": "noop"}}, "summary of round one",
                 {"tool": "finish", "arguments": {"result": "ok"}}])
    session = await Session.open(SessionConfig(adapter=model, data_dir=tmp_path, tools=engine_tools.tools),
                                 emit=events.append)
    async with session:
        async with anyio.create_task_group() as tg:
            session.prompt("a task")
            session.close_when_idle()
            tg.start_soon(session.work)
            while not model.shown:  # round 1's model call is under way (held until `go` exists)
                await anyio.sleep(0.01)
            session.request_compaction()
            assert session.status()["state"] == "running"
            go.touch()
    order = [e["type"] for e in events if e["type"] in ("round_end", "compacted", "finished")]
    assert order == ["round_end", "compacted", "round_end", "finished"]
    assert model.shown[2][1].content.endswith("summary of round one")  # round 2 saw the summary
