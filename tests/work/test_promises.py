"""The controller's promises that an agent cannot time from outside, tried in-process.

Each docstring says what went wrong without the guarantee it checks. The
live == replay property ("one record format, one fold") is in test_fold.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core import define_tool
from openfunctions.work._errors import GrantRevoked, PathOutsideGrant, PlanInvalid

from .test_controller import CATALOG, PLAN

pytestmark = pytest.mark.anyio


def _tools(gate: dict[str, Any]) -> list:
    async def handler_for(name: str, params: dict, ctx) -> dict:
        if name == "check" and gate.get("check") is not None:
            gate["entered"].set()
            await gate["check"].wait()
        return {"exit_code": 0, "step": name}

    def make(name: str, effect: str):
        async def handler(params: dict, ctx) -> dict:
            return await handler_for(name, params, ctx)

        return define_tool(name=f"of_step.{name}", description=name, input_schema={"type": "object"}, handler=handler,
                           capability={"effect": effect, "parallel_safe": effect == "read"})

    return [make("bump", "write"), make("look", "read"), make("check", "external")]


CATALOG_IDEMPOTENT_CHECK = CATALOG.replace('effect = "external"\nverifier = true', 'effect = "external"\nverifier = true\nidempotent = true')


async def test_a_cancelled_verify_does_not_wedge_the_controller(env):
    """A verifier's unknown receipt must not make run_step say "reconcile first" while reconcile finds
    nothing (an in-memory flag that only a restart would clear)."""
    env.write_catalog(CATALOG_IDEMPOTENT_CHECK)
    await env.grant(("bump", "look", "check"))
    gate: dict[str, Any] = {"check": anyio.Event(), "entered": anyio.Event()}
    ctl = await env.open(_tools(gate))
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: ctl.verify(principal="agent"))
            await gate["entered"].wait()
            scope.cancel()
    r = await ctl.run_step(principal="agent")  # not EffectUncertain "reconcile first"
    assert r["operation"]["status"] == "done"
    st = ctl.status(principal="agent")["attempt"]
    assert st["state"] == "running" and st["proof"] is None
    [ver] = [o for o in st["operations"] if o.get("purpose") == "verify"]
    assert ver["status"] == "failed"  # idempotent verifier: re-running it is harmless, nothing is left open
    assert (await ctl.reconcile(principal="agent"))["reconciled"] == []
    gate["check"] = None
    assert (await ctl.verify(principal="agent"))["passed"]
    assert (await ctl.complete(principal="agent"))["state"] == "completed"


async def test_a_cancelled_non_idempotent_verifier_is_an_uncertain_effect(env):
    """Verifiers are effects: one with an external effect, cut off mid-run, blocks like a step (never silently 'running')."""
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"))
    gate: dict[str, Any] = {"check": anyio.Event(), "entered": anyio.Event()}
    ctl = await env.open(_tools(gate))
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: ctl.verify(principal="agent"))
            await gate["entered"].wait()
            scope.cancel()
    st = ctl.status(principal="agent")["attempt"]
    [ver] = [o for o in st["operations"] if o.get("purpose") == "verify"]
    assert ver["status"] == "unknown" and st["state"] == "blocked"
    assert st["blockedReason"]["operations"] == [ver["operationId"]]
    # and a restart reads the same
    before = ctl.status(principal="agent")
    await ctl.close()
    again = await env.open(_tools({}))
    assert again.status(principal="agent") == before


async def test_completion_sees_a_grant_revoked_during_its_readback(env):
    """The grant check runs after the awaited fingerprint readback, and the fence checks more than expiry."""
    env.write_catalog(CATALOG)
    g = await env.grant(("bump", "look", "check"))
    ctl = await env.open(_tools({}))
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    assert (await ctl.verify(principal="agent"))["passed"]
    real = ctl._fingerprints

    async def revoking(patterns=None):
        out = await real(patterns)
        await env.grants().revoke(g.grant_id, by="operator")  # lands while completion awaits its readback
        return out

    ctl._fingerprints = revoking
    with pytest.raises(GrantRevoked):
        await ctl.complete(principal="agent")
    st = ctl.status(principal="agent")["attempt"]
    assert st["state"] == "blocked" and st["blockedReason"]["code"] == "grant_revoked"


async def test_the_completion_fence_itself_rechecks_revocation(env):
    """The synchronous fence re-reads the grants file: a revocation after the last awaited check still refuses."""
    env.write_catalog(CATALOG)
    g = await env.grant(("bump", "look", "check"))
    ctl = await env.open(_tools({}))
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    assert (await ctl.verify(principal="agent"))["passed"]
    real = ctl._authorize_plan

    async def then_revoke(principal, att):
        out = await real(principal, att)
        await env.grants().revoke(g.grant_id, by="operator")
        return out

    ctl._authorize_plan = then_revoke
    with pytest.raises(GrantRevoked, match="while completion was being checked"):
        await ctl.complete(principal="agent")
    assert ctl.status(principal="agent")["attempt"]["state"] == "blocked"


async def test_a_proof_whose_verifier_changed_the_subject_does_not_complete(env):
    from openfunctions.work._errors import ProofInvalid

    env.write_catalog(CATALOG + '\n[steps.snap]\nkind = "fingerprint"\ndescription = "subject"\npaths = ["src/**"]\n')
    (env.ws / "src").mkdir()
    await env.grant(("bump", "look", "check", "snap"))
    ws = env.ws

    def tools():
        out = _tools({})
        async def check(params: dict, ctx) -> dict:
            (ws / "src" / "made_by_the_verifier.txt").write_text("x")
            return {"exit_code": 0, "step": "check"}
        out[2] = define_tool(name="of_step.check", description="check", input_schema={"type": "object"}, handler=check,
                             capability={"effect": "external"})
        return out

    ctl = await env.open(tools())
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    v = await ctl.verify(principal="agent")
    assert v["passed"] and v["fingerprintsStable"] is False
    with pytest.raises(ProofInvalid, match="fingerprints before != after"):
        await ctl.complete(principal="agent")


def test_slot_patterns_match_the_whole_value(tmp_path: Path) -> None:
    """Without anchoring, "hello\\n" would pass pattern [a-z]+ (Python's $ matches before a final newline)."""
    from openfunctions.core import ToolRegistry
    from openfunctions.work._catalog import Catalog

    (tmp_path / "ws").mkdir()
    (tmp_path / "c.toml").write_text(
        'version = 1\nworkspace = "ws"\n[steps.say]\nkind = "command"\ndescription = "say"\n'
        'argv = ["echo", "{word}"]\neffect = "read"\n[steps.say.params.word]\ntype = "string"\npattern = "[a-z]+"\n'
    )
    step = Catalog.load(tmp_path / "c.toml").step("say")
    assert step.expand_argv({"word": "hello"}) == ["echo", "hello"]
    for bad in ("hello\n", "hello\nworld", "\nhello", "hello "):
        with pytest.raises(PlanInvalid):
            step.validate_params({"word": bad})
    # the published schema says the same to every JSON Schema validator (the executor's included)
    from openfunctions.core import define_tool as _define

    t = _define(name="x", description="x", input_schema=step.params_schema, handler=lambda p, c: {})
    assert ToolRegistry([t]).get("x").input_validator.violations({"word": "hello\n"})
    assert not ToolRegistry([t]).get("x").input_validator.violations({"word": "hello"})


def test_a_directory_swapped_for_a_symlink_right_after_mkdir_is_refused(tmp_path: Path, monkeypatch) -> None:
    """The re-open after mkdir sits inside the try block: outside it, the swap would escape as a
    raw OSError (the write was recorded unknown and the attempt blocked) instead of a clean refusal."""
    from openfunctions.work import _steps as steps

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    real_mkdir = os.mkdir

    def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        os.rmdir(path, dir_fd=dir_fd)
        os.symlink(str(outside), path, dir_fd=dir_fd)

    monkeypatch.setattr(steps.os, "mkdir", mkdir_then_swap)
    with pytest.raises(PathOutsideGrant, match="no longer a plain directory"):
        steps.write_atomically((ws / "src" / "new" / "a.txt").resolve(), b"pwned")
    assert list(outside.iterdir()) == []
