"""A ``tool`` step whose tool declares ``capability.idempotent``: an unknown outcome does not block the
attempt; the step settles ``failed`` and the next ``run_step`` runs it again, its intent naming the
uncertain call it re-runs (``rerun_of``). Live, and after the controller died mid-step."""

from __future__ import annotations

import json

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.work._steps import create_step_tools

from .test_tool_steps import Ledger, _crash_mid_step, _open

pytestmark = pytest.mark.anyio


async def test_an_unknown_outcome_of_an_idempotent_tool_step_runs_again_instead_of_blocking(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.path.write_text(json.dumps({"eur": 3}))
    ledger.die_before_write = True
    await env.grant(("set_rate", "look"))
    _, _, ctl = await _open(env, ledger, idempotent=True)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}, {"step": "look"}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    first = await ctl.run_step(principal="agent")
    assert first["operation"]["status"] == "failed" and first["operation"]["certainty"] == "unknown"
    assert first["state"] == "running" and first["cursor"] == 0  # not blocked, not advanced
    ledger.die_before_write = False
    again = await ctl.run_step(principal="agent")
    op = again["operation"]
    assert op["step"] == "set_rate" and op["status"] == "done" and op["rerunOf"] == first["operation"]["receiptId"]
    assert ledger.read() == {"eur": 7} and ledger.runs == 2
    assert (await ctl.run_step(principal="agent"))["operation"]["step"] == "look"


async def test_a_not_idempotent_tool_step_still_blocks(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.die_before_write = True
    await env.grant(("set_rate", "look"))
    _, _, ctl = await _open(env, ledger)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["status"] == "unknown" and r["state"] == "blocked" and "rerunnable" not in r["operation"]


async def test_after_the_controller_died_mid_step_an_idempotent_tool_step_runs_again(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    await _crash_mid_step(env, ledger, idempotent=True)
    assert ledger.runs == 1
    registry = ToolRegistry([ledger.tool(idempotent=True)])
    for t in create_step_tools(env.catalog(), store=None, tools=registry):
        registry.register(t)
    ctl = await env.open([], registry=registry, execution_journals=None)
    att = ctl.status(principal="agent")["attempt"]
    [died] = att["operations"]
    assert att["state"] == "running" and died["status"] == "failed" and died["rerunnable"] is True
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["step"] == "set_rate" and r["operation"]["status"] == "done" and ledger.runs == 2
    assert r["operation"]["rerunOf"] == died["receiptId"] is not None
    await ctl.close()
    # the fold from the journal says the same after another restart
    third = await env.open([], registry=registry, execution_journals=None)
    ops = third.status(principal="agent")["attempt"]["operations"]
    assert [(o["status"], o.get("rerunOf")) for o in ops] == [("failed", None), ("done", died["receiptId"])]
