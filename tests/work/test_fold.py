"""One record format, one fold: the live state always equals a fresh replay of the journal.

The controller changes attempt state only by applying the record it just
made durable (``WorkState.apply``); recovery folds the journal with the same
method. These properties drive random command sequences and compare, after
every command, the live state with ``fold(journal)``: in-process (with clean
restarts), and across a real SIGKILL of a controller process.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core import OpenFunctionsError, ToolError, define_tool
from openfunctions.core.journal import read_records
from openfunctions.work._resolutions import ResolutionInbox
from openfunctions.work._state import fold

from .conftest import WorkEnv
from .test_controller import CATALOG

COMMANDS = ("preview", "start", "step", "step_unknown", "step_fail", "look", "verify", "complete", "cancel",
            "reconcile", "resolve", "restart")


def _journal_state(work_dir: Path):
    return fold(r for seg in sorted((work_dir / "attempts").glob("g*.jsonl")) for r in read_records(seg))


def _norm(snapshot: dict[str, Any]) -> Any:
    return json.loads(json.dumps(snapshot, sort_keys=True, default=str))


class _Tools:
    def __init__(self) -> None:
        self.mode = "ok"

    def build(self) -> list:
        def make(name: str, effect: str):
            async def handler(params: dict, ctx) -> dict:
                if name == "bump" and self.mode == "unknown":
                    raise RuntimeError("lost the reply")
                if name == "bump" and self.mode == "fail":
                    raise ToolError("refused: nothing written", effect_happened=False)
                return {"exit_code": 0, "step": name}

            return define_tool(name=f"of_step.{name}", description=name, input_schema={"type": "object"}, handler=handler,
                               capability={"effect": effect, "parallel_safe": effect == "read"})

        return [make("bump", "write"), make("look", "read"), make("check", "external")]


async def _run(commands: list[str], root: Path) -> int:
    env = WorkEnv(root)
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    tools = _Tools()
    ctl = await env.open(tools.build())
    preview_id = None
    compared = 0
    try:
        for cmd in commands:
            tools.mode = {"step_unknown": "unknown", "step_fail": "fail"}.get(cmd, "ok")
            try:
                if cmd == "preview":
                    preview_id = (await ctl.preview([{"step": "bump"}, {"step": "look"}], principal="agent"))["previewId"]
                elif cmd == "start" and preview_id:
                    await ctl.start(preview_id, principal="agent")
                elif cmd in ("step", "step_unknown", "step_fail"):
                    await ctl.run_step(principal="agent", step="bump")
                elif cmd == "look":
                    await ctl.run_step(principal="agent", step="look")
                elif cmd == "verify":
                    await ctl.verify(principal="agent")
                elif cmd == "complete":
                    await ctl.complete(principal="agent")
                elif cmd == "cancel":
                    await ctl.cancel(principal="agent")
                elif cmd == "reconcile":
                    await ctl.reconcile(principal="agent")
                elif cmd == "resolve":
                    open_ops = ctl.state.open_uncertain()
                    if open_ops:
                        await ResolutionInbox(env.work_dir).resolve(open_ops[0][1].operation_id, as_="not_applied", reason="checked", by="t")
                elif cmd == "restart":
                    await ctl.close()
                    ctl = await env.open(tools.build())
            except OpenFunctionsError:
                pass  # a refusal is a legal answer; the states must still agree
            assert _norm(ctl.state.snapshot()) == _norm(_journal_state(env.work_dir).snapshot()), cmd
            compared += 1
    finally:
        for c in env.controllers:
            await c.close()
    return compared


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(COMMANDS), min_size=1, max_size=14))
def test_live_state_equals_a_replay_of_the_journal_after_every_command(commands):
    with tempfile.TemporaryDirectory() as d:
        assert anyio.run(_run, commands, Path(d)) == len(commands)


def test_a_known_history_folds_the_same_live_and_replayed(tmp_path):
    # the sequences that exercise every record type at least once, deterministically
    cmds = ["preview", "start", "step", "look", "verify", "step", "step_unknown", "reconcile", "cancel", "resolve",
            "preview", "start", "step_fail", "step", "verify", "complete", "restart"]
    assert anyio.run(_run, cmds, tmp_path) == len(cmds)


@pytest.mark.slow
@pytest.mark.anyio
async def test_after_a_sigkill_the_restarted_state_is_the_fold_of_the_journal(env):
    """The same property across a real SIGKILL: the new process's state is what the journal folds to."""
    from ._proc import ChildController, kill_pid, wait_for
    from .test_crash import _counter, _write_catalog

    _write_catalog(env)
    await env.grant(["count"])
    first = ChildController(env.data, env.catalog_path)
    sleeper = None
    try:
        first.ok("open")
        prv = first.ok("preview", plan=[{"step": "count", "params": {"seconds": 0}}, {"step": "count", "params": {"seconds": 120}}])
        first.ok("start", preview_id=prv["previewId"])
        first.send("run")  # the first step completes
        assert first.read()["event"] == "dispatching"
        assert first.read()["result"]["operation"]["status"] == "done"
        assert _norm(first.ok("snapshot")) == _norm(_journal_state(env.work_dir).snapshot())
        first.send("run")
        assert first.read()["event"] == "dispatching"
        wait_for(lambda: len(_counter(env)) == 2, what="the second command to start")
        sleeper = int(_counter(env)[1].split()[1])
        first.kill()
    finally:
        first.close()
        if sleeper is not None:
            kill_pid(sleeper)
    second = ChildController(env.data, env.catalog_path)
    try:
        second.ok("open")
        live = second.ok("snapshot")
        assert _norm(live) == _norm(_journal_state(env.work_dir).snapshot())
        att = next(iter(live["attempts"].values()))
        assert att["state"] == "blocked" and [o["status"] for o in att["operations"].values()] == ["done", "unknown"]
        # the dead process's spawned record names the command's process group
        assert att["operations"][list(att["operations"])[1]]["process"]["pid"] == sleeper
    finally:
        second.close()
