"""2025-11-25 task-augmented calls (``task`` on tools/call, tasks/get|result|list|cancel) on the durable tasks.

Hand-written JSON-RPC over a real stdio server in the handshake era: the
SDK's own client sieves 2025-11-25 results to ``CallToolResult`` as its
server does, so it cannot drive these shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import wait_for_file
from .test_tasks import TASK_ID_RE

pytestmark = pytest.mark.slow

RELATED = "io.modelcontextprotocol/related-task"


def _start(raw_stdio: Any) -> Any:
    session = raw_stdio("--module", "task_fixture_tools:registry")
    init = session.initialize("2025-11-25")["result"]
    assert init["protocolVersion"] == "2025-11-25"
    assert init["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    return session


def test_a_2025_11_25_client_gets_durable_tasks(raw_stdio: Any, tmp_path: Path) -> None:
    session = _start(raw_stdio)
    markers = tmp_path / "m"
    created = session.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(markers)},
                                          "task": {"ttl": 60000}})["result"]
    task = created["task"]
    assert TASK_ID_RE.match(task["taskId"]) and task["status"] == "working"
    assert isinstance(task["ttl"], int) and isinstance(task["pollInterval"], int) and "createdAt" in task
    task_id = task["taskId"]
    wait_for_file(markers / "started")
    got = session.call("tasks/get", {"taskId": task_id})["result"]
    assert got["taskId"] == task_id and got["status"] == "working"
    listed = session.call("tasks/list", {})["result"]
    assert [t["taskId"] for t in listed["tasks"]] == [task_id] and "nextCursor" not in listed
    # tasks/result blocks until the end: ask first, then release the handler.
    rid = session.request("tasks/result", {"taskId": task_id})
    (markers / "release").write_text("go")
    result = session.response(rid)["result"]
    assert result["structuredContent"] == {"released": True}
    assert result["_meta"][RELATED] == {"taskId": task_id}
    assert result["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
    assert session.call("tasks/get", {"taskId": task_id})["result"]["status"] == "completed"
    # A terminal task cannot be cancelled; an unknown id is -32602 too.
    assert session.call("tasks/cancel", {"taskId": task_id})["error"]["code"] == -32602
    assert session.call("tasks/get", {"taskId": "task_" + "0" * 32})["error"]["code"] == -32602
    # A tool that does not support tasks refuses the task param; without it, it answers as always.
    assert session.call("tools/call", {"name": "plain", "arguments": {}, "task": {}})["error"]["code"] == -32601
    assert session.call("tools/call", {"name": "plain", "arguments": {}})["result"]["structuredContent"]["answer"] == 42
    # tasks/cancel reaches a running handler.
    markers2 = tmp_path / "m2"
    second = session.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(markers2)}, "task": {}})
    second_id = second["result"]["task"]["taskId"]
    wait_for_file(markers2 / "started")
    cancelled = session.call("tasks/cancel", {"taskId": second_id})["result"]
    assert cancelled["taskId"] == second_id and cancelled["status"] == "cancelled"
    assert (markers2 / "cancelled").exists()
    failed = session.call("tasks/result", {"taskId": second_id})
    assert "error" in failed and failed["error"]["data"]["status"] == "cancelled"
    assert session.close() == 0

    # Durable: a new server process on the same data dir answers for both.
    again = _start(raw_stdio)
    assert again.call("tasks/get", {"taskId": task_id})["result"]["status"] == "completed"
    assert again.call("tasks/result", {"taskId": task_id})["result"]["structuredContent"] == {"released": True}
    assert {t["taskId"] for t in again.call("tasks/list", {})["result"]["tasks"]} == {task_id, second_id}
    assert again.close() == 0


def test_v1_methods_stay_unknown_in_2026_07_28(raw_stdio: Any) -> None:
    """SEP-2663 removed tasks/result and tasks/list: the modern era keeps answering -32601."""
    from .test_tasks import _body

    session = raw_stdio("--module", "task_fixture_tools:registry")
    for method in ("tasks/result", "tasks/list"):
        rid = session.request(method, _body(method, {"taskId": "task_" + "0" * 32}, 0, True)["params"])
        assert session.response(rid)["error"]["code"] == -32601
    assert session.close() == 0


def test_a_requested_ttl_is_honoured_within_bounds(raw_stdio: Any, tmp_path: Path) -> None:
    """`task: {"ttl": ms}` sets the task's TTL (durably: a new process answers the same), capped by the server's,
    at least MIN_TTL_MS; a ttl that is not a non-negative integer is refused before the call runs."""
    from openfunctions.servers._tasks import MIN_TTL_MS

    session = _start(raw_stdio)

    def created(ttl: Any, name: str) -> dict:
        markers = tmp_path / name
        reply = session.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(markers)}, "task": ttl})
        wait_for_file(markers / "started")
        (markers / "release").write_text("go")
        return reply

    server_ttl = created({}, "default")["result"]["task"]["ttl"]
    asked = created({"ttl": 5000}, "asked")["result"]["task"]
    assert asked["ttl"] == 5000 < server_ttl
    assert session.call("tasks/get", {"taskId": asked["taskId"]})["result"]["ttl"] == 5000
    assert created({"ttl": server_ttl * 10}, "long")["result"]["task"]["ttl"] == server_ttl
    assert created({"ttl": 1}, "short")["result"]["task"]["ttl"] == MIN_TTL_MS
    assert created({"ttl": None}, "null")["result"]["task"]["ttl"] == server_ttl
    for bad in (-1, 1.5, "60000", True):
        refused = session.call("tools/call", {"name": "task_slow", "arguments": {"dir": str(tmp_path / "never")},
                                              "task": {"ttl": bad}})
        assert refused["error"]["code"] == -32602 and "task.ttl" in refused["error"]["message"], refused
    assert not (tmp_path / "never").exists()  # refused before the handler ran
    assert session.close() == 0
    again = _start(raw_stdio)
    assert again.call("tasks/get", {"taskId": asked["taskId"]})["result"]["ttl"] == 5000
    assert again.close() == 0
