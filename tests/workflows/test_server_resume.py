"""A server serving a durable workflow tool resumes interrupted runs when it starts.

Real processes: `openfunctions-mcp serve --module tests.workflows._app:durable` (example tools on, the
default) on stdio, spoken to with newline-delimited JSON-RPC (the test must SIGKILL the server in the
middle of a call, which the SDK client does not survive gracefully), killed with SIGKILL inside a step,
then started again with no call at all:

- killed inside the read step (after the charge settled): the restarted server finishes the run by itself;
  the charge is not repeated, the read is;
- killed inside the charge (an effect of unknown outcome): the restarted server blocks the run and never
  re-runs the charge; after the server stops, `workflows resolve --applied` and `workflows resume --all`
  (the CLI still works) finish it, with one charge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openfunctions.core.journal import read_records
from openfunctions.workflows import WorkflowRuns

from ._proc import ROOT, cli, lines, sigkill, wait_for
from ._proc import env as _proc_env

pytestmark = pytest.mark.slow


def _env(tmp: Path, data: Path, **extra: str) -> dict[str, str]:
    return _proc_env(tmp, WF_TEST_DATA=str(data), PYTHONUNBUFFERED="1", **extra)


def _serve(tmp: Path, data: Path, **env: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--module", "tests.workflows._app:durable",
         "--data-dir", str(data)],
        cwd=ROOT, env=_env(tmp, data, **env), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
    reply = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    assert reply.get("id") == 1 and "result" in reply, reply
    _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def _send(proc: subprocess.Popen, msg: dict) -> None:
    proc.stdin.write(json.dumps(msg) + "\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]


def _call_checkout(proc: subprocess.Popen) -> None:
    _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "checkout", "arguments": {"amount": 10}}})


def _kill_inside(tmp: Path, data: Path, tool: str, evidence: str) -> None:
    """Serve, call checkout with ``tool`` sleeping, and SIGKILL the server once ``tool`` has started."""
    proc = _serve(tmp, data, WF_TEST_SLEEP_IN=tool, WF_TEST_SLEEP="60")
    _call_checkout(proc)
    wait_for(lambda: lines(tmp / evidence), f"{tool} to start")
    sigkill(proc)


def _stop(proc: subprocess.Popen) -> str:
    try:  # communicate() closes stdin: end of input, the stdio server shuts down
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def _runs(data: Path) -> list[dict]:
    return WorkflowRuns(data).list()  # lock-free: works while the server holds the journal


def test_a_restarted_server_finishes_a_run_killed_in_a_read_step(tmp_path):
    data = tmp_path / "data"
    _kill_inside(tmp_path, data, "slow_read", "reads.txt")
    [run] = _runs(data)
    assert run["status"] == "running" and run["workflow"] == "checkout"

    proc = _serve(tmp_path, data)  # no call: the server resumes the run by itself
    try:
        wait_for(lambda: _runs(data)[0]["status"] == "succeeded", "the restarted server to finish the run")
    finally:
        _stop(proc)
    state = WorkflowRuns(data).show(run["run_id"])
    assert state.result == {"ok": True, "balance": 90}
    assert len(lines(tmp_path / "charges.txt")) == 1  # the settled charge was not repeated
    assert len(lines(tmp_path / "reads.txt")) == 2  # the read was
    # the resumed steps ran through the server's journaled executor: the read's receipt is in its journal.
    # Nothing waits for that journal: the server attaches it before its profile's starters run (resume
    # starts at once); with the starters run first, the resumed read ran unjournaled and this failed.
    settled = [r.data for f in sorted((data / "journal").glob("*.journal")) for r in read_records(f)
               if r.data.get("tool") == "slow_read" and "outcome" in r.data]
    assert [d["outcome"] for d in settled] == ["succeeded"]


def test_a_restarted_server_blocks_a_run_killed_in_an_uncertain_step_and_the_cli_finishes_it(tmp_path):
    data = tmp_path / "data"
    _kill_inside(tmp_path, data, "charge", "charges.txt")

    proc = _serve(tmp_path, data)
    try:
        wait_for(lambda: _runs(data)[0]["status"] == "blocked", "the restarted server to block the run")
        [run] = _runs(data)
        assert run["uncertain"] == ["1"]
        # the server holds the journal: the operator's CLI is told so, and changes nothing
        busy = cli(tmp_path, data, "resolve", run["run_id"], "1", "--applied", "--result", '{"charged": 10}')
        assert busy.returncode == 2 and "another process" in busy.stderr
    finally:
        err = _stop(proc)
    assert "workflow_run_not_resumed" in err and "workflow_run_blocked" in err
    assert len(lines(tmp_path / "charges.txt")) == 1  # never re-run

    r = cli(tmp_path, data, "resolve", run["run_id"], "1", "--applied", "--result", '{"charged": 10}', "--by", "ops")
    assert r.returncode == 0, r.stderr
    r = cli(tmp_path, data, "resume", "--all", "--module", "tests.workflows._app:workflows")
    assert r.returncode == 0 and f"{run['run_id']} succeeded" in r.stdout, r.stdout + r.stderr
    assert len(lines(tmp_path / "charges.txt")) == 1
    assert _runs(data)[0]["status"] == "succeeded"
