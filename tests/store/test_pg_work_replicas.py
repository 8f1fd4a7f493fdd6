"""Work attempts across server replicas on one PostgreSQL: real processes, real SIGKILL.

Three ``serve --profile work --transport http --stateless --database URL``
replicas (each its own data dir) share one work space in the database:

- an attempt previewed and started through replica A continues through B
  (B runs the next step; C sees the state);
- A is SIGKILLed while it holds the lease in the middle of a step (the
  command is running); B's next call finds the holder dead (its liveness lock
  went with its process), takes it
  over with a higher generation, and recovery blocks the uncertain operation
  exactly as the file backend does (``unknown``; the step is refused, never
  re-run);
- a write with A's old generation is refused (``LeaseLost``), and nothing of
  it lands;
- every step ran exactly once (the workspace's counter file), and both
  ``db verify`` (the execution journal) and the work space's audit pass.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from openfunctions.core.postgres import migrations_of
from openfunctions.store import migrate_database
from openfunctions.work import Lease, LeaseLost
from openfunctions.work._pg import open_pg_work, verify_pg_work
from tests._net import free_port
from tests.work._catalogs import COUNT_STEP

from ._journal_backends import private_database
from ._replicas import db_receipts, start_work_replica, stop, tool_call, wait_for

pytestmark = pytest.mark.slow

TTL = 3.0

CATALOG = (
    'version = 1\nworkspace = "ws"\n'
    "[steps.note]\n"
    'kind = "write_file"\n'
    'description = "write a note"\n'
    'paths = ["notes/**"]\n'
) + COUNT_STEP + (
    "\n[steps.shout]\n"
    'kind = "command"\n'
    'description = "print a long line (its stdout becomes an artifact)"\n'
    f"argv = ['{sys.executable}', '-c', \"print('hello ' * 5000)\"]\n"
    'effect = "read"\n'
    'env = ["PATH"]\n'
)


def _replica(dsn: str, data_dir: Path, catalog: Path, *extra: str,
             env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen]:
    return start_work_replica(dsn, data_dir, catalog, *extra, ttl=TTL, env=env)


def tool(url: str, name: str, arguments: dict[str, Any] | None = None, *, timeout: float = 60) -> dict[str, Any]:
    """One tools/call; the MCP result (``structuredContent``, ``isError``, ``content``)."""
    try:
        return tool_call(url, name, arguments, timeout=timeout)
    except ValueError as exc:
        raise AssertionError(str(exc)) from None


def ok(url: str, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    r = tool(url, name, arguments)
    assert not r.get("isError"), r
    return r["structuredContent"]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


@pytest.mark.anyio
async def test_an_attempt_moves_between_replicas_and_a_dead_holders_lease_is_taken_over_fenced(pg_dsn, tmp_path) -> None:
    with private_database(pg_dsn) as dsn:
        migrated = _cli("db", "migrate", "--database", dsn)  # the operator's path: every component
        latest = len(migrations_of("work"))
        assert migrated.returncode == 0 and f"work schema migrated from version 0 to {latest}" in migrated.stdout, migrated
        backend = await open_pg_work(dsn, "work")
        try:
            await backend.grants.issue(principal="agent", steps=["note", "count"], paths=["notes/**"],
                                       ttl=_dt.timedelta(hours=1), issuer="test")
            await _scenario(dsn, tmp_path, backend)
        finally:
            await backend.aclose()


async def _scenario(dsn: str, tmp_path: Path, backend: Any) -> None:
    (tmp_path / "ws").mkdir()
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    counter = tmp_path / "ws" / "counter.txt"
    procs: list[subprocess.Popen] = []
    sleeper: int | None = None
    try:
        (a, pa), (b, pb), (c, pc) = (_replica(dsn, tmp_path / f"d{i}", catalog) for i in "abc")
        procs += [pa, pb, pc]
        plan = [{"step": "note", "params": {"path": "notes/n.txt", "content": "one"}},
                {"step": "count", "params": {"seconds": 0}},
                {"step": "count", "params": {"seconds": 120}}]
        prv = ok(a, "of_work_preview", {"plan": plan})
        att = ok(a, "of_work_start", {"previewId": prv["previewId"]})["attemptId"]
        ok(a, "of_work_run_step")  # step 0 through A
        r = ok(b, "of_work_run_step")  # step 1 through B: started on A, continued on B
        assert r["attemptId"] == att and r["operation"]["step"] == "count"
        st = ok(c, "of_work_status")["attempt"]  # C sees both
        assert st["attemptId"] == att and st["cursor"] == 2 and st["state"] == "running"

        # step 2 through A; A is SIGKILLed while its command runs and it holds the lease
        killed_call: list[Any] = []
        threading.Thread(target=_swallow, args=(a, killed_call), daemon=True).start()
        wait_for(lambda: len(_lines(counter)) == 2, timeout=60)
        sleeper = int(_lines(counter)[1].split()[1])
        holder = await backend.leases.read()
        pa.kill()
        pa.wait(timeout=10)
        old = Lease(holder["owner"], holder["generation"], holder["expires_at"], holder["ttl"])

        # B: the holder is dead, so B takes its lease over (at once), recovers; the step is refused
        r = tool(b, "of_work_run_step", timeout=120)
        assert r.get("isError"), r
        assert "effect_uncertain" in json.dumps(r), r
        st = ok(b, "of_work_status")["attempt"]
        assert st["state"] == "blocked" and st["blockedReason"]["code"] == "effect_uncertain", st
        [op] = [o for o in st["operations"] if o["planIndex"] == 2]
        assert op["status"] == "unknown" and op["leaseGeneration"] == old.generation
        now = await backend.leases.read()
        assert now["generation"] > old.generation and now["owner"] != old.owner

        # the dead holder's stale write (its generation) is refused and never lands
        before = len(await backend.attempts.read(0))
        with pytest.raises(LeaseLost, match="stale"):
            await backend.attempts.append(old, "outcome", {"attempt_id": att, "operation_id": op["operationId"],
                                                           "status": "done", "lease_generation": old.generation})
        assert len(await backend.attempts.read(0)) == before

        wait_for(lambda: bool(killed_call), timeout=30)
        assert killed_call == ["no reply"], f"the call on the killed replica: {killed_call}"
        # C agrees; nothing ran twice
        assert ok(c, "of_work_status")["attempt"]["state"] == "blocked"
        _kill(sleeper)
        assert [line.split()[2] for line in _lines(counter)] == ["0", "120"], "each count step ran exactly once"
        assert (tmp_path / "ws" / "notes" / "n.txt").read_text() == "one"
        records = await backend.attempts.read(0)
        assert [x.type for x in records if x.data.get("operation_id") == op["operationId"]].count("intent") == 1
        recovered = [x for x in records if x.type == "recovered"]
        assert recovered and op["operationId"] in recovered[-1].data["unknown_operations"]
        assert recovered[-1].data["lease_generation"] > old.generation
        replicas_that_wrote = {x.data["owner"] for x in records if x.type == "lease_acquired"}
        assert len(replicas_that_wrote) >= 2

        # the operator settles it in the database (any machine); the next call through any replica applies it
        listed = _cli("work", "list-uncertain", "--json", "--database", dsn)
        assert [r["operationId"] for r in json.loads(listed.stdout)] == [op["operationId"]], listed.stderr
        done = _cli("work", "resolve", op["operationId"], "--as", "applied", "--reason", "the counter line is there",
                    "--by", "op", "--database", dsn)
        assert done.returncode == 0, done.stderr
        r = ok(c, "of_work_reconcile")
        assert r["state"] == "running", r
        st = ok(b, "of_work_status")["attempt"]
        [op2] = [o for o in st["operations"] if o["operationId"] == op["operationId"]]
        assert op2["status"] == "done" and op2["resolution"]["by"] == "op" and st["cursor"] == 3, st
        assert len([x for x in await backend.attempts.read(0) if x.type == "resolution"]) == 1, "copied once, by one replica"
        assert len(_lines(counter)) == 2, "resolving runs nothing"
    finally:
        if sleeper is not None:
            _kill(sleeper)
        for p in procs:
            stop(p)
    assert verify_pg_work(dsn, "work") == []
    out = subprocess.run([sys.executable, "-m", "openfunctions.servers", "db", "verify", "--database", dsn],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "work space work: ok" in out.stdout, out.stdout


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def _swallow(url: str, out: list[Any]) -> None:
    """A call whose server is killed under it: its client gets no reply (never a success)."""
    try:
        out.append(tool(url, "of_work_run_step", timeout=300))
    except (httpx.HTTPError, AssertionError, StopIteration):
        out.append("no reply")


@pytest.mark.anyio
async def test_serve_refuses_a_work_schema_older_than_the_code_and_names_the_command(pg_dsn, tmp_path) -> None:
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)  # every component, then the work component set back to an older version
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE of_schema SET version = 1 WHERE component = 'work'")
        (tmp_path / "ws").mkdir()
        (tmp_path / "catalog.toml").write_text(CATALOG)
        env = dict(os.environ)
        env.pop("OPENFUNCTIONS_DATABASE_URL", None)
        out = subprocess.run(
            [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "work", "--transport", "http",
             "--stateless", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"), "--catalog",
             str(tmp_path / "catalog.toml"), "--database", dsn],
            capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "the work schema in" in out.stderr and "openfunctions-mcp db migrate" in out.stderr, out.stderr[-2000:]


@pytest.mark.anyio
async def test_work_artifacts_minted_on_one_replica_read_on_another(pg_dsn, tmp_path) -> None:
    """Previews and command output are artifacts in the database: an id minted through A reads through B
    (verified, bounded), under the same scope rules (another principal is refused; so is an unknown id)."""
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)
        backend = await open_pg_work(dsn, "work")
        procs: list[subprocess.Popen] = []
        try:
            await backend.grants.issue(principal="agent", steps=["shout"], ttl=_dt.timedelta(hours=1), issuer="test")
            (tmp_path / "ws").mkdir()
            catalog = tmp_path / "catalog.toml"
            catalog.write_text(CATALOG)
            (a, pa), (b, pb), (c, pc) = (_replica(dsn, tmp_path / f"d{i}", catalog, *more)
                                         for i, more in (("a", ()), ("b", ()), ("c", ("--principal", "other"))))
            procs += [pa, pb, pc]
            prv = ok(a, "of_work_preview", {"plan": [{"step": "shout", "params": {}}]})
            assert prv["previewId"].encode() in _read_all(b, prv["artifactId"])  # minted on A, read on B
            ok(a, "of_work_start", {"previewId": prv["previewId"]})
            stdout = ok(a, "of_work_run_step")["result"]["stdout"]
            art = stdout["artifact_id"]
            assert art and stdout["size"] == len("hello " * 5000) + 1, stdout
            assert _read_all(b, art) == ("hello " * 5000 + "\n").encode()  # B reads A's command output
            for url, artifact_id in ((c, prv["artifactId"]), (c, art), (b, "art_" + "0" * 32)):
                refused = tool(url, "of_work_artifact_read", {"artifact_id": artifact_id})
                assert refused.get("isError") and "artifact_not_found" in json.dumps(refused), refused
            import psycopg

            with psycopg.connect(dsn) as conn:
                stores = {r[0] for r in conn.execute("SELECT store FROM of_artifacts").fetchall()}
            assert stores == {"work:work"}, stores
            assert not any((tmp_path / f"d{i}" / "work" / "artifacts" / "index").exists() for i in "abc")
        finally:
            for p in procs:
                stop(p)
            await backend.aclose()


def _read_all(url: str, artifact_id: str) -> bytes:
    """Every byte of an artifact, in bounded chunks (offset += length until eof), each verified by the store."""
    import base64

    data, offset = b"", 0
    while True:
        chunk = ok(url, "of_work_artifact_read", {"artifact_id": artifact_id, "offset": offset})
        data += base64.b64decode(chunk["data_base64"])
        offset += chunk["length"]
        if chunk["eof"]:
            return data


INJECT = Path(__file__).resolve().parents[1] / "work" / "_inject"


@pytest.mark.anyio
async def test_recovery_on_the_database_settles_from_a_receipt_the_dead_replica_committed(pg_dsn, tmp_path) -> None:
    """A killed between the step's settled receipt (committed in the database journal) and its outcome record:
    B's takeover reads the receipt there and settles the operation ``done``, as the file controller does from
    ``<data-dir>/journal``; the plan goes on with the next step; the step ran once."""
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)
        backend = await open_pg_work(dsn, "work")
        procs: list[subprocess.Popen] = []
        try:
            await backend.grants.issue(principal="agent", steps=["count", "note"], paths=["notes/**"],
                                       ttl=_dt.timedelta(hours=1), issuer="test")
            (tmp_path / "ws").mkdir()
            catalog = tmp_path / "catalog.toml"
            catalog.write_text(CATALOG)
            marker = tmp_path / "paused"
            hooks = {"PYTHONPATH": os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")])),
                     "OPENFUNCTIONS_TEST_PAUSE_BEFORE_OUTCOME": str(marker)}
            (a, pa), (b, pb) = (_replica(dsn, tmp_path / "da", catalog, env=hooks), _replica(dsn, tmp_path / "db", catalog))
            procs += [pa, pb]
            plan = [{"step": "count", "params": {"seconds": 0}},
                    {"step": "note", "params": {"path": "notes/n.txt", "content": "after"}}]
            ok(a, "of_work_start", {"previewId": ok(a, "of_work_preview", {"plan": plan})["previewId"]})
            killed_call: list[Any] = []
            threading.Thread(target=_swallow, args=(a, killed_call), daemon=True).start()
            wait_for(marker.exists, timeout=60)  # the step ran, its receipt is committed; no outcome record yet
            pa.kill()
            pa.wait(timeout=10)
            [rid] = [x.data["receipt_id"] for x in await backend.attempts.read(0) if x.type == "dispatched"]
            assert rid in db_receipts(dsn, "work"), "the dead replica's receipt is in the database journal"

            r = ok(b, "of_work_run_step")  # takes the dead holder's lease over, settles from the receipt, goes on
            assert r["operation"]["step"] == "note" and r["operation"]["status"] == "done", r
            st = ok(b, "of_work_status")["attempt"]
            [op] = [o for o in st["operations"] if o["planIndex"] == 0]
            assert op["status"] == "done" and op["certainty"] == "known" and op["receiptId"] == rid, op
            assert st["state"] == "running" and st["cursor"] == 2, st
            records = await backend.attempts.read(0)
            [settled] = [x for x in records if x.type == "outcome" and x.data["operation_id"] == op["operationId"]]
            assert settled.data["source"] == "execution_journal" and settled.data["receipt"]["receipt_id"] == rid
            assert not [x for x in records if x.type == "recovered"], "nothing left unknown"
            counter = tmp_path / "ws" / "counter.txt"
            assert len(_lines(counter)) == 1, "the step ran once"
            assert (tmp_path / "ws" / "notes" / "n.txt").read_text() == "after"
            wait_for(lambda: bool(killed_call), timeout=30)
            assert killed_call == ["no reply"]
        finally:
            for p in procs:
                stop(p)
            await backend.aclose()
        assert verify_pg_work(dsn, "work") == []
