"""MCP tasks shared by server replicas on one PostgreSQL (``serve --transport http --stateless --database``).

Two real replica subprocesses on one database, each with its own data dir:
a task created through replica A is answered through replica B (``tasks/get``,
its result, ``tasks/cancel``), and a task whose replica is SIGKILLed mid-call
is settled ``failed``/``unknown`` by the survivor's sweep, with the execution
journal's recovered receipt, and never re-run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests._pg import pg_dsn  # noqa: F401  (a fixture)
from tests.store._journal_backends import private_database

from .conftest import free_port, serve_argv, server_env, wait_for_file, wait_for_port
from .test_tasks import Http, _create

pytestmark = pytest.mark.slow


@pytest.fixture
def db(pg_dsn):  # noqa: F811
    from openfunctions.store import migrate_database

    with private_database(pg_dsn) as dsn:
        asyncio.run(migrate_database(dsn))
        yield dsn


#: For the tests of what a notification carries: a sweep this rare cannot stand in for a lost NOTIFY
#: within the tests' bounds (30 s), so those tests fail when the notification path is broken.
NO_SWEEP = {"OPENFUNCTIONS_DATABASE_SWEEP_S": "600"}
#: For the test of what only the sweep does (a dead replica's task settled by a survivor): sooner than the 5 s default.
QUICK_SWEEP = {"OPENFUNCTIONS_DATABASE_SWEEP_S": "0.5"}


class Replica:
    def __init__(self, dsn: str, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        port = free_port()
        argv = serve_argv("--transport", "http", "--stateless", "--port", str(port), "--data-dir", str(data_dir),
                          "--database", dsn, "--log-level", "warning",
                          *(extra or ("--module", "task_fixture_tools:registry")))
        env = {**server_env(), **(env or {})}
        env.pop("OPENFUNCTIONS_DATABASE_URL", None)
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(port, self.proc)
        self.client = Http(f"http://127.0.0.1:{port}/mcp")

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # again, if the fixture already did: harmless
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def replicas(db, tmp_path):
    started: list[Replica] = []

    def start(name: str, *extra: str, env: dict[str, str] | None = None) -> Replica:
        r = Replica(db, tmp_path / name, *extra, env=env)
        started.append(r)
        return r

    yield start
    for r in started:  # every replica told first, so their shutdowns overlap
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
    for r in started:
        r.stop()


def _journal_receipt(dsn: str, receipt_id: str) -> list[dict]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT data FROM of_journal_records WHERE type = 'receipt' AND receipt_id = %s",
                            (receipt_id,)).fetchall()
    return [json.loads(r[0]) for r in rows]


def test_a_task_created_on_one_replica_is_read_and_finished_through_another(replicas, tmp_path: Path) -> None:
    a, b = replicas("a"), replicas("b")
    markers = tmp_path / "m"
    created = _create(a.client, "task_slow", {"dir": str(markers)})
    task_id = created["taskId"]
    wait_for_file(markers / "started")
    assert json.loads((markers / "started").read_text())["task_id"] == task_id

    on_b = b.client.result("tasks/get", {"taskId": task_id})
    assert on_b["status"] == "working" and on_b["taskId"] == task_id
    assert on_b["createdAt"] == created["createdAt"]

    (markers / "release").write_text("go")
    done = b.client.until(task_id, {"completed", "failed", "cancelled"})
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"] == {"released": True}
    receipt = done["result"]["_meta"]["dev.openfunctions/receipt"]
    assert receipt["outcome"] == "succeeded"
    # Both replicas answer the same, from the same rows.
    assert a.client.result("tasks/get", {"taskId": task_id}) == done
    # An unknown id is the one unknown-id error on either replica.
    unknown = b.client.rpc("tasks/get", {"taskId": "task_" + "0" * 32})
    assert unknown["error"]["code"] == -32602 and "unknown task id" in unknown["error"]["message"]


def test_tasks_cancel_through_another_replica_reaches_the_handler(replicas, tmp_path: Path) -> None:
    a, b = replicas("a", env=NO_SWEEP), replicas("b", env=NO_SWEEP)  # only the NOTIFY can carry it in time
    markers = tmp_path / "m"
    task_id = _create(a.client, "task_slow", {"dir": str(markers)})["taskId"]
    wait_for_file(markers / "started")
    assert b.client.result("tasks/cancel", {"taskId": task_id})["resultType"] == "complete"
    wait_for_file(markers / "cancelled", timeout=30)  # A's handler saw the cancel B relayed (NOTIFY: no sweep runs)
    got = b.client.until(task_id, {"cancelled", "completed", "failed"})
    assert got["status"] == "cancelled", got
    assert got["_meta"]["dev.openfunctions/task"]["receiptId"]


def test_a_replica_killed_mid_task_leaves_it_failed_unknown_on_the_survivor_never_rerun(
        replicas, db, tmp_path: Path) -> None:
    a, b = replicas("a"), replicas("b", env=QUICK_SWEEP)
    markers = tmp_path / "m"
    task_id = _create(a.client, "task_slow", {"dir": str(markers)})["taskId"]
    wait_for_file(markers / "started")
    started = json.loads((markers / "started").read_text())
    assert b.client.result("tasks/get", {"taskId": task_id})["status"] == "working"

    a.kill9()
    (markers / "started").unlink()
    t0 = time.monotonic()
    got = b.client.until(task_id, {"failed", "completed", "cancelled"}, timeout=60)
    settled_after = time.monotonic() - t0
    assert got["status"] == "failed", got
    error = got["error"]
    assert "not re-run" in error["message"] and error["data"]["certainty"] == "unknown"
    receipt = error["data"]["receipt"]
    assert receipt["receipt_id"] == started["receipt_id"]
    assert receipt["recovered"] is True and receipt["outcome"] == "unknown"
    # The receipt is the execution journal's own (one, written by recovery), not made up for the reply.
    assert _journal_receipt(db, started["receipt_id"]) == [receipt]
    assert not (markers / "started").exists()  # never re-run
    # A replica started afterwards answers the same from the rows.
    c = replicas("c")
    assert c.client.result("tasks/get", {"taskId": task_id}) == got
    print(f"\nkilled replica's task settled failed/unknown by the survivor {settled_after:.1f} s after the SIGKILL")


def test_a_large_result_kept_on_one_replica_is_read_back_verified_through_another(replicas, db) -> None:
    import hashlib

    import psycopg

    a, b = replicas("a"), replicas("b")
    created = _create(a.client, "task_big", {"size": 400_000})
    done = b.client.until(created["taskId"], {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["result"]["content"] == [{"type": "text", "text": "x" * 400_000}]
    ref = done["_meta"]["dev.openfunctions/task"]["resultArtifact"]
    with psycopg.connect(db) as conn:
        record, content = conn.execute(
            "SELECT a.record, b.content FROM of_artifacts a JOIN of_artifact_blobs b USING (store, sha256) "
            "WHERE a.artifact_id = %s", (ref["id"],)).fetchone()
        settled = [json.loads(d) for (d,) in conn.execute(
            "SELECT data FROM of_task_records WHERE task_id = %s AND type = 'task.settled'", (created["taskId"],))]
    index = json.loads(record)
    assert index["scope"] == f"task:{created['taskId']}" and index["media_type"] == "application/json"
    assert "sha256:" + hashlib.sha256(content).hexdigest() == index["sha256"] == ref["sha256"]
    assert len(settled) == 1 and "result" not in settled[0] and settled[0]["result_artifact"] == ref["id"]
    assert json.loads(content) == done["result"]
    # The artifacts profile of any replica pages through it in verified 16 KiB chunks (of_artifact_read).
    import base64

    c = replicas("c", "--profile", "artifacts")
    got, offset = b"", 0
    while True:
        chunk = c.client.result("tools/call", {"name": "of_artifact_read",
                                               "arguments": {"artifact_id": ref["id"], "offset": offset}})
        part = chunk["structuredContent"]
        assert part["sha256"] == ref["sha256"] and part["length"] <= 16 * 1024
        got += base64.b64decode(part["data_base64"])
        offset += part["length"]
        if part["eof"]:
            break
    assert got == bytes(content)
    # Changed bytes in the database are never served: the replica says so instead.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE of_artifact_blobs SET content = overlay(content PLACING 'y'::bytea FROM 100) "
                     "WHERE sha256 = %s", (ref["sha256"][7:],))
    bad = a.client.result("tasks/get", {"taskId": created["taskId"]})
    assert bad["result"]["isError"] is True and "cannot be read back" in bad["result"]["content"][0]["text"]
    assert "x" * 1000 not in json.dumps(bad)


def test_a_listen_stream_on_one_replica_pushes_the_end_of_a_task_running_on_another(replicas, tmp_path: Path) -> None:
    import threading

    import httpx

    from .test_tasks import _body, _headers

    a, b = replicas("a"), replicas("b")
    markers = tmp_path / "m"
    task_id = _create(a.client, "task_slow", {"dir": str(markers)})["taskId"]
    wait_for_file(markers / "started")
    frames: list[dict] = []
    acked = threading.Event()

    def listen() -> None:
        params = {"notifications": {"taskIds": [task_id]}}
        with httpx.stream("POST", b.client.url, json=_body("subscriptions/listen", params, 99, True),
                          headers=_headers("subscriptions/listen", params, None), timeout=60) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    frames.append(json.loads(line[5:]))
                    if frames[-1].get("method") == "notifications/subscriptions/acknowledged":
                        acked.set()
                    if frames[-1].get("params", {}).get("status") == "completed":
                        return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert acked.wait(30), frames
    (markers / "release").write_text("go")  # replica A finishes the task; B learns it from the rows
    t.join(30)
    assert not t.is_alive(), frames
    pushed = [f["params"] for f in frames if f.get("method") == "notifications/tasks"]
    assert [p["status"] for p in pushed] == ["working", "completed"], pushed
    assert pushed[-1]["taskId"] == task_id and pushed[-1]["result"]["structuredContent"] == {"released": True}


def test_2025_11_25_tasks_get_list_result_and_cancel_through_another_replica(raw_stdio, db, tmp_path: Path) -> None:
    """Two stdio replicas on one database, 2025-11-25 task-augmented calls: create on A, the rest on B."""
    def replica(name: str) -> object:
        s = raw_stdio("--module", "task_fixture_tools:registry", "--data-dir", str(tmp_path / name), "--database", db,
                      env={"OPENFUNCTIONS_DATABASE_URL": ""})
        assert s.initialize("2025-11-25")["result"]["capabilities"]["tasks"]
        return s

    a, b = replica("a"), replica("b")
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    first = a.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(m1)}, "task": {}})["result"]["task"]
    wait_for_file(m1 / "started")
    assert b.call("tasks/get", {"taskId": first["taskId"]})["result"]["status"] == "working"
    # tasks/result on B blocks until A's handler ends.
    rid = b.request("tasks/result", {"taskId": first["taskId"]})
    (m1 / "release").write_text("go")
    result = b.response(rid)["result"]
    assert result["structuredContent"] == {"released": True}
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": first["taskId"]}
    # tasks/cancel on B reaches A's handler (an effectful tool: it runs after the first); B answers with the end.
    second = a.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(m2)}, "task": {}})["result"]["task"]
    wait_for_file(m2 / "started")
    listed = b.call("tasks/list", {})["result"]
    assert {t["taskId"] for t in listed["tasks"]} == {first["taskId"], second["taskId"]}
    cancelled = b.call("tasks/cancel", {"taskId": second["taskId"]})["result"]
    assert cancelled["taskId"] == second["taskId"] and cancelled["status"] == "cancelled"
    assert (m2 / "cancelled").exists()
    assert b.call("tasks/cancel", {"taskId": first["taskId"]})["error"]["code"] == -32602  # terminal
    assert a.close() == 0 and b.close() == 0


def test_tasks_update_through_another_replica_reaches_the_waiting_handler(replicas) -> None:
    a, b = replicas("a", env=NO_SWEEP), replicas("b", env=NO_SWEEP)  # only the NOTIFY can carry the answers in time
    task_id = _create(a.client, "task_ask", {})["taskId"]
    waiting = b.client.until(task_id, {"input_required"})
    assert list(waiting["inputRequests"]) == ["color"]
    ack = b.client.result("tasks/update", {"taskId": task_id,
                                           "inputResponses": {"color": {"action": "accept", "content": {"color": "teal"}}}})
    assert ack["resultType"] == "complete"
    done = b.client.until(task_id, {"completed", "failed"})
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {"color": "teal"}
    # An answer larger than a NOTIFY payload (8,000 bytes) travels as a row: it arrives whole.
    second = _create(a.client, "task_ask", {})["taskId"]
    b.client.until(second, {"input_required"})
    b.client.result("tasks/update", {"taskId": second, "inputResponses": {
        "color": {"action": "accept", "content": {"color": "x" * 20_000}}}})
    big = b.client.until(second, {"completed", "failed"})
    assert big["status"] == "completed" and big["result"]["structuredContent"] == {"color": "x" * 20_000}
