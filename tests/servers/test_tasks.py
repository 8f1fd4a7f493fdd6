"""MCP tasks (io.modelcontextprotocol/tasks, SEP-2663) over real transports: durable across SIGKILL,
scoped to their principal, cancellable, gated on the extension.

Requests are hand-written 2026-07-28 JSON-RPC (per-request ``_meta`` and the
SEP-2243 headers), so each test says exactly what goes on the wire.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from openfunctions.core.journal import read_records

from .conftest import free_port, serve_argv, server_env, wait_for_file, wait_for_port

PROTOCOL = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
TASK_ID_RE = re.compile(r"^task_[0-9a-f]{32}$")


def _body(method: str, params: dict[str, Any], rid: int, tasks: bool) -> dict[str, Any]:
    caps: dict[str, Any] = {"extensions": {EXT: {}}} if tasks else {}
    meta = {"io.modelcontextprotocol/protocolVersion": PROTOCOL, "io.modelcontextprotocol/clientCapabilities": caps}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": meta}}


def _headers(method: str, params: dict[str, Any], token: str | None) -> dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": method}
    name = params.get("name") if method == "tools/call" else params.get("taskId") if method.startswith("tasks/") else None
    if isinstance(name, str):
        h["Mcp-Name"] = name
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


def _parse(resp: httpx.Response, rid: int) -> dict[str, Any]:
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        for line in resp.text.splitlines():
            if line.startswith("data:"):
                msg = json.loads(line[5:].strip() or "null")
                if isinstance(msg, dict) and msg.get("id") == rid:
                    return msg
        raise AssertionError(f"no response with id {rid} in the stream: {resp.text[:2000]}")
    return resp.json()


class Http:
    """A 2026-07-28 client over plain HTTP."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self.token, self._id = url, token, 0

    def rpc(self, method: str, params: dict[str, Any] | None = None, *, tasks: bool = True) -> dict[str, Any]:
        self._id += 1
        params = params or {}
        resp = httpx.post(self.url, json=_body(method, params, self._id, tasks),
                          headers=_headers(method, params, self.token), timeout=30)
        return _parse(resp, self._id)

    def result(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        msg = self.rpc(method, params, **kw)
        assert "result" in msg, msg
        return msg["result"]

    def until(self, task_id: str, statuses: set[str], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.result("tasks/get", {"taskId": task_id})
            if got["status"] in statuses:
                return got
            assert time.monotonic() < deadline, f"task {task_id} stayed {got['status']}"
            time.sleep(0.05)


class Served:
    """``openfunctions-mcp serve --transport http`` on the task fixture tools, restartable on one data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.proc, self.url = data_dir, None, ""

    def start(self) -> Http:
        port = free_port()
        argv = serve_argv("--transport", "http", "--port", str(port), "--module", "task_fixture_tools:registry",
                          "--data-dir", str(self.data_dir), "--log-level", "warning")
        self.proc = subprocess.Popen(argv, env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(port, self.proc)
        self.url = f"http://127.0.0.1:{port}/mcp"
        return Http(self.url)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "data")
    yield s
    s.stop()


def _create(client: Http, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    created = client.result("tools/call", {"name": name, "arguments": arguments})
    assert created["resultType"] == "task", created
    assert TASK_ID_RE.match(created["taskId"]), created["taskId"]
    return created


@pytest.mark.slow
def test_a_finished_tasks_result_survives_sigkill(served: Served) -> None:
    client = served.start()
    created = _create(client, "task_quick", {"text": "kept"})
    assert created["status"] == "working" and isinstance(created["ttlMs"], int) and "result" not in created
    done = client.until(created["taskId"], {"completed"})
    assert done["result"]["structuredContent"] == {"answer": 42, "text": "kept"}
    receipt = done["result"]["_meta"]["dev.openfunctions/receipt"]
    assert receipt["outcome"] == "succeeded"

    served.kill9()
    client = served.start()
    again = client.result("tasks/get", {"taskId": created["taskId"]})
    assert again["status"] == "completed"
    assert again["result"] == done["result"]
    assert again["createdAt"] == created["createdAt"]


@pytest.mark.slow
def test_a_large_result_is_kept_as_an_artifact_and_inlined_again_after_sigkill(served: Served) -> None:
    import hashlib

    client = served.start()
    created = _create(client, "task_big", {"size": 400_000})
    done = client.until(created["taskId"], {"completed"})
    assert done["result"]["content"] == [{"type": "text", "text": "x" * 400_000}]
    journal = served.data_dir / "journal" / "tools.tasks.journal"
    settled = [r.data for r in read_records(journal) if r.type == "task.settled"]
    assert len(settled) == 1 and "result" not in settled[0]
    art = settled[0]["result_artifact"]
    assert re.fullmatch(r"art_[0-9a-f]{32}", art), art
    # The artifact store's own index record: scoped to the task, digest and size as the task recorded them.
    index = json.loads((served.data_dir / "artifacts" / "index" / f"{art}.json").read_text())
    assert index["scope"] == f"task:{created['taskId']}" and index["media_type"] == "application/json"
    assert index["sha256"] == settled[0]["result_sha256"] and index["size"] == settled[0]["result_size"] > 400_000
    blob = (served.data_dir / "artifacts" / "blobs" / index["sha256"][7:]).read_bytes()
    assert "sha256:" + hashlib.sha256(blob).hexdigest() == index["sha256"]
    assert json.loads(blob) == done["result"]
    assert journal.stat().st_size < 10_000  # the journal itself stays small
    # tasks/get says where the result lives, for a client that reads it in bounded chunks (of_artifact_read).
    assert done["_meta"]["dev.openfunctions/task"]["resultArtifact"] == {
        "id": art, "sha256": index["sha256"], "size": index["size"], "mediaType": "application/json"}
    served.kill9()
    client = served.start()
    assert client.result("tasks/get", {"taskId": created["taskId"]})["result"] == done["result"]


@pytest.mark.slow
def test_a_task_running_at_sigkill_is_failed_unknown_with_its_receipt_and_not_rerun(served: Served, tmp_path: Path) -> None:
    client = served.start()
    markers = tmp_path / "m"
    created = _create(client, "task_slow", {"dir": str(markers)})
    wait_for_file(markers / "started")
    started = json.loads((markers / "started").read_text())
    assert started["task_id"] == created["taskId"]
    assert client.result("tasks/get", {"taskId": created["taskId"]})["status"] == "working"

    served.kill9()
    (markers / "started").unlink()
    client = served.start()
    got = client.result("tasks/get", {"taskId": created["taskId"]})
    assert got["status"] == "failed", got
    assert "result" not in got
    error = got["error"]
    assert isinstance(error["code"], int) and "not re-run" in error["message"]
    assert error["data"]["certainty"] == "unknown"
    receipt = error["data"]["receipt"]
    assert receipt["receipt_id"] == started["receipt_id"]
    assert receipt["recovered"] is True and receipt["outcome"] == "unknown" and receipt["certainty"] == "unknown"
    # The receipt is the execution journal's own recovered receipt, not one made up for the reply.
    journal = served.data_dir / "journal" / "tools.journal"
    in_journal = [r.data for r in read_records(journal) if r.type == "receipt" and r.data["receipt_id"] == started["receipt_id"]]
    assert in_journal == [receipt]
    # Never re-run: recovery dispatches nothing, so the handler never started again.
    assert not (markers / "started").exists()
    # And the settlement is durable: a second restart answers the same.
    served.kill9()
    client = served.start()
    assert client.result("tasks/get", {"taskId": created["taskId"]}) == got


@pytest.mark.slow
def test_tasks_cancel_reaches_the_handler(served: Served, tmp_path: Path) -> None:
    client = served.start()
    markers = tmp_path / "m"
    created = _create(client, "task_slow", {"dir": str(markers)})
    wait_for_file(markers / "started")
    ack = client.result("tasks/cancel", {"taskId": created["taskId"]})
    assert ack == {"resultType": "complete", **({"_meta": ack["_meta"]} if "_meta" in ack else {})}
    wait_for_file(markers / "cancelled")
    got = client.until(created["taskId"], {"cancelled", "completed", "failed"})
    assert got["status"] == "cancelled"
    # Cancelling a terminal task is the same empty ack.
    assert client.result("tasks/cancel", {"taskId": created["taskId"]})["resultType"] == "complete"


@pytest.mark.slow
def test_without_the_extension_tasks_methods_and_required_tools_are_refused(served: Served) -> None:
    client = served.start()
    err = client.rpc("tasks/get", {"taskId": "task_" + "0" * 32}, tasks=False)["error"]
    assert err["code"] == -32021
    assert err["data"]["requiredCapabilities"]["extensions"] == {EXT: {}}
    err = client.rpc("tools/call", {"name": "task_required", "arguments": {}}, tasks=False)["error"]
    assert err["code"] == -32021 and "task_required" in err["message"]
    # An optional-task tool answers synchronously for such a client.
    sync = client.result("tools/call", {"name": "task_quick", "arguments": {}}, tasks=False)
    assert sync["resultType"] == "complete" and sync["structuredContent"]["answer"] == 42 and "taskId" not in sync
    # A sync-only tool never becomes a task, even for a client that declared the extension.
    plain = client.result("tools/call", {"name": "plain", "arguments": {}})
    assert plain["resultType"] == "complete" and "taskId" not in plain
    # tasks/result and tasks/list were removed by SEP-2663.
    assert client.rpc("tasks/result", {"taskId": "x"})["error"]["code"] == -32601
    assert client.rpc("tasks/list", {})["error"]["code"] == -32601


@pytest.mark.slow
def test_input_required_then_tasks_update_completes(served: Served) -> None:
    client = served.start()
    created = _create(client, "task_ask", {})
    waiting = client.until(created["taskId"], {"input_required"})
    assert list(waiting["inputRequests"]) == ["color"]
    assert waiting["inputRequests"]["color"]["method"] == "elicitation/create"
    ack = client.result("tasks/update", {"taskId": created["taskId"],
                                          "inputResponses": {"color": {"action": "accept", "content": {"color": "teal"}}}})
    assert ack["resultType"] == "complete" and "status" not in ack
    done = client.until(created["taskId"], {"completed", "failed"})
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {"color": "teal"}
    # Both status changes are records in the task journal.
    recs = [r for r in read_records(served.data_dir / "journal" / "tools.tasks.journal")
            if r.data.get("task_id") == created["taskId"]]
    assert [r.type for r in recs] == ["task.created", "task.status", "task.status", "task.settled"]
    assert [r.data.get("status") for r in recs[1:]] == ["input_required", "working", "completed"]


# -- two principals on one server (in-process app, real HTTP) ------------------------


class _TwoTokens:
    """Bearer auth with a principal per token (the server's scoping is what is tested)."""

    def __init__(self, app: Any, principals: dict[str, str]) -> None:
        self.app, self.principals = app, principals

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from openfunctions.core import PRINCIPAL_SCOPE_KEY

        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            principal = self.principals.get(auth.removeprefix("Bearer "))
            if principal is None:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            scope = {**scope, PRINCIPAL_SCOPE_KEY: principal}
        await self.app(scope, receive, send)


@asynccontextmanager
async def serving(tmp_path: Path, configure: Any = None, **options: Any) -> AsyncIterator[str]:
    """The task fixture tools served in-process behind uvicorn (bearer tokens alice/bob); ``configure(server)`` first.

    ``options``: more ``create_mcp_server`` options (``database_url=``: tasks in PostgreSQL)."""
    import uvicorn

    from openfunctions.servers import create_http_app, create_mcp_server

    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from task_fixture_tools import tools
    finally:
        sys.path.pop(0)
    from openfunctions.core import ToolRegistry

    # A registry per server: closing a server closes its registry's scheduler.
    server = create_mcp_server(ToolRegistry(tools), name="t", version="0", journal_dir=tmp_path / "data", **options)
    if configure is not None:
        configure(server)
    app = _TwoTokens(create_http_app(server), {"alice-token": "alice", "bob-token": "bob"})
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    async with server, anyio.create_task_group() as tg:
        tg.start_soon(uv.serve)
        with anyio.fail_after(30):
            while not uv.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            uv.should_exit = True


@pytest.mark.anyio
async def test_another_principals_tasks_get_is_refused_exactly_like_an_unknown_id(tmp_path: Path) -> None:
    async with serving(tmp_path) as url:
        alice, bob = Http(url, "alice-token"), Http(url, "bob-token")

        def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
            created = _create(alice, "task_quick", {"text": "secret"})
            done = alice.until(created["taskId"], {"completed"})
            stolen = bob.rpc("tasks/get", {"taskId": created["taskId"]})
            # The same question about an id that never existed, of the same shape.
            unknown_id = "task_" + "f" * 32
            unknown = bob.rpc("tasks/get", {"taskId": unknown_id})
            bob_cancel = bob.rpc("tasks/cancel", {"taskId": created["taskId"]})
            return created, done, {"stolen": stolen, "unknown": unknown, "unknown_id": unknown_id}, bob_cancel

        created, done, refused, bob_cancel = await anyio.to_thread.run_sync(scenario)
    stolen, unknown = refused["stolen"]["error"], refused["unknown"]["error"]
    assert stolen["code"] == unknown["code"] == -32602
    assert stolen["message"].replace(created["taskId"], "ID") == unknown["message"].replace(refused["unknown_id"], "ID")
    assert stolen["data"] == {"taskId": created["taskId"]} and unknown["data"] == {"taskId": refused["unknown_id"]}
    assert "secret" not in json.dumps(refused["stolen"])
    assert bob_cancel["error"]["code"] == -32602
    # Bob's cancel did not touch alice's task.
    assert done["status"] == "completed"


# -- stdio ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_task_over_stdio(raw_stdio: Any) -> None:
    session = raw_stdio("--module", "task_fixture_tools:registry")

    def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = session.request(method, _body(method, params, 0, True)["params"])
        return session.response(rid)

    created = call("tools/call", {"name": "task_quick", "arguments": {"text": "stdio"}})["result"]
    assert created["resultType"] == "task" and TASK_ID_RE.match(created["taskId"])
    deadline = time.monotonic() + 30
    while True:
        got = call("tasks/get", {"taskId": created["taskId"]})["result"]
        if got["status"] == "completed":
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert got["result"]["structuredContent"] == {"answer": 42, "text": "stdio"}
    assert session.close() == 0


@pytest.mark.slow
def test_tools_list_says_which_tools_support_tasks_where_the_version_has_the_field(raw_stdio: Any) -> None:
    session = raw_stdio("--module", "task_fixture_tools:registry")
    session.initialize("2025-11-25")
    listed = {t["name"]: t for t in session.call("tools/list", {})["result"]["tools"]}
    assert listed["task_required"]["execution"] == {"taskSupport": "required"}
    assert listed["task_quick"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in listed["plain"]
    # A handshake-era session never gets a task (CreateTaskResult is 2026-07-28 vocabulary):
    # an optional-task tool answers synchronously, a required one is refused.
    sync = session.call("tools/call", {"name": "task_quick", "arguments": {}})["result"]
    assert sync["structuredContent"]["answer"] == 42 and "taskId" not in sync
    assert session.call("tools/call", {"name": "task_required", "arguments": {}})["error"]["code"] == -32021
    assert session.close() == 0
