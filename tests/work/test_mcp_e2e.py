"""The work profile end to end: ``openfunctions-mcp serve --profile work`` as a real subprocess,
driven by the official SDK client over stdio and over streamable HTTP.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openfunctions.servers import RECEIPT_META_KEY

from ..servers.conftest import free_port, serve_argv, server_env, wait_for_file, wait_for_port
from .test_crash import WRITE_CATALOG

pytestmark = pytest.mark.slow

INJECT = Path(__file__).with_name("_inject")
PLAN = [{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}]


async def _setup(env) -> dict[str, str]:
    env.write_catalog(WRITE_CATALOG)
    (env.ws / "src").mkdir()
    await env.grant(["write_src", "check"], paths=["src/**"])
    return server_env(OPENFUNCTIONS_WORK_CATALOG=str(env.catalog_path))


def _argv(env, *extra: str) -> list[str]:
    return serve_argv("--profile", "work", "--data-dir", str(env.data), "--principal", "agent", *extra)


async def _lifecycle(client) -> dict:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(
        ["of_work_catalog", "of_work_preview", "of_work_start", "of_work_status", "of_work_run_step", "of_work_verify",
         "of_work_reconcile", "of_work_complete", "of_work_cancel", "of_work_artifact_read"]
    )
    assert tools["of_work_status"].annotations.read_only_hint is True
    assert tools["of_work_run_step"].annotations.read_only_hint is False
    assert all(t.output_schema for t in tools.values())
    seen = []

    async def on_progress(p, total, message):
        seen.append(message)

    cat = await client.call_tool("of_work_catalog", {})
    assert not cat.is_error and cat.structured_content["grants"][0]["principal"] == "agent"
    bad = await client.call_tool("of_work_preview", {"plan": [{"step": "nope"}]})
    assert bad.is_error and bad.meta[RECEIPT_META_KEY]["outcome"] == "rejected"
    prv = await client.call_tool("of_work_preview", {"plan": PLAN})
    start = await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
    step = await client.call_tool("of_work_run_step", {}, progress_callback=on_progress)
    assert step.structured_content["operation"]["status"] == "done", step
    verify = await client.call_tool("of_work_verify", {}, progress_callback=on_progress)
    assert verify.structured_content["passed"] is True, verify
    assert any(m and "finished" in m for m in seen), "the verifier command reported progress"
    done = await client.call_tool("of_work_complete", {})
    assert done.structured_content["state"] == "completed" and done.meta[RECEIPT_META_KEY]["outcome"] == "succeeded"
    art = await client.call_tool("of_work_artifact_read", {"artifact_id": prv.structured_content["artifactId"]})
    assert not art.is_error and art.structured_content["eof"] is True
    return {"attempt": start.structured_content["attemptId"]}


@pytest.mark.anyio
async def test_lifecycle_over_stdio(env):
    senv = await _setup(env)
    argv = _argv(env)
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=senv), read_timeout_seconds=60) as client:
        await _lifecycle(client)
    assert (env.ws / "src" / "a.txt").read_text() == "hello"


class HttpServer:
    def __init__(self, env, senv: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            _argv(env, "--transport", "http", "--port", str(self.port)),
            env=senv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.mark.anyio
async def test_lifecycle_over_http(env):
    srv = HttpServer(env, await _setup(env))
    try:
        async with Client(srv.url, read_timeout_seconds=60) as client:
            await _lifecycle(client)
    finally:
        srv.stop()


@pytest.mark.anyio
async def test_sigkill_the_server_during_write_file_then_reconcile_verify_complete(env):
    senv = await _setup(env)
    mark = env.root / "write.mark"
    crashing = dict(senv, OPENFUNCTIONS_TEST_PAUSE_AFTER_WRITE=str(mark),
                    PYTHONPATH=os.pathsep.join([str(INJECT), senv.get("PYTHONPATH", "")]))
    srv = HttpServer(env, crashing)
    started = False
    try:
        async with Client(srv.url, read_timeout_seconds=60) as client:
            prv = await client.call_tool("of_work_preview", {"plan": PLAN})
            await client.call_tool("of_work_start", {"previewId": prv.structured_content["previewId"]})
            started = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "of_work_run_step", {})
                await anyio.to_thread.run_sync(wait_for_file, mark)
                srv.stop()  # SIGKILL after the write, before its outcome is recorded
                tg.cancel_scope.cancel()
    except Exception:
        # the client's transport fails once its server is gone; that is the point
        assert started and mark.exists()
    finally:
        srv.stop()
    assert (env.ws / "src" / "a.txt").read_text() == "hello"

    counted = env.root / "writes-after-restart.log"
    restarted = dict(senv, OPENFUNCTIONS_TEST_COUNT_WRITES=str(counted),
                     PYTHONPATH=os.pathsep.join([str(INJECT), senv.get("PYTHONPATH", "")]))
    srv = HttpServer(env, restarted)
    try:
        async with Client(srv.url, read_timeout_seconds=60) as client:
            st = (await client.call_tool("of_work_status", {})).structured_content["attempt"]
            assert st["state"] == "blocked" and st["operations"][0]["status"] == "unknown"
            refused = await client.call_tool("of_work_complete", {})
            assert refused.is_error
            rec = await client.call_tool("of_work_reconcile", {})
            [r] = rec.structured_content["reconciled"]
            assert r["verdict"] == "applied" and r["linkedReceiptId"] == st["operations"][0]["receiptId"]
            assert r["evidence"]["observed"]["sha256"] == "sha256:" + hashlib.sha256(b"hello").hexdigest()
            verify = await client.call_tool("of_work_verify", {})
            assert verify.structured_content["passed"] is True
            done = await client.call_tool("of_work_complete", {})
            assert done.structured_content["state"] == "completed"
    finally:
        srv.stop()
    assert mark.read_text() == "ran\n", "the write ran once before the crash"
    assert not counted.exists(), "the restarted server never re-ran the uncertain write"
