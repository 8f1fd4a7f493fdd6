"""Run records on both backends: the run journal file and PostgreSQL (``DatabaseRunLog``), one test face.

The same fold, the same recovery to ``interrupted`` (never resumed), and on
PostgreSQL: a run written through one replica is read through another, a
replica's run is interrupted by a survivor when the replica's process (its
advisory lock) dies, and the dead replica's late end is refused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import DatabaseRunLog, RunJournal, define_agent, run_agent
from openfunctions.agents import _records as R
from openfunctions.agents._errors import RunJournalError
from openfunctions.core import ToolRegistry, define_tool
from tests._pg import pg_dsn, unique_name  # noqa: F401  (pg_dsn is a fixture)
from tests.store._journal_backends import migrated

pytestmark = pytest.mark.anyio


class FileRuns:
    name = "file"

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path

    async def open(self) -> Any:
        return await RunJournal.open_in(self.dir)

    async def load(self, log: Any, run_id: str) -> Any:
        return log.get(run_id)

    async def history(self, log: Any, run_id: str) -> Any:
        from openfunctions.agents import read_history

        return read_history(self.dir, run_id)

    async def crash(self, log: Any) -> None:
        """What a SIGKILL leaves: the records written, the lock gone."""
        if log._writer is not None:
            await log._idle.wait()
            log._writer.cancel()
        await log.log.close()


class PgRuns:
    name = "postgresql"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.space = unique_name("runs")

    async def open(self) -> Any:
        await migrated(self.dsn)
        return await DatabaseRunLog.open(self.dsn, self.space, sweep_interval=None)

    async def load(self, log: Any, run_id: str) -> Any:
        return await log.load(run_id)

    async def history(self, log: Any, run_id: str) -> Any:
        return await log.load_history(run_id)

    async def crash(self, log: Any) -> None:
        """What a SIGKILL leaves: the rows, the instance row; its advisory lock dies with its connection."""
        await log.log.live.lock_conn.close()
        await log.log.pool.close()


@pytest.fixture(params=["file", "postgresql"])
def backend(request, tmp_path) -> Any:
    if request.param == "file":
        return FileRuns(tmp_path)
    return PgRuns(request.getfixturevalue("pg_dsn"))


def _tool():
    return define_tool(name="echo", description="echo", handler=lambda p, c: "e",
                       capability={"effect": "read", "parallel_safe": True})


def _start(run_id: str) -> dict[str, Any]:
    return R.started(run_id=run_id, agent="a", provider="p", model="m", instructions="i", tools=[], limits={},
                     task="t", principal=None, parent_run_id=None, parent_receipt_id=None)


async def test_an_agents_run_folds_the_same_when_read_back(backend) -> None:
    log = await backend.open()
    try:
        agent = define_agent("a", "x", tools=["echo"], adapter=ScriptedAdapter([{"tool": "echo"}, "done"]))
        r = await run_agent(agent, "go", registry=ToolRegistry([_tool()]), runs=log)
        live = log.get(r.run_id).to_dict()
        assert live["status"] == "completed" and len(live["rounds"]) == 2 and len(live["claims"]) == 1
    finally:
        await log.close()
    again = await backend.open()
    try:
        assert (await backend.load(again, r.run_id)).to_dict() == live
        assert again.interrupted == []
    finally:
        await again.close()


async def test_a_runs_conversation_is_rebuilt_from_its_records(backend) -> None:
    log = await backend.open()
    try:
        agent = define_agent("a", "x", tools=["echo"], adapter=ScriptedAdapter([{"tool": "echo"}, "done"]))
        r = await run_agent(agent, "go", registry=ToolRegistry([_tool()]), runs=log)
    finally:
        await log.close()
    again = await backend.open()
    try:
        rebuilt = await backend.history(again, r.run_id)
        assert [m.role for m in rebuilt] == ["system", "user", "assistant", "tool", "assistant"]
        assert rebuilt == r.messages and rebuilt[2].tool_calls[0].id == rebuilt[3].tool_call_id
    finally:
        await again.close()


async def test_a_run_left_unfinished_by_a_dead_process_is_interrupted_never_resumed(backend) -> None:
    log = await backend.open()
    start = _start("run_" + os_hex())
    await log.append(R.STARTED, start)
    await log.append(R.ROUND, R.round_(run_id=start["run_id"], n=1, model="m", stop_reason="tool_use",
                                       usage={"input_tokens": 3, "output_tokens": 4},
                                       tool_calls=[{"id": "c", "name": "echo", "receipt_id": "rcpt_x",
                                                    "outcome": "succeeded", "error_code": None}], text=None))
    await backend.crash(log)
    survivor = await backend.open()
    try:
        run = await backend.load(survivor, start["run_id"])
        assert survivor.interrupted == [start["run_id"]]
        assert run.status == "interrupted" and run.finished["recovered"] is True
        assert run.finished["receipts"] == ["rcpt_x"] and run.finished["usage"] == {"input_tokens": 3, "output_tokens": 4}
    finally:
        await survivor.close()
    third = await backend.open()  # idempotent: nothing left to recover
    try:
        assert third.interrupted == [] and (await backend.load(third, start["run_id"])).status == "interrupted"
    finally:
        await third.close()


def os_hex() -> str:
    import os

    return os.urandom(16).hex()


async def _until_backend_gone(dsn: str, pid: int, bound: float = 20.0) -> None:
    """Wait (bounded) until the server backend ``pid`` has exited: closing a connection on the client side
    returns before the server ends that backend and releases its session advisory locks."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for _ in range(int(bound / 0.05)):
            cur = await conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            if await cur.fetchone() is None:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"backend {pid} still alive {bound} s after its connection closed")


async def test_replicas_share_runs_and_a_survivor_interrupts_a_dead_replicas_run(pg_dsn) -> None:  # noqa: F811
    backend = PgRuns(pg_dsn)
    a, b = await backend.open(), await backend.open()
    try:
        agent = define_agent("a", "x", adapter=ScriptedAdapter(["hello"]))
        r = await run_agent(agent, "go", registry=ToolRegistry(), runs=a)
        assert (await b.load(r.run_id)).to_dict() == a.get(r.run_id).to_dict()  # written via A, read via B
        assert b.get(r.run_id) is None  # B's memory never saw it: the rows did

        start = _start("run_" + os_hex())
        await a.append(R.STARTED, start)
        assert await b.sweep() == []  # A is alive: its run is left alone
        dead_pid = a.log.live.lock_conn.info.backend_pid
        await a.log.live.lock_conn.close()  # A's process dies (its lock with it)
        await _until_backend_gone(pg_dsn, dead_pid)  # the server frees the lock when that backend exits, a moment later
        assert await b.sweep() == [start["run_id"]]
        assert (await b.load(start["run_id"])).status == "interrupted"
        # A's late end (it lost its lock but lives on) is refused, never a second end.
        with pytest.raises(RunJournalError, match="already finished"):
            await a.append(R.FINISHED, R.finished(run_id=start["run_id"], status="completed", rounds=0,
                                                  usage={}, receipts=[], text="late"))
        assert (await b.load(start["run_id"])).finished["status"] == "interrupted"
    finally:
        await asyncio.gather(a.log.pool.close(), b.close(), return_exceptions=True)


async def test_the_agents_profile_keeps_runs_in_the_database_a_server_names(pg_dsn, tmp_path) -> None:  # noqa: F811
    from openfunctions.agents import build_agents_profile
    from openfunctions.servers import create_mcp_server

    await migrated(pg_dsn)
    profile = build_agents_profile(data_dir=tmp_path)
    # What serve --profile agents --database does: a real server on the database, the layer installed on it.
    server = create_mcp_server(profile.registry, name="t", version="0", journal_dir=tmp_path, profile="agents",
                               database_url=pg_dsn)
    profile.install(server)
    await server.start()
    await profile.start()
    try:
        assert server.database_url == pg_dsn and profile.database_url == pg_dsn
        assert isinstance(profile.journal, DatabaseRunLog) and profile.runtime.runs is profile.journal
        r = await run_agent(define_agent("p", "x", adapter=ScriptedAdapter(["ok"])), "go", registry=ToolRegistry(),
                            runs=profile.runtime.runs)
        read = next(t for t in profile.registry.list() if t.name == "of_run_read")
        out = await profile.registry.execute("of_run_read", {"run_id": r.run_id})
        assert read is not None and r.run_id in str(out) and "completed" in str(out)
        assert not (tmp_path / "journal" / "runs.journal").exists()  # no run journal file: the rows are the record
    finally:
        await profile.aclose()
        await server.close()


async def test_runs_list_and_show_read_the_database(pg_dsn, tmp_path) -> None:  # noqa: F811
    import json

    from tests._pg import unique_name

    from .test_runlog import _cli

    await migrated(pg_dsn)
    log = await DatabaseRunLog.open(pg_dsn, sweep_interval=None)  # space "default": what serve uses
    try:
        r = await run_agent(define_agent(unique_name("calc"), "x", adapter=ScriptedAdapter(["42"])), "q",
                            registry=ToolRegistry(), runs=log)
    finally:
        await log.close()
    rows = json.loads((await anyio_cli("list", "--database", pg_dsn, "--json", "-n", "0")).stdout)
    assert r.run_id in [row["run_id"] for row in rows]
    show = await anyio_cli("show", r.run_id, "--database", pg_dsn, "--json")
    assert show.returncode == 0 and json.loads(show.stdout)["finished"]["text"] == "42"
    missing = await anyio_cli("show", "run_" + "0" * 32, "--database", pg_dsn)
    assert missing.returncode == 1 and "no run" in missing.stderr
    # With --data-dir (and no --database) the files are read, as before.
    assert "no runs in" in _cli("list", "--data-dir", str(tmp_path)).stdout


async def anyio_cli(*args: str):
    import anyio

    from .test_runlog import _cli

    return await anyio.to_thread.run_sync(lambda: _cli(*args))


async def test_runs_tail_reads_and_follows_the_database(pg_dsn) -> None:  # noqa: F811
    """``runs tail --database``: the newest records with their write time; ``-f`` prints a run another process
    writes while it follows, and stops cleanly on Ctrl-C."""
    import json
    import re
    import signal
    import subprocess
    import sys
    import threading

    import anyio

    await migrated(pg_dsn)
    agent = unique_name("tail")
    log = await DatabaseRunLog.open(pg_dsn, sweep_interval=None)  # space "default": what serve and the CLI use
    try:
        first = await run_agent(define_agent(agent, "x", adapter=ScriptedAdapter(["one"])), "q",
                                registry=ToolRegistry(), runs=log)
        out = await anyio_cli("tail", "--database", pg_dsn, "-n", "3", "--json")
        assert out.returncode == 0, out.stderr
        recs = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(recs) == 3 and {r["data"]["run_id"] for r in recs} == {first.run_id}
        assert "run_finished" in [r["type"] for r in recs]  # (then its outcome claim)
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", r["time"]) for r in recs)

        follower = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "runs", "tail", "-f", "-n", "0",
                                     "--json", "--database", pg_dsn], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True,
                                    # SIGINT may be ignored when the runner runs in the background
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        watchdog = threading.Timer(60, follower.kill)  # a blocked readline then ends (the test fails, never hangs)
        watchdog.start()
        try:
            line = await anyio.to_thread.run_sync(follower.stderr.readline)
            assert "following run records in" in line and "every 0.5 s" in line, line
            second = await run_agent(define_agent(agent, "x", adapter=ScriptedAdapter(["two"])), "q",
                                     registry=ToolRegistry(), runs=log)
            seen = []
            with anyio.fail_after(30):
                while "run_finished" not in [r["type"] for r in seen]:
                    seen.append(json.loads(await anyio.to_thread.run_sync(follower.stdout.readline)))
            assert {r["data"]["run_id"] for r in seen} == {second.run_id}  # -n 0: nothing older
            assert seen[0]["type"] == "run_started"
            follower.send_signal(signal.SIGINT)
            assert await anyio.to_thread.run_sync(lambda: follower.wait(timeout=30)) == 0
        finally:
            watchdog.cancel()
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    finally:
        await log.close()


async def test_the_database_follower_prints_a_record_that_commits_out_of_seq_order(pg_dsn) -> None:  # noqa: F811
    """A replica's record with a lower seq may commit after a higher one is visible: the follower prints it
    when it commits, once (it reads again below the newest seq it has seen)."""
    import psycopg

    from openfunctions.agents._runlog import tail_runs_in_database

    await migrated(pg_dsn)
    space = unique_name("runs")
    log = await DatabaseRunLog.open(pg_dsn, space, sweep_interval=None)
    r = await run_agent(define_agent("a", "x", adapter=ScriptedAdapter(["ok"])), "q", registry=ToolRegistry(), runs=log)
    emitted: list[Any] = []
    done, ready = asyncio.Event(), asyncio.Event()
    follower = asyncio.ensure_future(tail_runs_in_database(pg_dsn, emitted.append, last=0, follow=True, space=space,
                                                           poll=0.02, stop=done.is_set, ready=ready.set))

    async def until(pred) -> None:
        for _ in range(1500):
            if pred():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never happened; emitted {emitted}")

    insert = "INSERT INTO of_run_records (run_id, type, data) VALUES (%s, %s, '{}') RETURNING seq"
    try:
        await asyncio.wait_for(ready.wait(), 30)  # the run's records read (as already there), following now
        slow = await psycopg.AsyncConnection.connect(pg_dsn)  # a transaction: its seq is taken, not yet visible
        try:
            low = (await (await slow.execute(insert, (r.run_id, "late"))).fetchone())[0]
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as fast:
                high = (await (await fast.execute(insert, (r.run_id, "early"))).fetchone())[0]
            assert low < high
            await until(lambda: [e.type for e in emitted] == ["early"])
            await slow.commit()
        finally:
            await slow.close()
        await until(lambda: [e.type for e in emitted] == ["early", "late"])
        await asyncio.sleep(0.1)  # a few more polls: nothing is printed twice
        assert [e.type for e in emitted] == ["early", "late"]
    finally:
        done.set()
        await follower
        await log.close()
