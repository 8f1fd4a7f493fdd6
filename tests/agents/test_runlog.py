"""The durable run journal: records on disk, the one fold, recovery to 'interrupted', the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import RunJournal, define_agent, read_runs, run_agent, runs_journal_path
from openfunctions.agents import _records as R
from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import read_records

from .._net import free_port, wait_for_port
from .test_mcp_sampling import HostModel, argv, env

pytestmark = pytest.mark.anyio


def _tool():
    return define_tool(name="echo", description="echo", handler=lambda p, c: "e",
                       capability={"effect": "read", "parallel_safe": True})


async def test_records_are_durable_and_fold_the_same_on_reopen(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    reg = ToolRegistry([_tool()])
    agent = define_agent("a", "x", tools=["echo"], adapter=ScriptedAdapter([{"tool": "echo"}, "done"]))
    r = await run_agent(agent, "go", registry=reg, runs=journal)
    live = journal.get(r.run_id).to_dict()
    await journal.close()
    types_ = [rec.type for rec in read_records(runs_journal_path(tmp_path))]
    assert types_ == ["run_started", "run_messages", "run_messages", "run_messages", "run_round", "run_messages",
                      "run_round", "run_finished", "outcome_claim"]
    again = await RunJournal.open_in(tmp_path)
    assert again.get(r.run_id).to_dict() == live and again.interrupted == []
    assert read_runs(tmp_path)[r.run_id].to_dict() == live
    await again.close()


async def test_unfinished_runs_are_interrupted_at_recovery_never_resumed(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    start = R.started(run_id="run_" + "1" * 32, agent="a", provider="p", model="m", instructions="i", tools=[],
                      limits={}, task="t", principal=None, parent_run_id=None, parent_receipt_id=None)
    await journal.append(R.STARTED, start)
    await journal.append(R.ROUND, R.round_(run_id=start["run_id"], n=1, model="m", stop_reason="tool_use",
                                           usage={"input_tokens": 3, "output_tokens": 4},
                                           tool_calls=[{"id": "c", "name": "echo", "receipt_id": "rcpt_x", "outcome": "succeeded",
                                                        "error_code": None}], text=None))
    await journal.close()  # as a crash would leave it: no run_finished
    reopened = await RunJournal.open_in(tmp_path)
    run = reopened.get(start["run_id"])
    assert reopened.interrupted == [start["run_id"]]
    assert run.status == "interrupted" and run.finished["recovered"] is True
    assert run.finished["receipts"] == ["rcpt_x"] and run.finished["usage"] == {"input_tokens": 3, "output_tokens": 4}
    await reopened.close()
    third = await RunJournal.open_in(tmp_path)  # idempotent: nothing left to recover
    assert third.interrupted == [] and third.get(start["run_id"]).status == "interrupted"
    await third.close()


async def test_a_second_writer_takes_the_next_slot_and_readers_see_both(tmp_path: Path) -> None:
    j1 = await RunJournal.open_in(tmp_path)
    j2 = await RunJournal.open_in(tmp_path)
    assert j1.path.name == "runs.journal" and j2.path.name == "runs.2.journal"
    reg = ToolRegistry([_tool()])
    r1 = await run_agent(define_agent("a", "x", adapter=ScriptedAdapter(["1"])), "go", registry=reg, runs=j1)
    r2 = await run_agent(define_agent("b", "x", adapter=ScriptedAdapter(["2"])), "go", registry=reg, runs=j2)
    assert {r1.run_id, r2.run_id} <= set(read_runs(tmp_path))
    await j1.close()
    await j2.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", "runs", *args],
                          capture_output=True, text=True, timeout=60)


async def test_cli_list_show_tail(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    r = await run_agent(define_agent("calc", "x", adapter=ScriptedAdapter(["42"])), "q", registry=ToolRegistry(), runs=journal)
    await journal.close()
    out = _cli("list", "--data-dir", str(tmp_path))
    assert out.returncode == 0 and r.run_id in out.stdout and "completed" in out.stdout
    rows = json.loads(_cli("list", "--data-dir", str(tmp_path), "--json", "--status", "completed").stdout)
    assert [row["run_id"] for row in rows] == [r.run_id]
    assert json.loads(_cli("list", "--data-dir", str(tmp_path), "--json", "--agent", "nobody").stdout) == []
    show = _cli("show", r.run_id, "--data-dir", str(tmp_path))
    assert show.returncode == 0 and "42" in show.stdout and "scripted/scripted" in show.stdout
    full = json.loads(_cli("show", r.run_id, "--data-dir", str(tmp_path), "--json").stdout)
    assert full["finished"]["text"] == "42"
    missing = _cli("show", "run_" + "0" * 32, "--data-dir", str(tmp_path))
    assert missing.returncode == 1 and "no run" in missing.stderr
    tail = _cli("tail", "-n", "2", "--data-dir", str(tmp_path), "--json")
    assert [json.loads(line)["type"] for line in tail.stdout.splitlines()] == ["run_finished", "outcome_claim"]


async def test_cli_reports_a_corrupt_journal(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    await run_agent(define_agent("calc", "x", adapter=ScriptedAdapter(["42"])), "q", registry=ToolRegistry(), runs=journal)
    await journal.close()
    p = runs_journal_path(tmp_path)
    data = bytearray(p.read_bytes())
    i = data.index(b'"calc"')
    data[i + 1:i + 5] = b"CALC"  # an interior record's bytes change: its checksum no longer matches
    p.write_bytes(bytes(data))
    out = _cli("list", "--data-dir", str(tmp_path))
    assert out.returncode == 2 and ("corrupt" in out.stderr.lower() or "checksum" in out.stderr.lower()), out.stderr


@pytest.mark.slow
async def test_sigkill_mid_loop_interrupts_the_run_and_reruns_nothing(tmp_path: Path) -> None:
    data, markers = tmp_path / "data", tmp_path / "m"
    markers.mkdir()
    port = free_port()
    proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port)), env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        model = HostModel([("wait_for_release", {"dir": str(markers)})])
        caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                try:
                    async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", sampling_callback=model,
                                      sampling_capabilities=caps, read_timeout_seconds=60) as c:
                        await c.call_tool("agent_waiter", {"task": "wait"})
                except Exception:
                    pass  # the server dies under the call

            tg.start_soon(call)
            with anyio.fail_after(30):
                while not (markers / "started").exists():
                    await anyio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            tg.cancel_scope.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    (before,) = read_runs(data).values()
    assert before.status == "running"  # what the crash left on disk
    # Restart the server on the same data dir: recovery closes the run, re-runs nothing.
    port2 = free_port()
    proc2 = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port2)), env=env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port2, proc2)
        async with Client(f"http://127.0.0.1:{port2}/mcp", mode="legacy", read_timeout_seconds=60) as c:
            assert (await c.list_tools()).tools
    finally:
        proc2.terminate()
        proc2.wait(20)
    (after,) = read_runs(data).values()
    assert after.status == "interrupted" and after.finished["recovered"] is True
    assert (markers / "invocations").read_text() == "1\n"  # the tool ran once, before the kill, never again
    receipts = [r.data for r in read_records(data / "journal" / "agents.journal") if r.type == "receipt"]
    waits = [r for r in receipts if r["tool"] == "wait_for_release"]
    assert len(waits) == 1 and waits[0]["outcome"] == "unknown" and waits[0]["recovered"] is True


async def test_open_past_the_rotation_size_continues_in_a_segment_and_memory_stays_bounded(tmp_path: Path, monkeypatch) -> None:
    from openfunctions.agents import _runlog

    monkeypatch.setattr(_runlog, "KEEP_FINISHED", 3)
    journal = await RunJournal.open_in(tmp_path)
    reg = ToolRegistry()
    ids = []
    for i in range(8):
        r = await run_agent(define_agent(f"a{i}", "x", adapter=ScriptedAdapter([f"answer {i}"])), "go", registry=reg, runs=journal)
        ids.append(r.run_id)
    assert len(journal.state) <= 2 * 3 + 1 and ids[-1] in journal.state and journal.get(ids[-1]).claims
    await journal.close()
    again = await RunJournal.open(runs_journal_path(tmp_path), rotate_over=1)
    assert again.rotated_to is not None and again.rotated_to.name == "runs.journal.seg-000001"
    assert list(again.state) == ids[-3:]  # the last KEEP_FINISHED, in start order
    r = await run_agent(define_agent("later", "x", adapter=ScriptedAdapter(["ok"])), "go", registry=reg, runs=again)
    await again.close()
    everything = read_runs(tmp_path)  # segments and the live file
    assert set(ids) | {r.run_id} == set(everything) and all(x.status == "completed" for x in everything.values())


async def test_cli_tail_follow_prints_records_as_they_are_written(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "runs", "tail", "-f", "-n", "0", "--json",
                             "--data-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        assert "following run records" in line  # it has read the current state: what follows is new
        r = await run_agent(define_agent("late", "x", adapter=ScriptedAdapter(["hi"])), "go", registry=ToolRegistry(), runs=journal)
        got = []
        with anyio.fail_after(30):
            while len(got) < 6:
                got.append(json.loads(await anyio.to_thread.run_sync(proc.stdout.readline)))
        assert [g["type"] for g in got] == ["run_started", "run_messages", "run_messages", "run_round", "run_finished",
                                            "outcome_claim"]
        assert {g["data"]["run_id"] for g in got} == {r.run_id}
    finally:
        proc.kill()
        proc.wait(10)
        await journal.close()


async def test_unwaited_records_keep_their_order_and_are_durable_once_a_later_waited_one_returns(tmp_path: Path) -> None:
    journal = await RunJournal.open_in(tmp_path)
    rid = "run_" + "2" * 32
    await journal.append(R.STARTED, R.started(run_id=rid, agent="a", provider="p", model="m", instructions="i", tools=[],
                                              limits={}, task="t", principal=None, parent_run_id=None, parent_receipt_id=None))
    for n in range(1, 6):
        await journal.append(R.ROUND, R.round_(run_id=rid, n=n, model="m", stop_reason="tool_use",
                                               usage={"input_tokens": 0, "output_tokens": 0}, tool_calls=[], text=None), wait=False)
    assert len(journal.get(rid).rounds) == 5  # folded at once
    await journal.append(R.FINISHED, R.finished(run_id=rid, status="completed", rounds=5, usage={}, receipts=[], text="x"))
    on_disk = [(rec.type, rec.data.get("round")) for rec in read_records(runs_journal_path(tmp_path))]
    assert on_disk == [("run_started", None), *[("run_round", n) for n in range(1, 6)], ("run_finished", None)]
    await journal.append(R.ROUND, R.round_(run_id=rid, n=6, model="m", stop_reason="x", usage={}, tool_calls=[], text=None),
                         wait=False)
    await journal.close()  # close writes what is queued
    assert [rec.type for rec in read_records(runs_journal_path(tmp_path))][-1] == "run_round"


@pytest.mark.parametrize("command", ["list", "tail"])
def test_cli_a_negative_count_is_refused_by_name(tmp_path: Path, command: str) -> None:
    out = _cli(command, "-n", "-1", "--data-dir", str(tmp_path))
    assert out.returncode == 2 and "argument -n: expected a whole number >= 0, got '-1'" in out.stderr


def test_cli_an_unreachable_database_is_one_clear_line() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on (bound, then freed)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # One error naming the (redacted) address, no raw pool retry warnings first.
    out = _cli("tail", "--database", f"postgresql://u:secret@127.0.0.1:{port}/x")
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and "cannot connect to PostgreSQL" in out.stderr and "secret" not in out.stderr


async def test_a_lone_surrogate_in_a_models_reply_does_not_poison_the_run_journal(tmp_path: Path) -> None:
    """A provider (its real wire format, over HTTP on 127.0.0.1) answers with a lone surrogate: the run
    completes with U+FFFD in its place, and the next run in the same process still records."""
    from openfunctions.adapters import OpenAIAdapter

    from ..adapters._wire import Reply, WireServer

    def answer(text: str) -> bytes:  # json.dumps escapes the surrogate as \udc80, as a provider would
        return json.dumps({"model": "gpt-wire", "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": text}}]}).encode()

    wire = WireServer()
    try:
        wire.replies += [Reply(body=answer("bad \udc80 text"), headers={"content-type": "application/json"}),
                         Reply(body=answer("fine"), headers={"content-type": "application/json"})]
        model = OpenAIAdapter(model="gpt-wire", api_key="k", base_url=wire.url)
        journal = await RunJournal.open_in(tmp_path)
        reg = ToolRegistry([_tool()])
        first = await run_agent(define_agent("a", "x", tools=[], adapter=model), "go", registry=reg, runs=journal)
        second = await run_agent(define_agent("b", "x", tools=[], adapter=model), "go", registry=reg, runs=journal)
        await journal.close()
        await model.aclose()
    finally:
        wire.close()
    assert first.status == "completed" and first.text == "bad \ufffd text", first.error
    assert second.status == "completed" and second.text == "fine", second.error
    runs = read_runs(tmp_path)  # every record checksummed and chained (read_records validates as it reads)
    assert runs[first.run_id].finished["text"] == "bad \ufffd text" and runs[second.run_id].status == "completed"
    from openfunctions.core.journal.cli import main as journal_cli

    assert journal_cli(["verify", str(runs_journal_path(tmp_path))]) == 0


async def test_a_record_that_still_holds_a_lone_surrogate_is_written_cleaned_not_fail_stop(tmp_path: Path) -> None:
    """The last line: text that bypassed the boundaries (e.g. an exception's message) reaches a record."""
    journal = await RunJournal.open_in(tmp_path)
    run_id = "run_" + "a" * 32
    await journal.append(R.STARTED, R.started(run_id=run_id, agent="a", provider="p", model="m", instructions="i",
                                              tools=[], limits={}, task="t", principal=None, parent_run_id=None,
                                              parent_receipt_id=None))
    await journal.append(R.ROUND, R.round_(run_id=run_id, n=1, model="m\udc80", stop_reason="end_turn",
                                           usage={}, tool_calls=[], text="x\udc80"))
    await journal.append(R.FINISHED, R.finished(run_id=run_id, status="completed", rounds=1, usage={}, receipts=[],
                                                text="ok"))  # the journal still takes records
    assert journal.get(run_id).rounds[0]["text"] == "x\ufffd"  # the folded state says what the file says
    await journal.close()
    run = read_runs(tmp_path)[run_id]
    assert run.status == "completed" and run.rounds[0]["text"] == "x\ufffd" and run.rounds[0]["model"] == "m\ufffd"
