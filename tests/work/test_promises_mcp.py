"""The controller's promises, tried as an agent would: the real server over stdio, the SDK client.

One test per promise an agent can put to the test; the docstring of each
says what would go wrong without it. SIGKILLs are real (the server's pid is read from
the lease file it holds); orphaned commands are real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openfunctions.servers import RECEIPT_META_KEY
from tests._harness import alive

from ..servers.conftest import serve_argv, server_env
from ._proc import kill_pid, wait_for
from .test_crash import WRITE_CATALOG

pytestmark = pytest.mark.slow

COUNT = (
    "import os,sys,time\n"
    "with open('counter.txt','a') as f:\n"
    "    f.write('ran %d\\n' % os.getpid()); f.flush(); os.fsync(f.fileno())\n"
    "time.sleep(float(sys.argv[1]))\n"
)
# writes its readback file only at the end: a readback taken while it sleeps sees nothing yet
STAMP = (
    "import os,sys,time\n"
    "open('stamp.pid','w').write(str(os.getpid()))\n"
    "time.sleep(float(sys.argv[1]))\n"
    "with open('out/log.txt','a') as f:\n"
    "    f.write('stamped\\n')\n"
)
EMIT = "import sys; sys.stdout.write('x' * 5000)"

CATALOG = WRITE_CATALOG + f"""
[steps.count]
kind = "command"
description = "append a line to counter.txt, then sleep"
argv = ['{sys.executable}', '-c', '''{COUNT}''', '{{seconds}}']
effect = "external"
timeout_s = 300
env = ["PATH"]
[steps.count.params.seconds]
type = "integer"
minimum = 0
maximum = 600

[steps.stamp]
kind = "command"
description = "sleep, then append to out/log.txt"
argv = ['{sys.executable}', '-c', '''{STAMP}''', '{{seconds}}']
effect = "write"
timeout_s = 300
env = ["PATH"]
readback = {{ paths = ["out/**"], changes_on_apply = true }}
[steps.stamp.params.seconds]
type = "integer"
minimum = 0
maximum = 600

[steps.emit]
kind = "command"
description = "print 5000 bytes"
argv = ['{sys.executable}', '-c', "{EMIT}"]
effect = "read"

[steps.read_src]
kind = "read_file"
description = "read a file under src/"
paths = ["src/**"]
"""


async def _setup(env) -> dict[str, str]:
    env.write_catalog(CATALOG)
    (env.ws / "src").mkdir()
    (env.ws / "out").mkdir()
    await env.grant(["write_src", "check", "count", "stamp", "emit", "read_src"], paths=["src/**"])
    return server_env(OPENFUNCTIONS_WORK_CATALOG=str(env.catalog_path))


def _client(env, senv):
    argv = serve_argv("--profile", "work", "--data-dir", str(env.data), "--principal", "agent")
    return Client(StdioServerParameters(command=argv[0], args=argv[1:], env=senv), read_timeout_seconds=60)


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines() if p.exists() else []


async def _kill_server_during_step(env, senv, plan: list[dict], started) -> dict:
    """Preview + start ``plan``, run its first step, SIGKILL the server once ``started()`` holds."""
    info: dict = {}
    try:
        async with _client(env, senv) as client:
            prv = await client.call_tool("of_work_preview", {"plan": plan})
            assert not prv.is_error, prv
            info["previewId"] = prv.structured_content["previewId"]
            att = await client.call_tool("of_work_start", {"previewId": info["previewId"]})
            info["attemptId"] = att.structured_content["attemptId"]
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "of_work_run_step", {})
                await anyio.to_thread.run_sync(lambda: wait_for(started, what="the command to start"))
                pid = json.loads((env.work_dir / "lease.json").read_text())["pid"]
                os.kill(pid, signal.SIGKILL)
                info["server_pid"] = pid
                tg.cancel_scope.cancel()
    except Exception:
        # the client's transport fails once its server is gone; that is the point
        assert "server_pid" in info
    return info


def _cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "work", *args, "--data-dir", str(env.data)],
        env=server_env(), capture_output=True, text=True, timeout=60,
    )


@pytest.mark.anyio
async def test_cancel_and_start_again_never_reruns_an_uncertain_effect(env):
    """After cancel, of_work_start (same preview) and of_work_run_step must not run the command again (2 lines)."""
    senv = await _setup(env)
    counter = env.ws / "counter.txt"
    plan = [{"step": "count", "params": {"seconds": 120}}]
    info = await _kill_server_during_step(env, senv, plan, lambda: len(_lines(counter)) == 1)
    sleeper = int(_lines(counter)[0].split()[1])
    kill_pid(sleeper)  # the command is over (its fate unknown to the server)
    await anyio.to_thread.run_sync(lambda: wait_for(lambda: not alive(sleeper), what="the command to die"))

    async with _client(env, senv) as client:
        st = (await client.call_tool("of_work_status", {})).structured_content
        [op] = st["attempt"]["operations"]
        assert st["attempt"]["state"] == "blocked" and op["status"] == "unknown"
        rec = await client.call_tool("of_work_reconcile", {})
        assert rec.structured_content["reconciled"][0]["verdict"] == "inconclusive"
        c = await client.call_tool("of_work_cancel", {})
        assert c.structured_content["state"] == "cancelled"
        again = await client.call_tool("of_work_start", {"previewId": info["previewId"]})
        assert again.is_error, "main started a new attempt here (and of_work_run_step then ran the command a second time)"
        assert c.structured_content["uncertainOperations"] == [op["operationId"]]
        assert again.meta[RECEIPT_META_KEY]["error"]["code"] == "operation_uncertain"
        text = again.content[0].text
        assert op["operationId"] in text and "work resolve" in text
        fresh = await client.call_tool("of_work_preview", {"plan": plan})
        assert fresh.is_error and fresh.meta[RECEIPT_META_KEY]["error"]["code"] == "operation_uncertain"
        # problem 5: a refused verify ran nothing: a known refusal
        v = await client.call_tool("of_work_verify", {})
        assert v.is_error and v.meta[RECEIPT_META_KEY]["certainty"] == "known"  # not "unknown"
        st = (await client.call_tool("of_work_status", {})).structured_content
        assert st["controller"]["openUncertain"][0]["operationId"] == op["operationId"]
        assert len(_lines(counter)) == 1

        # the operator looks, then resolves it (the server is running meanwhile)
        listed = _cli(env, "list-uncertain", "--json")
        assert listed.returncode == 0 and [r["operationId"] for r in json.loads(listed.stdout)] == [op["operationId"]]
        bad = _cli(env, "resolve", "op_" + "0" * 32, "--as", "applied", "--reason", "x")
        assert bad.returncode == 2 and "no uncertain operation" in bad.stderr
        ok = _cli(env, "resolve", op["operationId"], "--as", "applied", "--reason", "counter.txt has its one line")
        assert ok.returncode == 0, ok.stderr
        fresh = await client.call_tool("of_work_preview", {"plan": plan})
        assert not fresh.is_error, fresh
        st = (await client.call_tool("of_work_status", {"attemptId": info["attemptId"]})).structured_content
        [op2] = st["attempt"]["operations"]
        assert op2["status"] == "done" and op2["resolution"]["reason"] == "counter.txt has its one line"
    assert len(_lines(counter)) == 1, "the command ran once"
    assert json.loads(_cli(env, "list-uncertain", "--json").stdout) == []
    shown = _cli(env, "show", info["attemptId"])
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "cancelled"


@pytest.mark.anyio
async def test_an_orphaned_command_is_never_read_back_while_it_runs(env):
    """Reconcile must not read the readback before the orphan wrote it: it would say not_applied,
    and the step would run again, appending the line twice."""
    senv = await _setup(env)
    log = env.ws / "out" / "log.txt"
    pidfile = env.ws / "stamp.pid"
    plan = [{"step": "stamp", "params": {"seconds": 90}}]
    await _kill_server_during_step(env, senv, plan, pidfile.exists)
    orphan = int(pidfile.read_text())
    assert alive(orphan), "the command outlived its server"
    try:
        async with _client(env, senv) as client:
            rec = await client.call_tool("of_work_reconcile", {})
            [r] = rec.structured_content["reconciled"]
            assert r["verdict"] == "still_running" and orphan in r["evidence"]["pids"]  # not "not_applied"
            assert rec.structured_content["state"] == "blocked"
            refused = await client.call_tool("of_work_run_step", {})
            assert refused.is_error
            # the operator cannot conclude either while it runs
            busy = _cli(env, "resolve", r["operationId"], "--as", "not-applied", "--reason", "looked")
            assert busy.returncode == 1 and "still has running processes" in busy.stderr
            c = await client.call_tool("of_work_cancel", {})
            assert c.structured_content["killed"][r["operationId"]] == [orphan]
            assert not alive(orphan)
            # dead now: the readback may conclude, on the cancelled attempt
            rec = await client.call_tool("of_work_reconcile", {})
            assert rec.structured_content["reconciled"][0]["verdict"] == "not_applied"
            assert not (await client.call_tool("of_work_preview", {"plan": plan})).is_error
    finally:
        kill_pid(orphan)
    assert _lines(log) == [], "the effect happened at most once (here: never, it was killed first)"


@pytest.mark.anyio
async def test_an_artifact_id_laundered_through_a_file_stays_unreadable(env):
    """An attempt-1 id written to a file and read back in attempt 2 does not become readable."""
    senv = await _setup(env)
    async with _client(env, senv) as client:
        prv = await client.call_tool("of_work_preview", {"plan": [{"step": "emit"}]})
        await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
        r = await client.call_tool("of_work_run_step", {})
        art = r.structured_content["result"]["stdout"]["artifact_id"]
        assert not (await client.call_tool("of_work_artifact_read", {"artifact_id": art})).is_error  # its own attempt's
        await client.call_tool("of_work_cancel", {})
        plan = [{"step": "write_src", "params": {"path": "src/id.txt", "content": art}},
                {"step": "read_src", "params": {"path": "src/id.txt"}}]
        prv = await client.call_tool("of_work_preview", {"plan": plan})
        await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
        assert (await client.call_tool("of_work_artifact_read", {"artifact_id": art})).is_error
        await client.call_tool("of_work_run_step", {})
        read = await client.call_tool("of_work_run_step", {})
        assert read.structured_content["result"]["content"] == art
        laundered = await client.call_tool("of_work_artifact_read", {"artifact_id": art})
        assert laundered.is_error, "main served attempt 1's artifact to attempt 2 here"
        unknown = await client.call_tool("of_work_artifact_read", {"artifact_id": "art_" + "0" * 32})
        assert laundered.content[0].text.replace(art, "ID") == unknown.content[0].text.replace("art_" + "0" * 32, "ID"), \
            "foreign and unknown ids read the same"


@pytest.mark.anyio
async def test_step_and_index_that_contradict_are_refused(env):
    """{"step": "check", "index": 0} must not run plan[0] (write_src), ignoring the step name."""
    senv = await _setup(env)
    async with _client(env, senv) as client:
        plan = [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}, {"step": "check"}]
        prv = await client.call_tool("of_work_preview", {"plan": plan})
        await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
        r = await client.call_tool("of_work_run_step", {"step": "check", "index": 0})
        assert r.is_error and "plan[0] is step 'write_src', not 'check'" in r.content[0].text
        assert r.meta[RECEIPT_META_KEY]["certainty"] == "known"
        assert not (env.ws / "src" / "a.txt").exists()
        ok = await client.call_tool("of_work_run_step", {"step": "write_src", "index": 0})
        assert ok.structured_content["operation"]["status"] == "done"


@pytest.mark.anyio
async def test_status_reads_the_same_after_a_restart_when_a_write_voided_the_proof(env):
    """A write after verification voids the proof: live status shows it null, and so does status after a restart."""
    senv = await _setup(env)
    plan = [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}},
            {"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}]
    async with _client(env, senv) as client:
        prv = await client.call_tool("of_work_preview", {"plan": plan})
        await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
        await client.call_tool("of_work_run_step", {})
        v = await client.call_tool("of_work_verify", {})
        assert v.structured_content["passed"] is True
        await client.call_tool("of_work_run_step", {})  # a write after verification
        live = (await client.call_tool("of_work_status", {})).structured_content
        assert live["attempt"]["proof"] is None
    async with _client(env, senv) as client:
        replayed = (await client.call_tool("of_work_status", {})).structured_content
    assert replayed["attempt"]["proof"] is None
    assert replayed == live


@pytest.mark.anyio
async def test_two_clients_racing_on_one_server_get_one_attempt_and_one_run(env):
    """Hostile table: concurrent of_work_* calls from two clients on one HTTP server."""
    from .test_mcp_e2e import HttpServer

    senv = await _setup(env)
    srv = HttpServer(env, senv)
    counter = env.ws / "counter.txt"
    try:
        async with Client(srv.url, read_timeout_seconds=60) as a, Client(srv.url, read_timeout_seconds=60) as b:
            prv = await a.call_tool("of_work_preview", {"plan": [{"step": "count", "params": {"seconds": 0}}]})
            pid = prv.structured_content["previewId"]
            starts: list = []

            async def start(c):
                starts.append(await c.call_tool("of_work_start", {"previewId": pid}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(start, a)
                tg.start_soon(start, b)
            ok = [r for r in starts if not r.is_error]
            refused = [r for r in starts if r.is_error]
            assert len(ok) == 1 and len(refused) == 1
            assert refused[0].meta[RECEIPT_META_KEY]["error"]["code"] == "attempt_active"
            runs: list = []

            async def run(c):
                runs.append(await c.call_tool("of_work_run_step", {}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, a)
                tg.start_soon(run, b)
            done = [r for r in runs if not r.is_error]
            assert len(done) == 1 and done[0].structured_content["operation"]["status"] == "done"
            assert "every step of the plan has run" in [r for r in runs if r.is_error][0].content[0].text
    finally:
        srv.stop()
    assert len(_lines(counter)) == 1, "the step ran once"
