"""``ui --database URL``: the viewer over the PostgreSQL database server replicas share, in a private database.

Records are written through the real APIs (an execution journal in the database as an agent's registry sink,
the agent's runs in the database, a durable workflow run in a database space); the viewer reads them through
the store's readers, in process (httpx over ASGI).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import DatabaseRunLog, define_agent, read_runs, run_agent
from openfunctions.core import ToolRegistry, define_tool
from openfunctions.ui import create_ui_app
from tests._pg import pg_dsn  # noqa: F401  (a fixture)
from tests.store._journal_backends import private_database

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def db(pg_dsn):  # noqa: F811
    with private_database(pg_dsn) as dsn:
        yield dsn


async def test_the_viewer_reads_receipts_runs_and_workflow_runs_from_the_database(db: str, tmp_path: Path) -> None:
    from openfunctions.store import open_pg_journal
    from openfunctions.store._migrations import migrate_components
    from openfunctions.workflows import WorkflowRuns, pipe, tool_step

    await migrate_components(db)

    async def lookup(p, ctx):
        return {"title": "<b>t</b>", "q": p.get("q")}

    journal = await open_pg_journal(db, "tools")
    runs = await DatabaseRunLog.open(db, "default", sweep_interval=None)
    reg = ToolRegistry([define_tool(name="lookup", description="x", handler=lookup,
                                    capability={"effect": "read", "parallel_safe": True})], sink=journal)
    try:
        agent = define_agent("researcher", "x", tools=["lookup"], adapter=ScriptedAdapter(
            [{"tool": "lookup", "arguments": {"q": "a"}}, "done"]))
        result = await run_agent(agent, "go", registry=reg, runs=runs)
        wf = pipe(tool_step("lookup"), name="look", registry=reg)
        async with WorkflowRuns(database=db, space="default", workflows=[wf]) as wruns:
            outcome = await wruns.run(wf, {"q": "w"}, run_id="wf-1")
        assert outcome.ok
        app = create_ui_app(database=db)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8766") as c:
            s = (await c.get("/api/summary")).json()
            assert s["counts"]["agent_runs"] == 1 and s["counts"]["workflow_runs"] == 1
            # the agent's own call, its lookup, the workflow's lookup (reads: no start records)
            assert s["counts"]["receipts"] == 3 and s["streams"][0]["records"] == 3
            assert [x["ok"] for x in s["streams"]] == [True] and "password" not in s["data_dir"]
            detail = (await c.get(f"/api/agent-runs/{result.run_id}")).json()
            [call] = [n for rnd in detail["tree"]["children"] for n in rnd["children"]]
            assert call["outcome"] == "succeeded" and call["id"] == detail["run"]["finished"]["receipts"][0]
            assert call["id"].startswith("rcpt_") and call["params_sha256"].startswith("sha256:")
            wf_detail = (await c.get("/api/workflow-runs/wf-1")).json()
            assert wf_detail["status"] == "succeeded" and wf_detail["steps"][0]["receipt"]["outcome"] == "succeeded"
            receipts = (await c.get("/api/receipts", params={"tool": "lookup"})).json()
            assert receipts["matched"] == 2
            # a new record changes what the live stream polls, and the lists show it
            from openfunctions.ui._database import Database

            source = Database(db)
            sig = source.signature()
            await reg.execute("lookup", {"q": "later"})
            assert source.signature() != sig and source.changed(sig, source.signature()) == ["database"]
            assert (await c.get("/api/receipts", params={"tool": "lookup"})).json()["matched"] == 3
        with pytest.raises(Exception, match="data directory only"):
            create_ui_app(database=db, allow_resolve=True)
    finally:
        await runs.close()
        await journal.close()
    assert read_runs(tmp_path) == {}  # nothing was written to files
