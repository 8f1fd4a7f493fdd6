"""The viewer's JSON API in-process (httpx over ASGI), on records written by a real agent run.

The browser test (test_browser.py) drives the page over a real server; these check what the page is given:
lists and filters, one run's tree against its run record, bounded payloads, errors, the guard and the token.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from openfunctions.agents import read_runs
from openfunctions.ui import create_ui_app

from ._records import HOSTILE, ROOT, agent_run

pytestmark = pytest.mark.anyio


def client(data: Path, **kw) -> httpx.AsyncClient:
    app = create_ui_app(data, **kw)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766")


async def test_lists_filters_and_one_run_as_a_tree(tmp_path: Path) -> None:
    run_id = await agent_run(tmp_path)
    runs_ = read_runs(tmp_path)
    run = runs_[run_id]
    [child] = [r for r in runs_.values() if r.started.get("parent_run_id") == run_id]
    async with client(tmp_path) as c:
        runs = (await c.get("/api/agent-runs")).json()
        assert {r["run_id"] for r in runs["rows"]} == {run_id, child.run_id}
        [top] = (await c.get("/api/agent-runs", params={"agent": "researcher"})).json()["rows"]
        assert top["run_id"] == run_id and top["tool_calls"] == 3
        assert (await c.get("/api/agent-runs", params={"status": "failed"})).json()["rows"] == []
        assert (await c.get("/api/agent-runs", params={"q": child.run_id[4:14]})).json()["matched"] == 1
        assert (await c.get("/api/agent-runs", params={"q": run_id[4:14]})).json()["matched"] == 2  # and its child
        receipts = (await c.get("/api/receipts", params={"tool": "lookup"})).json()["rows"]
        assert sorted(r["receipt_id"] for r in receipts) == sorted(run.finished["receipts"][:2] + child.finished["receipts"])
        assert (await c.get("/api/receipts", params={"outcome": "failed"})).json()["rows"] == []
        assert (await c.get("/api/receipts", params={"since": "2999"})).json()["rows"] == []
        detail = (await c.get(f"/api/agent-runs/{run_id}")).json()
        # the tree: the run, its four rounds, the three tool calls under the first three with the journal's receipts
        tree = detail["tree"]
        assert tree["id"] == run_id and [n["label"] for n in tree["children"]] == [f"round {i}" for i in (1, 2, 3, 4)]
        calls = [n for rnd in tree["children"] for n in rnd["children"]]
        assert [n["id"] for n in calls] == run.finished["receipts"]
        assert all(n["outcome"] == "succeeded" and n["certainty"] == "known" and n["params_sha256"].startswith("sha256:")
                   for n in calls)
        # the delegation: the child run hangs under the call that started it, its own call under its round, once
        [sub] = calls[2]["children"]
        assert sub["type"] == "run" and sub["id"] == child.run_id and sub["label"] == "agent checker"
        assert [n["id"] for rnd in sub["children"] for n in rnd["children"]] == child.finished["receipts"]
        # each call's receipt names the agent's own call as its parent; the receipt page links both ways
        one = (await c.get(f"/api/receipts/{calls[0]['id']}")).json()
        parent = one["receipt"]["parent_receipt_id"]
        assert parent == run.started["parent_receipt_id"] and one["parent"]["receipt_id"] == parent
        assert {"kind": "agent_run", "id": run_id, "status": "completed"} in one["referenced_by"]
        up = (await c.get(f"/api/receipts/{parent}")).json()
        assert sorted(x["receipt_id"] for x in up["children"]) == sorted(run.finished["receipts"])
        # the timeline is in time order: the child run inside the delegation, the run's end last
        what = [e["what"] for e in detail["timeline"]]
        assert [e["at"] for e in detail["timeline"]] == sorted(e["at"] for e in detail["timeline"])
        assert what.index("delegate_to_checker started") < what.index("agent checker started") \
            < what.index("agent checker completed") < what.index("delegate_to_checker succeeded")
        assert what[-1] == "agent researcher completed"
        # model text is data: handed over verbatim (the page inserts it as text)
        assert HOSTILE in detail["run"]["finished"]["text"]


async def test_unknown_ids_and_long_filters_are_named_errors(tmp_path: Path) -> None:
    async with client(tmp_path) as c:
        for path in ("/api/agent-runs/run_nope", "/api/receipts/rcpt_nope", "/api/workflow-runs/nope",
                     "/api/attempts/att_nope"):
            r = await c.get(path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "ui_not_found", (path, r.text)
        r = await c.get("/api/receipts", params={"q": "x" * 201})
        assert r.status_code == 400 and r.json()["error"]["code"] == "ui_bad_filter"
        empty = (await c.get("/api/summary")).json()
        assert empty["counts"]["receipts"] == 0 and empty["streams"] == [] and empty["attention"] == []


async def test_large_values_are_cut_with_a_note(tmp_path: Path) -> None:
    from openfunctions.adapters import ScriptedAdapter
    from openfunctions.agents import RunJournal, define_agent, run_agent
    from openfunctions.core import ToolRegistry

    runs = await RunJournal.open_in(tmp_path)
    r = await run_agent(define_agent("big", "x", adapter=ScriptedAdapter(["y" * 9000])), "t" * 3000,
                        registry=ToolRegistry(), runs=runs)
    await runs.close()
    async with client(tmp_path) as c:
        d = (await c.get(f"/api/agent-runs/{r.run_id}")).json()
    text = d["run"]["finished"]["text"]
    assert text.startswith("y" * 2000) and text.endswith("[7000 more characters not shown]")
    assert d["run"]["started"]["task"].endswith("[1000 more characters not shown]")


def _damage(path: Path, marker: bytes) -> None:
    """Change one byte inside a record: its checksum no longer holds (the reader refuses the file from there)."""
    raw = bytearray(path.read_bytes())
    at = raw.index(marker) + len(marker) // 2
    raw[at:at + 1] = b"#"
    path.write_bytes(bytes(raw))


async def test_a_damaged_journal_is_reported_and_the_rest_still_shown(tmp_path: Path) -> None:
    run_id = await agent_run(tmp_path)
    _damage(tmp_path / "journal" / "agents.journal", b'"outcome":"succeeded"')
    async with client(tmp_path) as c:
        s = (await c.get("/api/summary")).json()
        assert (await c.get(f"/api/agent-runs/{run_id}")).status_code == 200
    [bad] = [x for x in s["streams"] if x["path"] == "journal/agents.journal"]
    assert bad["ok"] is False and "corrupt" in bad["error"] and bad["command"].startswith("openfunctions-mcp journal verify")
    assert all(x["ok"] for x in s["streams"] if x is not bad)


async def test_a_reader_refusing_its_journal_leaves_the_other_streams_shown(tmp_path: Path) -> None:
    """The runs journal damaged: the agents package's reader refuses it; the summary says so, the receipts show."""
    await agent_run(tmp_path)
    _damage(tmp_path / "journal" / "runs.journal", b'"status":"completed"')
    async with client(tmp_path) as c:
        s = (await c.get("/api/summary")).json()
        runs = await c.get("/api/agent-runs")
        receipts = (await c.get("/api/receipts")).json()
    [problem] = s["problems"]
    assert problem["stream"] == "agent runs" and "corrupt" in problem["message"]
    assert s["counts"]["agent_runs"] == 0 and runs.status_code == 200 and runs.json()["rows"] == []
    assert receipts["matched"] == 5  # the execution journal is intact (the researcher's own call, 3 lookups, the delegation)
    assert [x["ok"] for x in s["streams"] if x["path"] == "journal/runs.journal"] == [False]


async def test_the_guard_and_the_token(tmp_path: Path) -> None:
    async with client(tmp_path) as c:  # loopback: a Host that is not a loopback name is refused (DNS rebinding)
        assert (await c.get("/api/summary", headers={"host": "evil.example"})).status_code == 421
        assert (await c.get("/api/summary", headers={"origin": "http://evil.example"})).status_code == 403
        page = await c.get("/")
        assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    async with client(tmp_path, token="sekret") as c:
        assert (await c.get("/")).status_code == 200 and (await c.get("/app.js")).status_code == 200  # no data
        r = await c.get("/api/summary")
        assert r.status_code == 401 and "www-authenticate" in r.headers
        assert (await c.get("/api/events")).status_code == 401
        assert (await c.get("/api/summary", headers={"authorization": "Bearer sekret"})).status_code == 200


def test_the_cli_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    def ui(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "openfunctions.servers", "ui", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    missing = ui("--data-dir", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no data directory" in missing.stderr
    open_bind = ui("--data-dir", str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    assert open_bind.returncode == 2 and "needs a bearer token" in open_bind.stderr


def test_bounded_cuts_strings_lists_and_depth() -> None:
    from openfunctions.ui._records import MAX_DEPTH, MAX_ITEMS, bounded

    assert bounded({"a": list(range(MAX_ITEMS + 5))})["a"][-1] == "[5 more items not shown]"
    deep: dict = {}
    cur = deep
    for _ in range(MAX_DEPTH + 5):
        cur["x"] = {}
        cur = cur["x"]
    out, depth = bounded(deep), 0
    while isinstance(out, dict):
        out, depth = out["x"], depth + 1
    assert out == "[nested too deep to show]" and depth == MAX_DEPTH


async def test_resolving_from_the_page_runs_the_work_resolve_code(tmp_path: Path) -> None:
    from openfunctions.work.attempts_cli import _uncertain

    from ._records import work_attempt_blocked

    _attempt, op = await work_attempt_blocked(tmp_path)
    data = tmp_path / "data"
    body = {"kind": "work_operation", "operation_id": op, "applied": False, "reason": "checked: nothing appended",
            "by": "ops"}
    async with client(data) as c:  # read-only unless asked
        r = await c.post("/api/resolve", json=body)
        assert r.status_code == 403 and r.json()["error"]["code"] == "ui_resolve_disabled"
        assert (await c.get("/api/summary")).json()["resolve"] is False
    async with client(data, allow_resolve=True) as c:
        r = await c.post("/api/resolve", content=json.dumps(body), headers={"content-type": "text/plain"})
        assert r.status_code == 415  # a cross-site form cannot post JSON without a preflight
        for bad, code in (({**body, "by": ""}, 400), ({**body, "reason": " "}, 400), ({**body, "applied": "no"}, 400),
                          ({**body, "kind": "other"}, 400), ({**body, "operation_id": "op_nope"}, 400)):
            r = await c.post("/api/resolve", json=bad)
            assert r.status_code == code and r.json()["error"]["code"] in ("ui_resolve_invalid", "ui_resolve_refused"), r.text
        r = await c.post("/api/resolve", json=body)
        assert r.status_code == 200, r.text
        summary = (await c.get("/api/summary")).json()
    # what `work list-uncertain` (the same code) now says: resolved, waiting for the server to apply it
    [row] = _uncertain(argparse.Namespace(work_data_dir=str(data), work_database=None))
    assert row["operationId"] == op and row["resolutionPending"]["as"] == "not_applied"
    assert row["resolutionPending"]["by"] == "ops via ui" and row["resolutionPending"]["reason"] == body["reason"]
    [item] = [a for a in summary["attention"] if a["kind"] == "work_operation"]
    assert item["resolution_pending"]["by"] == "ops via ui"
