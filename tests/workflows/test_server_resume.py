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
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openfunctions.workflows import WorkflowRuns

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp: Path, data: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, WF_TEST_DIR=str(tmp), WF_TEST_DATA=str(data), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.pop("WF_TEST_SLEEP_IN", None)
    env.update(extra)
    return env


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(pred, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


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


def _sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


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
    proc = _serve(tmp_path, data, WF_TEST_SLEEP_IN="slow_read", WF_TEST_SLEEP="60")
    _call_checkout(proc)
    _wait_for(lambda: _lines(tmp_path / "reads.txt"), "the read step to start")
    _sigkill(proc)
    [run] = _runs(data)
    assert run["status"] == "running" and run["workflow"] == "checkout"

    proc = _serve(tmp_path, data)  # no call: the server resumes the run by itself
    try:
        _wait_for(lambda: _runs(data)[0]["status"] == "succeeded", "the restarted server to finish the run")
    finally:
        _stop(proc)
    state = WorkflowRuns(data).show(run["run_id"])
    assert state.result == {"ok": True, "balance": 90}
    assert len(_lines(tmp_path / "charges.txt")) == 1  # the settled charge was not repeated
    assert len(_lines(tmp_path / "reads.txt")) == 2  # the read was
    # the resumed steps ran through the server's journaled executor: the read's receipt is in its journal
    from openfunctions.core.journal import read_records

    settled = [r.data for f in sorted((data / "journal").glob("*.journal")) for r in read_records(f)
               if r.data.get("tool") == "slow_read" and "outcome" in r.data]
    assert [d["outcome"] for d in settled] == ["succeeded"]


def test_a_restarted_server_blocks_a_run_killed_in_an_uncertain_step_and_the_cli_finishes_it(tmp_path):
    data = tmp_path / "data"
    proc = _serve(tmp_path, data, WF_TEST_SLEEP_IN="charge", WF_TEST_SLEEP="60")
    _call_checkout(proc)
    _wait_for(lambda: _lines(tmp_path / "charges.txt"), "the charge to start")
    _sigkill(proc)

    proc = _serve(tmp_path, data)
    try:
        _wait_for(lambda: _runs(data)[0]["status"] == "blocked", "the restarted server to block the run")
        [run] = _runs(data)
        assert run["uncertain"] == ["1"]
        # the server holds the journal: the operator's CLI is told so, and changes nothing
        busy = subprocess.run(
            [sys.executable, "-m", "openfunctions.servers", "workflows", "resolve", run["run_id"], "1", "--applied",
             "--result", '{"charged": 10}', "--data-dir", str(data)],
            cwd=ROOT, env=_env(tmp_path, data), capture_output=True, text=True, timeout=60)
        assert busy.returncode == 2 and "another process" in busy.stderr
    finally:
        err = _stop(proc)
    assert "workflow_run_not_resumed" in err and "workflow_run_blocked" in err
    assert len(_lines(tmp_path / "charges.txt")) == 1  # never re-run

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "openfunctions.servers", "workflows", *args, "--data-dir", str(data)],
                              cwd=ROOT, env=_env(tmp_path, data), capture_output=True, text=True, timeout=60)

    r = cli("resolve", run["run_id"], "1", "--applied", "--result", '{"charged": 10}', "--by", "ops")
    assert r.returncode == 0, r.stderr
    r = cli("resume", "--all", "--module", "tests.workflows._app:workflows")
    assert r.returncode == 0 and f"{run['run_id']} succeeded" in r.stdout, r.stdout + r.stderr
    assert len(_lines(tmp_path / "charges.txt")) == 1
    assert _runs(data)[0]["status"] == "succeeded"
