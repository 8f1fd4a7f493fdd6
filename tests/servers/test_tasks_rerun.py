"""A task whose server died mid-call is re-run once after restart when its tool is declared idempotent.

Real ``serve --transport http`` subprocesses on one data dir, killed with
SIGKILL while the call runs (marker files say where the handler is). The
effect counter is ``<dir>/runs``: one line per time the handler ran.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from openfunctions.core.journal import read_records

from .conftest import free_port, serve_argv, server_env, wait_for_file, wait_for_port
from .test_tasks import Http, Served, _create

TOKEN = "tok-never-in-a-record-5f1c0e"


class AuthServed(Served):
    """:class:`Served` behind a bearer token, optionally without some fixture tools (``drop``)."""

    def start(self, drop: str = "", strict: bool = False) -> Http:  # type: ignore[override]
        port = free_port()
        argv = serve_argv("--transport", "http", "--port", str(port), "--module", "task_fixture_tools:registry",
                          "--data-dir", str(self.data_dir), "--log-level", "warning",
                          "--auth-token-env", "TASKS_RERUN_TOKEN")
        env = server_env(TASKS_RERUN_TOKEN=TOKEN, TASK_FIXTURE_DROP=drop,
                         TASK_FIXTURE_IDEM_STRICT="1" if strict else "")
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(port, self.proc)
        self.url = f"http://127.0.0.1:{port}/mcp"
        return Http(self.url, TOKEN)


@pytest.fixture
def served(tmp_path):
    s = AuthServed(tmp_path / "data")
    yield s
    s.stop()


def _runs(markers: Path) -> list[dict]:
    return [json.loads(line) for line in (markers / "runs").read_text().splitlines()]


def _task_records(served: Served, task_id: str) -> list[tuple[str, dict]]:
    journal = served.data_dir / "journal" / "tools.tasks.journal"
    return [(r.type, r.data) for r in read_records(journal) if r.data.get("task_id") == task_id]


def _receipts(served: Served, receipt_id: str) -> list[dict]:
    journal = served.data_dir / "journal" / "tools.journal"
    return [r.data for r in read_records(journal) if r.type == "receipt" and r.data["receipt_id"] == receipt_id]


def _start_and_kill(served: AuthServed, markers: Path, tool: str = "task_idem") -> tuple[dict, dict]:
    client = served.start()
    created = _create(client, tool, {"dir": str(markers)})
    wait_for_file(markers / "started")
    started = json.loads((markers / "started").read_text())
    assert started["task_id"] == created["taskId"]
    served.kill9()
    (markers / "started").unlink()
    return created, started


@pytest.mark.slow
def test_an_idempotent_task_is_rerun_once_after_sigkill_and_completes_with_the_reruns_result(
        served: AuthServed, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    created, started = _start_and_kill(served, markers)
    # What the re-run needs was kept when the task was created: arguments and scopes, never the bearer token.
    (type_, data), = [r for r in _task_records(served, created["taskId"]) if r[0] == "task.created"]
    assert data["arguments"] == {"dir": str(markers)} and data["scopes"] == []
    assert TOKEN.encode() not in (served.data_dir / "journal" / "tools.tasks.journal").read_bytes()

    (markers / "release").write_text("go")
    client = served.start()
    done = client.until(created["taskId"], {"completed", "failed"})
    assert done["status"] == "completed", done
    result = done["result"]["structuredContent"]
    assert result["run"] == 2  # the re-run's own result: the second time the handler ran
    assert result["receipt_id"] != started["receipt_id"]
    runs = _runs(markers)
    assert len(runs) == 2, runs  # exactly one re-run
    assert runs[1] == {"task_id": created["taskId"], "receipt_id": result["receipt_id"],
                       "principal": runs[0]["principal"], "scopes": runs[0]["scopes"]}
    meta = done["_meta"]["dev.openfunctions/task"]
    assert meta["receiptId"] == result["receipt_id"] and meta["rerunOf"] == started["receipt_id"]
    # The record says so: a task.status naming the uncertain call and the re-run's receipt, before it settled.
    types = [t for t, _ in _task_records(served, created["taskId"])]
    assert types == ["task.created", "task.status", "task.settled"]
    status = _task_records(served, created["taskId"])[1][1]
    assert status["rerun_of"] == started["receipt_id"] and status["receipt_id"] == result["receipt_id"]
    # The execution journal: the first call recovered unknown, the re-run succeeded under its own receipt.
    first, = _receipts(served, started["receipt_id"])
    assert first["recovered"] is True and first["outcome"] == "unknown"
    second, = _receipts(served, result["receipt_id"])
    assert second["outcome"] == "succeeded"

    served.kill9()  # settled: a further restart answers the same and runs nothing
    client = served.start()
    assert client.result("tasks/get", {"taskId": created["taskId"]})["result"] == done["result"]
    assert len(_runs(markers)) == 2


@pytest.mark.slow
def test_a_rerun_killed_again_is_not_rerun_a_second_time(served: AuthServed, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    created, _ = _start_and_kill(served, markers)
    served.start()
    wait_for_file(markers / "started")  # the re-run is running
    served.kill9()
    client = served.start()
    got = client.result("tasks/get", {"taskId": created["taskId"]})
    assert got["status"] == "failed", got
    assert "re-run once at most" in got["error"]["message"] and got["error"]["data"]["certainty"] == "unknown"
    assert len(_runs(markers)) == 2


@pytest.mark.slow
def test_an_idempotent_task_whose_tool_is_gone_after_restart_fails_with_the_reason(
        served: AuthServed, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    created, started = _start_and_kill(served, markers)
    client = served.start(drop="task_idem")
    got = client.result("tasks/get", {"taskId": created["taskId"]})
    assert got["status"] == "failed", got
    assert "no longer registered" in got["error"]["message"] and "not re-run" in got["error"]["message"]
    assert got["error"]["data"]["receipt"]["receipt_id"] == started["receipt_id"]
    assert len(_runs(markers)) == 1


@pytest.mark.slow
def test_recorded_arguments_that_no_longer_validate_fail_the_task_with_the_reason(
        served: AuthServed, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    created, _ = _start_and_kill(served, markers)
    client = served.start(strict=True)
    got = client.until(created["taskId"], {"completed", "failed"})
    assert got["status"] == "failed", got
    assert "no longer validate" in got["error"]["message"] and '"n" is a required property' in got["error"]["message"]
    assert got["_meta"]["dev.openfunctions/task"]["rerunOf"] is not None
    assert len(_runs(markers)) == 1  # the handler never ran again


@pytest.mark.slow
def test_a_non_idempotent_task_keeps_no_arguments_and_is_failed_not_rerun(served: AuthServed, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    created, _ = _start_and_kill(served, markers, tool="task_slow")
    (type_, data), = [r for r in _task_records(served, created["taskId"]) if r[0] == "task.created"]
    assert "arguments" not in data and "scopes" not in data
    client = served.start()
    got = client.result("tasks/get", {"taskId": created["taskId"]})
    assert got["status"] == "failed" and "rerunOf" not in got["_meta"]["dev.openfunctions/task"]
    assert got["error"]["message"] == ("the server ended while this task was running; whether its effect "
                                       "happened is unknown, and it was not re-run")
    assert not (markers / "started").exists()
