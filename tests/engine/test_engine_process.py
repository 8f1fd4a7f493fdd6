"""The engine as a real subprocess over stdin/stdout: crash and resume, steering, cancel, bad lines, headless runs."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from openfunctions.core.journal import read_records

from ._proc import Engine, effects, run_headless, write_script

pytestmark = pytest.mark.slow
TOOLS = "tests.engine.engine_tools"


def _args(tmp: Path, script: Path, *more: str) -> list[str]:
    return ["--model", f"scripted:{script}", "--module", TOOLS, "--data-dir", str(tmp / "data"), *more]


def _records(tmp: Path, session: str) -> list[tuple[str, dict]]:
    path = tmp / "data" / "engine" / "sessions" / f"{session}.journal"
    return [(r.type, r.data) for r in read_records(path) if r.type not in ("start", "receipt")]


def test_sigkill_inside_a_tool_call_then_resume_reports_it_uncertain_and_never_runs_it_again(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", [
        {"tool": "hold", "arguments": {"note": "first"}},
        {"tool": "finish", "arguments": {"result": "done after the restart"}},
    ])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    session = eng.until("ready")["session"]
    eng.send({"type": "prompt", "text": "do the thing"})
    call = eng.until("tool_call", name="hold")
    while effects(tmp_path) != ["first"]:  # the handler has run its effect and now waits
        eng_rc = eng.proc.poll()
        assert eng_rc is None, f"engine exited {eng_rc}"
    eng.kill()
    (tmp_path / "release").touch()  # were the call run again, it would not block: its effect would show

    again = Engine(tmp_path, *_args(tmp_path, script, "--session", session))
    ready = again.until("ready")
    assert ready["resumed"] is True and ready["turn_open"] is True and ready["session"] == session
    uncertain = again.until("tool_uncertain")
    assert uncertain["call_id"] == call["call_id"] and uncertain["receipt_id"] == call["receipt_id"]
    # the executor journal's recovery settled the call it found started: unknown, recovered, not retried
    assert uncertain["receipt"] == {"outcome": "unknown", "certainty": "unknown", "handler_started": True,
                                    "recovered": True}
    assert again.until("finished")["result"] == "done after the restart"
    again.close_stdin()
    assert again.until("closed") and again.wait() == 0
    assert effects(tmp_path) == ["first"]  # one effect: the call ran once, across both processes
    types = [t for t, _ in _records(tmp_path, session)]
    assert types == ["session", "prompt", "round", "uncertain", "round", "result", "end"]
    # one file: the call's intent (the round record naming its receipt id) precedes the executor's start record
    raw = [(r.type, r.data) for r in read_records(tmp_path / "data" / "engine" / "sessions" / f"{session}.journal")]
    at_round = next(i for i, (t, d) in enumerate(raw) if t == "round")
    at_start = next(i for i, (t, d) in enumerate(raw) if t == "start" and d["receipt_id"] == call["receipt_id"])
    assert at_round < at_start and raw[at_round][1]["receipts"] == {call["call_id"]: call["receipt_id"]}


def test_sigkill_while_the_model_thinks_resumes_from_the_last_settled_round(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = write_script(tmp_path / "s.jsonl", [
        {"tool": "effect", "arguments": {"note": "round one"}},
        {"wait_file": str(go), "then": {"tool": "effect", "arguments": {"note": "round two"}}},
        {"tool": "finish", "arguments": {"result": "ok"}},
    ])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    session = eng.until("ready")["session"]
    eng.send({"type": "prompt", "text": "two effects"})
    eng.until("round_end", round=1)
    # round 1's result is written while the model is asked for round 2: wait until the file has it
    path = tmp_path / "data" / "engine" / "sessions" / f"{session}.journal"
    while "result" not in [r.type for r in read_records(path)]:
        pass
    eng.kill()
    go.touch()

    again = Engine(tmp_path, *_args(tmp_path, script, "--session", session))
    assert again.until("ready")["rounds"] == 1
    assert again.until("tool_result", name="effect")["round"] == 2
    assert again.until("finished")["result"] == "ok"
    again.close_stdin()
    assert again.wait() == 0
    assert effects(tmp_path) == ["round one", "round two"]
    assert not [e for e in again.events if e["type"] == "tool_uncertain"]


def test_steering_sent_during_a_round_is_injected_before_the_next(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = write_script(tmp_path / "s.jsonl", [
        {"wait_file": str(go), "then": {"tool": "effect", "arguments": {"note": "one"}}},
        {"tool": "finish", "arguments": {"result": "steered"}},
    ])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    session = eng.until("ready")["session"]
    eng.send({"type": "prompt", "text": "work"})
    eng.until("turn_start")
    eng.send({"type": "steer", "text": "prefer the short path", "id": 7})
    ack = eng.until("ack", command="steer")
    assert ack["id"] == 7 and ack["steer_id"].startswith("steer_")
    go.touch()
    steered = eng.until("steered")
    assert steered["text"] == "prefer the short path" and steered["ids"] == [ack["steer_id"]]
    eng.until("finished")
    eng.close_stdin()
    assert eng.wait() == 0
    order = [e["type"] for e in eng.events if e["type"] in ("round_end", "steered", "finished")]
    assert order == ["round_end", "steered", "round_end", "finished"]
    types = [t for t, _ in _records(tmp_path, session)]
    assert types.index("steer") < types.index("steered") and types.count("round") == 2
    assert types.index("steered") > types.index("result")


def test_cancel_aborts_the_running_turn_and_the_session_takes_the_next_prompt(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", [
        {"wait_file": str(tmp_path / "never"), "then": "unreachable"},
        {"tool": "finish", "arguments": {"result": "second turn"}},
    ])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    eng.until("ready")
    eng.send({"type": "prompt", "text": "hang"})
    eng.until("turn_start")
    eng.send({"type": "cancel"})
    aborted = eng.until("aborted")
    assert aborted["reason"] == "cancelled" and aborted["turn"] == 1
    eng.send({"type": "cancel"})
    assert eng.until("error")["code"] == "engine_not_running"
    eng.send({"type": "prompt", "text": "again"})
    assert eng.until("finished")["result"] == "second turn"
    eng.close_stdin()
    assert eng.wait() == 0


def test_bad_lines_get_an_error_each_and_the_engine_keeps_going(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", ["still here"])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    eng.until("ready")
    bad = [b"not json\n", b"[1, 2]\n", b'{"type": "dance"}\n', b'{"type": "prompt"}\n', b'{"type": "steer", "text": ""}\n',
           b"\xff\xfe\n", b'{"type": "status", "id": [1]}\n', b"x" * ((1 << 20) + 10) + b"\n"]
    for line in bad:
        eng.send(line)
    errors = [eng.until("error") for _ in bad]
    assert [e["line"] for e in errors] == list(range(1, len(bad) + 1))
    assert {e["code"] for e in errors} == {"engine_bad_command"}
    assert "unknown command type 'dance'" in errors[2]["message"] and "over 1048576 bytes" in errors[-1]["message"]
    eng.send({"type": "prompt", "text": "hello"})
    assert eng.until("finished")["text"] == "still here"
    eng.close_stdin()
    assert eng.wait() == 0


def test_sigterm_interrupts_the_turn_and_the_next_start_continues_it(tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = write_script(tmp_path / "s.jsonl", [
        {"wait_file": str(go), "then": {"tool": "finish", "arguments": {"result": "resumed"}}},
    ])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    session = eng.until("ready")["session"]
    eng.send({"type": "prompt", "text": "wait"})
    eng.until("turn_start")
    eng.proc.send_signal(signal.SIGTERM)
    assert eng.until("interrupted")["turn"] == 1
    assert eng.wait() == 4
    go.touch()
    rc, events, err = run_headless(tmp_path, "run", *_args(tmp_path, script, "--session", session))
    assert rc == 0, err
    assert events[0]["type"] == "ready" and events[0]["turn_open"] is True
    assert events[-1] == {"type": "finished", "turn": 1, "result": "resumed", "text": "resumed"}


def test_headless_run_exit_codes_follow_the_outcome(tmp_path: Path) -> None:
    ok = write_script(tmp_path / "ok.jsonl", [{"tool": "effect"}, "all done"])
    rc, events, err = run_headless(tmp_path, "run", *_args(tmp_path, ok), "do it")
    assert rc == 0, err
    assert events[-1]["type"] == "finished" and events[-1]["result"] == "all done"
    rc, again, _ = run_headless(tmp_path, "run", *_args(tmp_path, ok, "--session", events[0]["session"]))
    assert rc == 2 and again[-1]["code"] == "engine_no_task"  # finished: no open turn to continue

    empty = write_script(tmp_path / "empty.jsonl", [])
    rc, events, _ = run_headless(tmp_path, "run", *_args(tmp_path, empty), "do it")
    assert rc == 1 and events[-1]["type"] == "failed" and events[-1]["error"]["code"] == "script_exhausted"

    loop = write_script(tmp_path / "loop.jsonl", [{"tool": "effect"}, {"tool": "effect"}])
    rc, events, _ = run_headless(tmp_path, "run", *_args(tmp_path, loop, "--max-rounds", "1"), "do it")
    assert rc == 3 and events[-1]["type"] == "aborted" and events[-1]["reason"] == "max_rounds"

    calls = write_script(tmp_path / "calls.jsonl", [{"tool_calls": [{"name": "effect"}, {"name": "effect"}]}])
    before = len(effects(tmp_path))
    rc, events, _ = run_headless(tmp_path, "run", *_args(tmp_path, calls, "--max-tool-calls", "1"), "do it")
    assert rc == 3 and events[-1]["reason"] == "max_tool_calls"
    assert len(effects(tmp_path)) == before + 1  # the call past the limit was not run
    assert [e["outcome"] for e in events if e["type"] == "tool_result"] == ["succeeded", "not_run"]

    rc, _, err = run_headless(tmp_path, "run", "--model", "scripted:missing.jsonl", "--data-dir", str(tmp_path), "x")
    assert rc == 2 and "missing.jsonl" in err and "cannot read it" in err
    rc, _, err = run_headless(tmp_path, "run", *_args(tmp_path, ok, "--session", "../etc"), "x")
    assert rc == 2 and "engine_session_invalid" in err
    rc, _, err = run_headless(tmp_path, "run", *_args(tmp_path, ok, "--session", "ses_nope"))
    assert rc == 2 and "engine_session_not_found" in err


def _verdict(verdict: str) -> dict:
    return {"verdict": verdict, "summary": "looked at it",
            "findings": [{"file": "a.py", "line": 1, "severity": "warning", "message": "name is vague"}]}


def test_review_asks_for_a_verdict_and_validates_it(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "change.diff").write_text("--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    good = write_script(tmp_path / "good.jsonl", [{"tool": "finish", "arguments": {"result": _verdict("approve")}}])
    rc, events, err = run_headless(tmp_path, "review", *_args(tmp_path, good), "--files", "a.py")
    assert rc == 0, err
    assert events[-1]["type"] == "finished" and events[-1]["result"] == _verdict("approve")

    # an invalid verdict through finish is refused back to the model, which corrects it
    fix = write_script(tmp_path / "fix.jsonl", [
        {"tool": "finish", "arguments": {"result": {"verdict": "maybe"}}},
        {"tool": "finish", "arguments": {"result": _verdict("request_changes")}},
    ])
    rc, events, _ = run_headless(tmp_path, "review", *_args(tmp_path, fix), "--diff", "change.diff")
    assert rc == 5  # a review that requests changes
    refused = next(e for e in events if e["type"] == "tool_result")
    assert refused["outcome"] == "rejected" and refused["error_code"] == "engine_result_invalid"
    assert "verdict" in refused["content"]

    text = write_script(tmp_path / "text.jsonl", ["Looks good to me!"])
    rc, events, _ = run_headless(tmp_path, "review", *_args(tmp_path, text), "--files", "a.py")
    assert rc == 1
    assert events[-1]["type"] == "failed" and events[-1]["error"]["code"] == "engine_verdict_invalid"
    assert "not JSON" in events[-1]["error"]["message"] and "Looks good" in events[-1]["error"]["message"]

    as_text = write_script(tmp_path / "as_text.jsonl", [json.dumps(_verdict("comment"))])
    rc, events, _ = run_headless(tmp_path, "review", *_args(tmp_path, as_text), "--files", "a.py")
    assert rc == 0 and events[-1]["result"]["verdict"] == "comment"

    rc, _, err = run_headless(tmp_path, "review", *_args(tmp_path, good))
    assert rc == 2 and "--diff" in err


def test_subrun_records_its_parent(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", ["parent done", "child done"])
    rc, events, _ = run_headless(tmp_path, "run", *_args(tmp_path, script), "parent task")
    parent = events[0]["session"]
    child_script = write_script(tmp_path / "c.jsonl", ["child done"])
    rc, events, err = run_headless(tmp_path, "subrun", *_args(tmp_path, child_script), "--parent", parent, "child task")
    assert rc == 0, err
    assert events[0]["parent_session"] == parent and events[0]["mode"] == "subrun"
    child = events[0]["session"]
    assert _records(tmp_path, child)[0][1]["parent_session_id"] == parent
    rc, _, err = run_headless(tmp_path, "subrun", *_args(tmp_path, child_script), "--parent", "ses_gone", "x")
    assert rc == 2 and "ses_gone" in err


def test_a_session_is_served_by_one_engine_at_a_time(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", ["hi"])
    eng = Engine(tmp_path, *_args(tmp_path, script))
    session = eng.until("ready")["session"]
    rc, _, err = run_headless(tmp_path, "run", *_args(tmp_path, script, "--session", session), "x")
    assert rc == 2 and "journal_locked" in err
    eng.close_stdin()
    assert eng.wait() == 0


def test_a_provider_adapter_over_http_streams_through_the_engine(tmp_path: Path) -> None:
    """``--model openai:...`` against a local server playing the OpenAI wire format (the model is the only fake)."""
    import subprocess

    from tests.adapters._wire import Reply, WireServer, sse

    from ._proc import engine_argv, engine_env

    wire = WireServer()
    wire.replies = [
        Reply(sse=sse({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_a", "function": {"name": "effect", "arguments": "{\"note\": \"via http\"}"}}]},
            "finish_reason": "tool_calls"}]}, "[DONE]")),
        Reply(sse=sse({"model": "gpt-test", "choices": [{"index": 0, "delta": {"content": "Sun"}}]},
                  {"model": "gpt-test", "choices": [{"index": 0, "delta": {"content": "ny"}, "finish_reason": "stop"}]},
                  "[DONE]")),
    ]
    try:
        env = {**engine_env(tmp_path), "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": wire.url}
        proc = subprocess.run(engine_argv("run", "--model", "openai:gpt-test", "--module", TOOLS, "--data-dir",
                                          str(tmp_path / "data"), "weather?"),
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    finally:
        wire.close()
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["delta"] for e in events if e["type"] == "text"] == ["Sun", "ny"]
    assert events[-1]["result"] == "Sunny" and effects(tmp_path) == ["via http"]
    assert events[0]["model"] == "openai:gpt-test"
    # the second request carried the call and its result back to the model
    second = wire.requests[1]["json"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[3]["tool_call_id"] == "call_a" and '"count": 1' in second[3]["content"]


def test_a_client_that_stops_reading_events_does_not_stop_the_session(tmp_path: Path) -> None:
    import subprocess

    from ._proc import engine_argv, engine_env

    script = write_script(tmp_path / "s.jsonl", [{"tool": "effect", "arguments": {"note": "unread"}}, "done"])
    proc = subprocess.Popen(engine_argv(*_args(tmp_path, script)), cwd=tmp_path, env=engine_env(tmp_path),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    session = json.loads(proc.stdout.readline())["session"]
    proc.stdout.close()  # the client goes away: every later event meets a broken pipe
    proc.stdin.write(b'{"type": "prompt", "text": "go"}\n')
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert effects(tmp_path) == ["unread"]
    assert _records(tmp_path, session)[-1] == ("end", {"turn": 1, "state": "finished", "result": "done", "text": "done"})
