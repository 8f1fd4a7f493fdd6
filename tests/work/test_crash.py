"""Crash safety with real processes: SIGKILL a controller mid-step, restart, never re-run.

The step is a real ``command`` step (a subprocess in its own session) that
appends one line to a counter file and then sleeps. The controller process
is killed with SIGKILL while the command sleeps. A new controller process on
the same data directory must find the attempt ``blocked`` with that
operation ``unknown``, and must not run the command again.
"""

from __future__ import annotations

import hashlib

import pytest

from openfunctions.core.journal import read_records
from tests._harness import alive

from ._catalogs import COUNT_STEP, WRITE_CATALOG
from ._proc import ChildController, kill_pid, wait_for

pytestmark = pytest.mark.slow

def _write_catalog(env) -> None:
    env.write_catalog(COUNT_STEP)


def _counter(env) -> list[str]:
    p = env.ws / "counter.txt"
    return p.read_text().splitlines() if p.exists() else []


@pytest.mark.anyio
async def test_sigkill_mid_step_blocks_with_unknown_operation_and_never_reruns(env):
    _write_catalog(env)
    await env.grant(["count"])
    first = ChildController(env.data, env.catalog_path, "--ttl", "30")
    sleeper_pid = None
    try:
        assert first.ok("open")["generation"] == 1
        prv = first.ok("preview", plan=[{"step": "count", "params": {"seconds": 120}}])
        att = first.ok("start", preview_id=prv["previewId"])
        first.send("run")
        assert first.read()["event"] == "dispatching"
        wait_for(lambda: len(_counter(env)) == 1, what="the command to append its line")
        sleeper_pid = int(_counter(env)[0].split()[1])
        first.kill()  # SIGKILL: no outcome can be recorded

        second = ChildController(env.data, env.catalog_path, "--ttl", "30")
        try:
            # the dead holder's lease is taken over at once (its kernel lock died with it)
            assert second.ok("open")["generation"] == 2
            st = second.ok("status")["attempt"]
            assert st["attemptId"] == att["attemptId"] and st["state"] == "blocked"
            assert st["blockedReason"]["code"] == "effect_uncertain"
            [op] = st["operations"]
            assert op["status"] == "unknown" and op["step"] == "count" and op["leaseGeneration"] == 1
            # asking for more work is refused; nothing is re-run
            r = second.call("run")
            assert r["event"] == "dispatching"
            r = second.read()
            assert not r["ok"] and r["error"]["code"] == "effect_uncertain"
            # the orphaned command still runs: nothing may be concluded yet
            rec = second.ok("reconcile")
            assert rec["reconciled"][0]["verdict"] == "still_running" and rec["state"] == "blocked"
            assert sleeper_pid in rec["reconciled"][0]["evidence"]["pids"]
            kill_pid(sleeper_pid)
            wait_for(lambda: not alive(sleeper_pid), what="the orphan to die")
            # a command step without a readback is inconclusive: reconcile keeps it blocked
            rec = second.ok("reconcile")
            assert rec["reconciled"][0]["verdict"] == "inconclusive" and rec["state"] == "blocked"
            assert len(_counter(env)) == 1, "the command ran at most once"
        finally:
            second.close()
        # restart once more: still blocked, still one run, and the journal holds
        # one intent and no outcome for that operation
        third = ChildController(env.data, env.catalog_path)
        try:
            third.ok("open")
            assert third.ok("status")["attempt"]["state"] == "blocked"
        finally:
            third.close()
        recs = [r for seg in sorted((env.work_dir / "attempts").glob("g*.jsonl")) for r in read_records(seg)]
        assert [r.type for r in recs if r.data.get("operation_id") == op["operationId"]].count("intent") == 1
        assert not [r for r in recs if r.type == "outcome" and r.data.get("operation_id") == op["operationId"]]
        assert len(_counter(env)) == 1
    finally:
        first.close()
        if sleeper_pid is not None:
            kill_pid(sleeper_pid)


@pytest.mark.anyio
async def test_crash_during_write_file_reconciled_by_digest_then_verified_and_completed(env):
    env.write_catalog(WRITE_CATALOG)
    (env.ws / "src").mkdir()
    await env.grant(["write_src", "check"], paths=["src/**"])
    mark = env.data / "pause.mark"
    first = ChildController(env.data, env.catalog_path, "--pause-after", "write_src")
    try:
        first.ok("open")
        prv = first.ok("preview", plan=[{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}])
        first.ok("start", preview_id=prv["previewId"])
        first.send("run")
        assert first.read()["event"] == "dispatching"
        wait_for(mark.exists, what="the write to happen")
        first.kill()  # after the write, before its outcome was recorded
    finally:
        first.close()
    assert (env.ws / "src" / "a.txt").read_text() == "hello"

    second = ChildController(env.data, env.catalog_path)
    try:
        second.ok("open")
        att = second.ok("status")["attempt"]
        assert att["state"] == "blocked" and att["operations"][0]["status"] == "unknown"
        refused = second.call("complete")
        assert not refused["ok"] and refused["error"]["code"] == "proof_invalid"
        rec = second.ok("reconcile")
        [r] = rec["reconciled"]
        assert r["verdict"] == "applied" and r["status"] == "done" and rec["state"] == "running"
        assert r["evidence"]["observed"]["sha256"] == "sha256:" + hashlib.sha256(b"hello").hexdigest()
        # a separate receipt, linked to the original call's receipt (which never settled and is not rewritten)
        assert r["receiptId"] and r["linkedReceiptId"] == att["operations"][0]["receiptId"] != r["receiptId"]
        st = second.ok("status")["attempt"]
        assert st["operations"][0]["status"] == "done" and st["cursor"] == 1
        assert second.ok("verify")["passed"]
        assert second.ok("complete")["state"] == "completed"
    finally:
        second.close()
    assert mark.read_text() == "ran\n", "the write step ran exactly once"
    recs = [r for seg in sorted((env.work_dir / "attempts").glob("g*.jsonl")) for r in read_records(seg)]
    assert [r.type for r in recs].count("intent") == 1
    [recon] = [r for r in recs if r.type == "reconciliation"]
    assert recon.data["receipt"]["tool"] == "of_oracle.write_src" and recon.data["linked_operation_id"] == att["operations"][0]["operationId"]
    [dispatched] = [r for r in recs if r.type == "dispatched"]
    assert recon.data["linked_receipt_id"] == dispatched.data["receipt_id"]
