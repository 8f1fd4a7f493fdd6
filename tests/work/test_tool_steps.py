"""Catalog steps of kind ``tool``: a registered tool run as a work step, reconciled by the readback
its capability binds (``prepare_reconciliation`` / ``reconcile_effect``).

The tool is a small key-value ledger in a JSON file, the kind of effect an operator's own tool has:
its readback compares the key's value now with the intended one and the one before the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.work._catalog import Catalog
from openfunctions.work._errors import CatalogInvalid, ReconcileFailed
from openfunctions.work._steps import create_step_tools

from .conftest import WorkEnv, run_step_dying_before_its_outcome

CATALOG = """
[steps.set_rate]
kind = "tool"
tool = "ledger_set"
description = "set one rate in the ledger"
effect = "write"
reconcile = true
[steps.set_rate.params.key]
type = "string"
pattern = "[a-z]+"
[steps.set_rate.params.value]
type = "integer"
minimum = 0
maximum = 1000

[steps.look]
kind = "command"
description = "read something"
argv = ["true"]
effect = "read"
"""


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs = 0
        self.die_before_write = False
        self.readbacks = 0

    def read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def tool(self, *, binding: bool = True, effect: str = "write", prepare: Any = None, idempotent: bool = False):
        def handler(params: dict, ctx) -> dict:
            self.runs += 1
            if self.die_before_write:
                raise RuntimeError("the connection dropped")  # certainty unknown: did it write?
            data = self.read()
            data[params["key"]] = params["value"]
            self.path.write_text(json.dumps(data))
            return {"key": params["key"], "value": params["value"]}

        def prepare_reconciliation(params: dict) -> dict:
            return {"prior": self.read().get(params["key"])}

        async def reconcile_effect(params: dict, prepared: dict) -> dict:
            self.readbacks += 1
            now = self.read().get(params["key"])
            observed = {"now": now, "intended": params["value"], "prior": prepared["prior"]}
            if now == params["value"]:
                return {"status": "applied", "observed": observed, "reason": "the ledger holds the intended value"}
            if now == prepared["prior"]:
                return {"status": "not_applied", "observed": observed, "reason": "the ledger holds the prior value"}
            return {"status": "inconclusive", "observed": observed, "reason": "changed by something else"}

        cap: dict[str, Any] = {"effect": effect, "idempotent": idempotent}
        if binding:
            cap |= {"prepare_reconciliation": prepare or prepare_reconciliation, "reconcile_effect": reconcile_effect}
        schema = {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
                  "required": ["key", "value"], "additionalProperties": False}
        return define_tool(name="ledger_set", description="set a key", input_schema=schema, handler=handler, capability=cap)


async def _open(env, ledger: Ledger, **tool_kw):
    catalog = env.write_catalog(CATALOG)
    registry = ToolRegistry([ledger.tool(**tool_kw)])
    for t in create_step_tools(catalog, store=None, tools=registry):
        registry.register(t)
    return catalog, registry, await env.open([], registry=registry, catalog=catalog, execution_journals=None)


async def _crash_mid_step(env, ledger: Ledger, **tool_kw):
    """Run set_rate; the controller dies after dispatch and before its outcome record."""
    await env.grant(("set_rate", "look"))
    catalog, registry, ctl = await _open(env, ledger, **tool_kw)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}, {"step": "look"}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await run_step_dying_before_its_outcome(ctl)
    return catalog, registry


@pytest.mark.anyio
async def test_a_tool_step_runs_the_registered_tool_with_a_receipt(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    await env.grant(("set_rate", "look"))
    _, registry, ctl = await _open(env, ledger)
    assert "of_oracle.set_rate" in registry and "of_step.set_rate" not in registry
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}], principal="agent")
    assert prv["steps"][0]["tool"] == "ledger_set" and prv["steps"][0]["kind"] == "tool"
    await ctl.start(prv["previewId"], principal="agent")
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["status"] == "done" and r["result"] == {"key": "eur", "value": 7}
    assert ledger.read() == {"eur": 7} and ledger.runs == 1
    op = next(iter(ctl.state.attempts[r["attemptId"]].operations.values()))
    assert op.readback["prepared"] == {"prior": None} and op.readback["tool"] == "ledger_set"


@pytest.mark.anyio
async def test_an_interrupted_tool_step_is_reconciled_by_the_tools_own_readback(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    await _crash_mid_step(env, ledger)
    assert ledger.read() == {"eur": 7} and ledger.runs == 1
    registry = ToolRegistry([ledger.tool()])
    for t in create_step_tools(env.catalog(), store=None, tools=registry):
        registry.register(t)
    again = await env.open([], registry=registry, execution_journals=None)
    assert again.status(principal="agent")["attempt"]["state"] == "blocked"
    rec = await again.reconcile(principal="agent")
    [one] = rec["reconciled"]
    assert one["verdict"] == "applied" and one["status"] == "done", one
    assert one["evidence"]["observed"] == {"now": 7, "intended": 7, "prior": None}
    assert rec["state"] == "running" and ledger.readbacks == 1
    r = await again.run_step(principal="agent")  # the plan goes on with the next step: set_rate is not run again
    assert r["operation"]["step"] == "look" and ledger.runs == 1


@pytest.mark.anyio
async def test_a_tool_step_that_never_wrote_reconciles_as_not_done_and_runs_again(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.path.write_text(json.dumps({"eur": 3}))
    ledger.die_before_write = True
    await env.grant(("set_rate", "look"))
    _, _, ctl = await _open(env, ledger)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["status"] == "unknown" and r["state"] == "blocked"
    rec = await ctl.reconcile(principal="agent")
    assert rec["reconciled"][0]["verdict"] == "not_applied" and rec["state"] == "running"
    ledger.die_before_write = False
    r = await ctl.run_step(principal="agent")
    assert r["operation"]["status"] == "done" and ledger.read() == {"eur": 7} and ledger.runs == 2


@pytest.mark.anyio
async def test_a_readback_that_fails_or_answers_nonsense_is_inconclusive(env, tmp_path):
    from openfunctions.work._steps import prepare_tool_reconciliation, reconcile_tool_effect

    catalog = env.write_catalog(CATALOG)
    step = catalog.step("set_rate")

    async def boom(params, prepared):
        raise ValueError("ledger offline")

    def nonsense(params, prepared):
        return {"status": "probably"}

    for bad, why in ((boom, "raised ValueError"), (nonsense, "'probably'")):
        tool = define_tool(name="ledger_set", description="d", handler=lambda p, c: {},
                           capability={"effect": "write", "prepare_reconciliation": lambda p: {}, "reconcile_effect": bad})
        rb = await prepare_tool_reconciliation(step, tool, {"key": "eur", "value": 1})
        got = await reconcile_tool_effect(step, tool, rb)
        assert got["status"] == "inconclusive" and why in got["reason"], got
    # a tool changed since the intent: its readback is not trusted
    changed = define_tool(name="ledger_set", description="another version", handler=lambda p, c: {},
                          capability={"effect": "write", "prepare_reconciliation": lambda p: {}, "reconcile_effect": lambda p, q: {"status": "applied"}})
    got = await reconcile_tool_effect(step, changed, rb)
    assert got["status"] == "inconclusive" and "changed since" in got["reason"]


@pytest.mark.anyio
async def test_a_failing_prepare_refuses_the_step_before_it_runs(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")

    def prepare(params):
        raise OSError("cannot read the ledger")

    await env.grant(("set_rate", "look"))
    _, _, ctl = await _open(env, ledger, prepare=prepare)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    with pytest.raises(ReconcileFailed, match="did not run"):
        await ctl.run_step(principal="agent")
    [att] = ctl.state.attempts.values()
    assert ledger.runs == 0 and att.operations == {} and att.state == "started"


@pytest.mark.parametrize(
    ("tools", "field", "words"),
    [
        ({}, "tool", "not registered"),
        ({"binding": False}, "reconcile", "binds no readback"),
        ({"effect": "external"}, "effect", "wider than"),
    ],
)
def test_a_tool_step_that_cannot_be_bound_names_file_step_and_field(tmp_path, tools, field, words):
    env = WorkEnv(tmp_path)
    catalog = env.write_catalog(CATALOG)
    ledger = Ledger(tmp_path / "ledger.json")
    registry = ToolRegistry([ledger.tool(**tools)] if tools else [])
    with pytest.raises(CatalogInvalid) as ei:
        create_step_tools(catalog, store=None, tools=registry)
    assert ei.value.details == {"file": str(env.catalog_path), "step": "set_rate", "field": field}
    assert words in ei.value.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('tool = "of_work_start"', "tool"),
        ('tool = "bad name!"', "tool"),
        ('tool = "x"\neffect = "read"\nreconcile = true', "reconcile"),
        ('tool = "x"\nargv = ["true"]', None),
    ],
)
def test_tool_step_declarations_are_checked(tmp_path, body, field):
    env = WorkEnv(tmp_path)
    with pytest.raises(CatalogInvalid) as ei:
        env.write_catalog(f'[steps.s]\nkind = "tool"\ndescription = "d"\n{body}\n')
    assert ei.value.details.get("step") == "s" and ei.value.details.get("field") == field, ei.value.message


def test_a_tool_step_without_binding_is_not_reconcilable_and_gets_no_oracle(tmp_path):
    env = WorkEnv(tmp_path)
    catalog = env.write_catalog('[steps.s]\nkind = "tool"\ndescription = "d"\ntool = "ledger_set"\neffect = "write"\n')
    ledger = Ledger(tmp_path / "ledger.json")
    out = create_step_tools(catalog, store=None, tools={"ledger_set": ledger.tool(binding=False)})
    assert out == [] and not catalog.step("s").reconcilable and catalog.step("s").tool_name == "ledger_set"
    assert isinstance(Catalog.load(env.catalog_path).step("s").describe()["tool"], str)


@pytest.mark.anyio
async def test_a_readback_that_contradicts_the_intent_is_a_mismatch_and_keeps_the_attempt_blocked(env, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    await _crash_mid_step(env, ledger)

    async def contradicts(params, prepared):
        return {"status": "mismatch", "observed": {"now": "gone"}, "reason": "the key was deleted"}

    tool = ledger.tool()
    cap = tool.capability.model_copy(update={"reconcile_effect": contradicts})
    import dataclasses

    registry = ToolRegistry([dataclasses.replace(tool, capability=cap)])
    for t in create_step_tools(env.catalog(), store=None, tools=registry):
        registry.register(t)
    again = await env.open([], registry=registry, execution_journals=None)
    rec = await again.reconcile(principal="agent")
    [one] = rec["reconciled"]
    assert one["verdict"] == "mismatch" and one["status"] == "unknown" and rec["state"] == "blocked"
    assert one["evidence"]["reason"] == "the key was deleted"


LEDGER_MODULE = '''
import json, os, time
from pathlib import Path
from openfunctions.core import ToolRegistry, define_tool

LEDGER = Path(os.environ["LEDGER_FILE"])

def _read():
    return json.loads(LEDGER.read_text()) if LEDGER.exists() else {}

def set_rate(params, ctx):
    with open(str(LEDGER) + ".runs", "a") as f:
        f.write("ran\\n")
    data = _read()
    data[params["key"]] = params["value"]
    LEDGER.write_text(json.dumps(data))
    Path(str(LEDGER) + ".written").write_text("1")
    time.sleep(float(os.environ.get("LEDGER_SLEEP", "0")))  # the server is killed here
    return {"key": params["key"], "value": params["value"]}

def prepare(params):
    return {"prior": _read().get(params["key"])}

def readback(params, prepared):
    now = _read().get(params["key"])
    if now == params["value"]:
        return {"status": "applied", "observed": {"now": now}, "reason": "the ledger holds the new value"}
    if now == prepared["prior"]:
        return {"status": "not_applied", "observed": {"now": now}, "reason": "the ledger holds the prior value"}
    return {"status": "mismatch", "observed": {"now": now}, "reason": "changed by something else"}

registry = ToolRegistry([define_tool(
    name="ledger_set", description="Set one rate.", handler=set_rate,
    input_schema={"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
                  "required": ["key", "value"], "additionalProperties": False},
    capability={"effect": "write", "prepare_reconciliation": prepare, "reconcile_effect": readback},
)])
'''


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_user_tool_step_killed_mid_run_is_reconciled_over_mcp_by_its_own_readback(env, tmp_path):
    """Pluggable reconciliation: a catalog binds a registered tool as a step (kind 'tool'), so a user's own
    effect is settled by its own readback, not only by an operator."""
    import os
    import signal

    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from ..servers.conftest import serve_argv, server_env
    from ._proc import wait_for

    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "ledgermod.py").write_text(LEDGER_MODULE)
    ledger = tmp_path / "ledger.json"
    env.write_catalog(CATALOG)
    await env.grant(("set_rate", "look"))
    senv = server_env(OPENFUNCTIONS_WORK_CATALOG=str(env.catalog_path), LEDGER_FILE=str(ledger), LEDGER_SLEEP="120")
    senv["PYTHONPATH"] = os.pathsep.join([str(mod_dir), senv["PYTHONPATH"]])
    argv = serve_argv("--profile", "all", "--module", "ledgermod:registry", "--data-dir", str(env.data), "--principal", "agent")

    def client():
        return Client(StdioServerParameters(command=argv[0], args=argv[1:], env=senv), read_timeout_seconds=60)

    plan = [{"step": "set_rate", "params": {"key": "eur", "value": 7}}, {"step": "look", "params": {}}]
    try:
        async with client() as c:
            prv = await c.call_tool("of_work_preview", {"plan": plan})
            assert not prv.is_error, prv
            assert prv.structured_content["steps"][0]["tool"] == "ledger_set"
            await c.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
            async with anyio.create_task_group() as tg:
                tg.start_soon(c.call_tool, "of_work_run_step", {})
                await anyio.to_thread.run_sync(lambda: wait_for(lambda: Path(str(ledger) + ".written").exists(), what="the write"))
                os.kill(json.loads((env.work_dir / "lease.json").read_text())["pid"], signal.SIGKILL)
                tg.cancel_scope.cancel()
    except Exception:
        pass  # the transport fails once its server is gone
    senv["LEDGER_SLEEP"] = "0"
    async with client() as c:
        st = (await c.call_tool("of_work_status", {})).structured_content
        assert st["attempt"]["state"] == "blocked" and st["attempt"]["operations"][0]["status"] == "unknown"
        rec = await c.call_tool("of_work_reconcile", {})
        [one] = rec.structured_content["reconciled"]
        assert one["verdict"] == "applied" and one["status"] == "done", one
        assert one["evidence"]["observed"] == {"now": 7}
        r = await c.call_tool("of_work_run_step", {})
        assert not r.is_error and r.structured_content["operation"]["step"] == "look"
    assert Path(str(ledger) + ".runs").read_text() == "ran\n", "the tool ran once"
    assert json.loads(ledger.read_text()) == {"eur": 7}
