"""Crash safety with real processes: SIGKILL a workflow runner mid-step, then resume.

- killed inside a tool step with an uncertain effect (``charge``, effect
  ``external``): the run is blocked; ``workflows resume`` refuses and never
  re-runs the charge; ``workflows resolve --applied`` then ``resume`` finishes
  it, still with one charge;
- killed inside a read step (``slow_read``): the next process resumes it
  (``resume_interrupted``) after the last settled step: the charge is not
  repeated, the read is;
- killed inside a write step whose tool declares ``idempotent``
  (``set_price``): the next process re-runs it instead of blocking, and the
  step's record says it was a re-run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._proc import ROOT, assert_resumed_order_8, cli, lines, sigkill, wait_for
from ._proc import env as _env

pytestmark = pytest.mark.slow


def _start_child(tmp: Path, data: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "workflows" / "_child.py"), str(data), *args],
                            cwd=ROOT, env=_env(tmp, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_during_an_uncertain_tool_step_blocks_and_never_reruns(tmp_path):
    data = tmp_path / "data"
    charges = tmp_path / "charges.txt"
    child = _start_child(tmp_path, data, "run", "order-7", json.dumps({"amount": 30}),
                         WF_TEST_SLEEP_IN="charge", WF_TEST_SLEEP="120")
    try:
        wait_for(lambda: len(lines(charges)) == 1, "the charge to start")
    finally:
        sigkill(child)

    shown = cli(tmp_path, data, "show", "order-7", "--json")
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["status"] == "running" and state["uncertain"] == ["1"]

    resumed = cli(tmp_path, data, "resume", "order-7", "--module", "tests.workflows._app:workflows")
    assert resumed.returncode == 2
    assert "run order-7 is blocked: step(s) 1 (charge, tool charge)" in resumed.stderr
    assert len(lines(charges)) == 1  # never re-run blindly
    listed = cli(tmp_path, data, "list", "--json")
    [row] = json.loads(listed.stdout)
    assert row["status"] == "blocked" and row["uncertain"] == ["1"]

    # the operator checked the payment system: the charge went through
    res = cli(tmp_path, data, "resolve", "order-7", "1", "--applied", "--result", '{"charged": 30}', "--by", "ops")
    assert res.returncode == 0, res.stderr
    done = cli(tmp_path, data, "resume", "order-7", "--module", "tests.workflows._app:workflows", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "succeeded" and out["result"] == {"ok": True, "balance": 70}
    assert len(lines(charges)) == 1


def test_sigkill_during_a_read_step_resumes_on_the_next_start(tmp_path):
    data = tmp_path / "data"
    charges, reads = tmp_path / "charges.txt", tmp_path / "reads.txt"
    child = _start_child(tmp_path, data, "run", "order-8", json.dumps({"amount": 5}),
                         WF_TEST_SLEEP_IN="slow_read", WF_TEST_SLEEP="120")
    try:
        wait_for(lambda: len(lines(reads)) == 1, "the read to start")
    finally:
        sigkill(child)
    assert len(lines(charges)) == 1

    assert_resumed_order_8(_start_child(tmp_path, data, "resume-all"), tmp_path)


def test_sigkill_during_an_idempotent_write_reruns_it_on_the_next_start(tmp_path):
    data = tmp_path / "data"
    prices = tmp_path / "prices.txt"
    child = _start_child(tmp_path, data, "run", "price-1", json.dumps({"price": 12}), "reprice",
                         WF_TEST_SLEEP_IN="set_price", WF_TEST_SLEEP="120")
    try:
        wait_for(lambda: len(lines(prices)) == 1, "the price to be set")
    finally:
        sigkill(child)
    assert json.loads(cli(tmp_path, data, "show", "price-1", "--json").stdout)["uncertain"] == ["0"]

    resumed = _start_child(tmp_path, data, "resume-all")
    stdout, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    [out] = json.loads(stdout)
    assert out["run_id"] == "price-1" and out["status"] == "succeeded" and out["result"] == {"price": 12}
    assert len(lines(prices)) == 2  # run again, not blocked
    shown = json.loads(cli(tmp_path, data, "show", "price-1", "--json").stdout)
    [step] = shown["steps"]
    assert step["status"] == "succeeded" and step["rerun"] is True
    assert shown["resolutions"] == [{"step": "0", "applied": False, "by": None, "rerun": True, "rerun_of": None}]
