"""`serve --database URL` places a module's durable workflow runs in PostgreSQL (a real server, a real database).

The module builds ``WorkflowRuns(space=...)`` with no location (``tests.workflows._app:hosted``); the
server gives it its own: the database's rows of that space with ``--database``, else its ``--data-dir``.
A module that names a location keeps it (``tests.workflows._app:durable``, tested in test_pg_workflows.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from openfunctions.store import migrate_database
from openfunctions.workflows import WorkflowRuns
from tests._pg import unique_name
from tests.workflows._proc import ROOT, lines
from tests.workflows._proc import env as _env

pytestmark = pytest.mark.slow


@pytest.fixture
def db(pg_dsn):
    asyncio.run(migrate_database(pg_dsn))
    return pg_dsn


def _serve_and_call(tmp: Path, data: Path, *args: str, **env: str) -> dict:
    """Serve ``tests.workflows._app:hosted`` on stdio, call ``checkout`` once, stop the server; the call's result."""
    environ = _env(tmp, PYTHONUNBUFFERED="1", **env)
    environ.pop("OPENFUNCTIONS_DATABASE_URL", None)  # only what args say (it would set --database and --store)
    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--module", "tests.workflows._app:hosted",
         "--no-example-tools", "--data-dir", str(data), *args],
        cwd=ROOT, env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "checkout", "arguments": {"amount": 10}}},
    ]
    assert proc.stdin is not None and proc.stdout is not None
    for m in messages[:2]:
        proc.stdin.write(json.dumps(m) + "\n")
    proc.stdin.flush()
    assert "result" in json.loads(proc.stdout.readline())
    proc.stdin.write(json.dumps(messages[2]) + "\n")
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())
    try:
        _, err = proc.communicate(timeout=60)  # end of input: the stdio server shuts down
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert reply.get("id") == 2 and not reply["result"].get("isError"), reply
    return reply["result"]


def test_serve_database_places_a_modules_workflow_runs_in_postgresql(tmp_path: Path, db: str) -> None:
    space, data = unique_name("wf"), tmp_path / "data"
    result = _serve_and_call(tmp_path, data, "--database", db, WF_TEST_SPACE=space)
    assert result["structuredContent"] == {"ok": True, "balance": 90}
    [run] = WorkflowRuns(database=db, space=space).list()  # the server's run, read from the database
    assert run["workflow"] == "checkout" and run["status"] == "succeeded"
    assert not (data / "workflows" / "runs.journal").exists()  # not in the data dir
    assert len(lines(tmp_path / "charges.txt")) == 1


def test_without_database_the_same_module_keeps_its_runs_in_the_servers_data_dir(tmp_path: Path, db: str) -> None:
    space, data = unique_name("wf"), tmp_path / "data"
    result = _serve_and_call(tmp_path, data, WF_TEST_SPACE=space)
    assert result["structuredContent"] == {"ok": True, "balance": 90}
    [run] = WorkflowRuns(data).list()
    assert run["workflow"] == "checkout" and run["status"] == "succeeded"
    assert WorkflowRuns(database=db, space=space).list() == []
