"""Records written by real runs into one data dir, for the viewer tests: built through the real APIs.

- an agent run (scripted adapter) that calls a tool twice and delegates to a second agent (a child run, which
  calls the tool once), through a registry journaling into ``<data>/journal/agents.journal``; the model's text
  and the tool's result carry HTML/JS;
- a workflow run SIGKILLed inside its uncertain ``charge`` step, then blocked by ``workflows resume``
  (tests/workflows' crash child and CLI);
- a work attempt whose write step failed with an unknown effect: blocked, one uncertain operation;
- an MCP task, over a real ``serve --transport http`` (the server stays up: the tests make more calls).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import RunJournal, define_agent, run_agent
from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = '<img src=x onerror="window.__pwned=1">'
SCRIPT = '<script>window.__pwned=2</script>'


async def agent_run(data: Path) -> str:
    async def lookup(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"title": HOSTILE, "body": SCRIPT, "q": p.get("q")}

    journal = await ExecutionJournal.open(data / "journal" / "agents.journal")
    runs = await RunJournal.open_in(data)
    try:
        reg = ToolRegistry([define_tool(name="lookup", description="look a title up", handler=lookup,
                                        capability={"effect": "read", "parallel_safe": True})], sink=journal)
        helper = define_agent("checker", "Check a title.", tools=["lookup"], adapter=ScriptedAdapter([
            {"tool": "lookup", "arguments": {"q": "check"}}, "Checked."]))
        agent = define_agent("researcher", "Answer briefly.", tools=["lookup"], delegates=[helper], adapter=ScriptedAdapter([
            {"tool": "lookup", "arguments": {"q": HOSTILE}}, {"tool": "lookup", "arguments": {"q": "second"}},
            {"tool": "delegate_to_checker", "arguments": {"task": "check the title"}},
            f"Found it: {HOSTILE} {SCRIPT}"]))
        result = await run_agent(agent, f"find {HOSTILE}", registry=reg, runs=runs)
        assert result.status == "completed", result
        return result.run_id
    finally:
        await runs.close()
        await journal.close()


def workflow_killed_and_blocked(tmp: Path, data: Path) -> str:
    from tests.workflows._proc import env, lines, sigkill, wait_for

    child = subprocess.Popen([sys.executable, str(ROOT / "tests" / "workflows" / "_child.py"), str(data), "run",
                              "order-7", json.dumps({"amount": 30})], cwd=ROOT,
                             env=env(tmp, WF_TEST_SLEEP_IN="charge", WF_TEST_SLEEP="120"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(lines(tmp / "charges.txt")) == 1, "the charge to start")
    finally:
        sigkill(child)
    resumed = subprocess.run([sys.executable, "-m", "openfunctions.servers", "workflows", "resume", "order-7",
                              "--module", "tests.workflows._app:workflows", "--data-dir", str(data)],
                             cwd=ROOT, env=env(tmp), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 2 and "blocked" in resumed.stderr, resumed.stderr
    return "order-7"


async def work_attempt_blocked(tmp: Path) -> tuple[str, str]:
    """A blocked attempt with an uncertain write in ``tmp/data`` (the work tests' environment: catalog, grant,
    workspace ``tmp/ws``); returns (attempt id, operation id)."""
    from tests.work.conftest import WorkEnv
    from tests.work.test_controller import Counter, _ready

    env = WorkEnv(tmp)
    counter = Counter()
    counter.fail_with = RuntimeError("disk vanished mid-write")
    ctl = await _ready(env, counter)
    try:
        prv = await ctl.preview([{"step": "bump"}, {"step": "look"}], principal="agent")
        await ctl.start(prv["previewId"], principal="agent")
        r = await ctl.run_step(principal="agent")
        assert r["state"] == "blocked", r
        return r["attemptId"], r["operation"]["operationId"]
    finally:
        await ctl.close()
