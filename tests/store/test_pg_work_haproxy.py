"""Work through a real balancer: three work replicas behind haproxy, the lease holder SIGKILLed under load.

Three ``serve --profile work --transport http --stateless --database URL``
replicas on one database, a real haproxy (Debian's package, round robin,
health-checked) in front; every client talks to the balancer only:

- an agent drives work attempts (preview, start, run_step ..., verify,
  complete); each ``mark``/``slow`` step is a command that appends its own tag
  to ``marks.txt`` (fsynced) — the step's effect, counted;
- status readers load the balancer all along (``of_work_status``: any replica
  answers, from the records the others appended);
- while a ``slow`` step runs, the replica holding the lease (the row names its
  pid) is SIGKILLed; the agent's call gets no reply (a 502: haproxy retries
  only connection failures, never a request a replica took);
- the agent's next ``of_work_run_step`` lands on a survivor, which takes the
  dead holder's lease over at once (its liveness lock died with it; the TTL
  is not waited for) with a higher generation, and recovery blocks the uncertain operation (``effect_uncertain``) exactly as
  the file backend does; the dead holder's generation may write nothing;
- without an operator's word the step is never run again: a new plan naming
  it is refused (``operation_uncertain``); the agent cancels and carries on
  with attempts of other steps, through the balancer, to completion.

Checked at the end: every tag is in ``marks.txt`` at most once, and exactly
once for every step a client saw succeed; every receipt a client saw is in
the database's execution journal as seen; ``journal verify`` (the database's)
passes with nothing left unsettled (the survivors' sweep settles the dead
replica's calls ``unknown``); the work space's audit is clean.
"""

from __future__ import annotations

import datetime as _dt
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from openfunctions.store import verify_pg_journal
from openfunctions.work import Lease, LeaseLost
from openfunctions.work._pg import open_pg_work, verify_pg_work
from tests._net import free_port

from ._journal_backends import private_database
from ._replicas import (
    Load,
    db_receipts,
    haproxy_binary,
    receipt_of,
    start_haproxy,
    start_work_replica,
    stop,
    tool_call,
    wait_for,
)

pytestmark = pytest.mark.slow

TTL = 3.0
#: appends "<tag> <pid>" to marks.txt (fsynced), then sleeps <seconds>
MARKER = (
    "import os,sys,time\n"
    "with open('marks.txt','a') as f:\n"
    "    f.write('%s %d\\n' % (sys.argv[1], os.getpid())); f.flush(); os.fsync(f.fileno())\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def _marker_step(name: str, description: str) -> str:
    return (
        f"\n[steps.{name}]\n"
        'kind = "command"\n'
        f'description = "{description}"\n'
        f"argv = ['{sys.executable}', '-c', '''{MARKER}''', '{{tag}}', '{{seconds}}']\n"
        'effect = "write"\n'
        "timeout_s = 300\n"
        'env = ["PATH"]\n'
        f"[steps.{name}.params.tag]\n"
        'type = "string"\n'
        'pattern = "[a-z0-9-]+"\n'
        f"[steps.{name}.params.seconds]\n"
        'type = "integer"\n'
        "minimum = 0\n"
        "maximum = 600\n"
    )


CATALOG = (
    'version = 1\nworkspace = "ws"\n'
    + _marker_step("mark", "append a tag to marks.txt")
    + _marker_step("slow", "append a tag to marks.txt, then take a while")
    + "\n[steps.check]\n"
    'kind = "command"\n'
    'description = "the verifier: marks.txt exists"\n'
    f"argv = ['{sys.executable}', '-c', \"import os,sys; sys.exit(0 if os.path.exists('marks.txt') else 1)\"]\n"
    'effect = "read"\n'
    "verifier = true\n"
    'env = ["PATH"]\n'
)


class Agent:
    """Calls through the balancer; keeps every receipt it saw and every step it saw succeed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[dict[str, Any]] = []
        self.succeeded: list[str] = []  # tags of the steps whose run_step reply said done
        self.lock = threading.Lock()

    def call(self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float = 120,
             client: httpx.Client | None = None) -> dict[str, Any]:
        r = tool_call(self.url, name, arguments, timeout=timeout, client=client)
        receipt = receipt_of(r)
        if receipt:
            with self.lock:
                self.seen.append(receipt)
        return r

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        r = self.call(name, arguments)
        assert not r.get("isError"), r
        return dict(r["structuredContent"])

    def run_attempt(self, tags: list[str]) -> str:
        """One whole attempt of ``mark`` steps: preview, start, each step, verify, complete."""
        plan = [{"step": "mark", "params": {"tag": t, "seconds": 0}} for t in tags]
        prv = self.ok("of_work_preview", {"plan": plan})
        att = str(self.ok("of_work_start", {"previewId": prv["previewId"]})["attemptId"])
        for t in tags:
            self.step(t)
        assert self.ok("of_work_verify")["state"] == "verified"
        assert self.ok("of_work_complete")["state"] == "completed"
        return att

    def step(self, tag: str) -> dict[str, Any]:
        r = self.ok("of_work_run_step")
        assert r["operation"]["status"] == "done", r
        with self.lock:
            self.succeeded.append(tag)
        return r


def status_load(url: str, workers: int = 3) -> Load:
    """Threads reading ``of_work_status`` through the balancer until stopped (no lease: reads only)."""

    def status(client: httpx.Client, n: int) -> dict[str, Any]:
        r = tool_call(url, "of_work_status", timeout=30, client=client)
        if r.get("isError"):
            raise ValueError(f"of_work_status refused: {r}")
        return receipt_of(r)

    return Load(url, workers, call_once=status, pause=0.02)


def _marks(ws: Path) -> list[str]:
    p = ws / "marks.txt"
    return [line.split()[0] for line in p.read_text().splitlines()] if p.exists() else []


@pytest.mark.anyio
async def test_work_through_haproxy_lease_holder_killed_no_step_runs_twice(pg_dsn, tmp_path) -> None:
    haproxy = haproxy_binary()
    with private_database(pg_dsn) as dsn:
        migrated = subprocess.run([sys.executable, "-m", "openfunctions.servers", "db", "migrate", "--database", dsn],
                                  capture_output=True, text=True, timeout=120)
        assert migrated.returncode == 0, migrated.stderr
        backend = await open_pg_work(dsn, "work")
        try:
            await backend.grants.issue(principal="agent", steps=["mark", "slow", "check"],
                                       ttl=_dt.timedelta(hours=1), issuer="test")
            await _scenario(dsn, tmp_path, backend, haproxy)
        finally:
            await backend.aclose()


async def _scenario(dsn: str, tmp_path: Path, backend: Any, haproxy: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(CATALOG)
    port = free_port()
    procs: list[subprocess.Popen] = []
    urls: list[str] = []
    lb = load = None
    try:
        for i in range(3):  # behind a balancer the Host header names the balancer: allow it
            url, proc = start_work_replica(dsn, tmp_path / f"d{i}", catalog, "--allowed-host", f"127.0.0.1:{port}", ttl=TTL)
            urls.append(url)
            procs.append(proc)
        lb = start_haproxy(haproxy, port, urls, tmp_path / "haproxy.cfg", timeout=300)
        agent = Agent(f"http://127.0.0.1:{port}/mcp")
        load = status_load(agent.url).start()

        # 1. whole attempts through the balancer, every call to whichever replica haproxy picks
        completed = [agent.run_attempt([f"a{n}-{i}" for i in range(3)]) for n in range(2)]

        # 2. an attempt whose second step takes a while; its lease holder dies mid-step
        plan = [{"step": "mark", "params": {"tag": "b-0", "seconds": 0}},
                {"step": "slow", "params": {"tag": "b-slow", "seconds": 120}}]
        att = agent.ok("of_work_start", {"previewId": agent.ok("of_work_preview", {"plan": plan})["previewId"]})["attemptId"]
        agent.step("b-0")
        killed_call: list[Any] = []

        def slow_step() -> None:
            try:
                killed_call.append(agent.call("of_work_run_step", timeout=300))
            except (httpx.HTTPError, ValueError, StopIteration) as exc:
                killed_call.append(f"no reply: {str(exc)[:80]}")

        threading.Thread(target=slow_step, daemon=True).start()
        wait_for(lambda: "b-slow" in _marks(ws), timeout=60)
        holder = await backend.leases.read()
        [victim] = [p for p in procs if p.pid == holder["pid"]]  # the replica the balancer gave the step to
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        old = Lease(holder["owner"], holder["generation"], holder["expires_at"], holder["ttl"])
        wait_for(lambda: bool(killed_call), timeout=30)
        assert isinstance(killed_call[0], str) and killed_call[0].startswith("no reply"), killed_call

        # 3. the agent carries on through the balancer: a survivor takes the lease over; the step is refused
        t_kill = time.monotonic()
        r = agent.call("of_work_run_step")
        took_over_in = time.monotonic() - t_kill  # from the 502 to this reply; reported, not asserted
        assert r.get("isError") and "effect_uncertain" in json.dumps(r), r
        st = agent.ok("of_work_status")["attempt"]
        assert st["attemptId"] == att and st["state"] == "blocked" and st["blockedReason"]["code"] == "effect_uncertain", st
        [op] = [o for o in st["operations"] if o["planIndex"] == 1]
        assert op["status"] == "unknown" and op["leaseGeneration"] == old.generation, op
        now = await backend.leases.read()
        assert now["generation"] > old.generation and now["owner"] != old.owner and now["pid"] != victim.pid

        # the dead holder's generation may write nothing
        before = len(await backend.attempts.read(0))
        with pytest.raises(LeaseLost, match="stale"):
            await backend.attempts.append(old, "outcome", {"attempt_id": att, "operation_id": op["operationId"],
                                                           "status": "done", "lease_generation": old.generation})
        assert len(await backend.attempts.read(0)) == before

        # 4. without an operator's word: the uncertain step is never run again, other work goes on
        again = agent.call("of_work_run_step")
        assert again.get("isError") and "effect_uncertain" in json.dumps(again), again
        assert agent.ok("of_work_cancel", {"reason": "the slow step's outcome is unknown"})["state"] == "cancelled"
        refused = agent.call("of_work_preview", {"plan": [{"step": "slow", "params": {"tag": "c-slow", "seconds": 0}}]})
        assert refused.get("isError") and "operation_uncertain" in json.dumps(refused), refused
        completed += [agent.run_attempt([f"d{n}-{i}" for i in range(2)]) for n in range(2)]
        load.stop()
        # the survivors' sweep settles the dead replica's in-flight calls `unknown`: nothing stays open
        wait_for(lambda: verify_pg_journal(dsn, "work").unsettled == 0, timeout=30)
    finally:
        if load is not None:
            load.stop()
        if lb is not None:
            lb.kill()
            lb.wait(timeout=10)
            lb.stderr.close()  # type: ignore[union-attr]
        for p in procs:
            stop(p)

    # each step's effect at most once; exactly once for every step a client saw succeed
    marks = _marks(ws)
    assert len(marks) == len(set(marks)), f"a step ran twice: {marks}"
    assert sorted(agent.succeeded) == sorted(m for m in marks if m != "b-slow")
    assert marks.count("b-slow") == 1 and "c-slow" not in marks
    # every receipt a client saw through the balancer is in the database, as seen
    stored = db_receipts(dsn, "work")
    assert load.seen, "the status readers got replies through the balancer"
    missing = [r["receipt_id"] for r in [*agent.seen, *load.seen] if stored.get(r["receipt_id"]) != r]
    assert not missing, f"{len(missing)} receipt(s) a client saw are not in the database as seen: {missing[:3]}"
    report = verify_pg_journal(dsn, "work")
    assert report.ok and report.unsettled == 0, report.problems
    assert verify_pg_work(dsn, "work") == []
    records = await _records(dsn)
    owners = {d["owner"] for t, d in records if t == "lease_acquired"}
    assert len(owners) == 3, "every replica took the lease for some call"
    recovered = [d for t, d in records if t == "recovered"]
    assert [d["unknown_operations"] for d in recovered] == [[op["operationId"]]]
    assert recovered[0]["lease_generation"] > old.generation
    intents = [d for t, d in records if t == "intent" and d.get("operation_id") == op["operationId"]]
    assert len(intents) == 1
    swept = [r for r in stored.values() if r.get("recovered")]
    print(f"\nwork through haproxy: {len(completed)} attempts completed, {len(agent.succeeded)} steps each ran once; "
          f"{len(agent.seen) + len(load.seen)} receipts seen through the balancer, all in the database; "
          f"{len(load.seen)} status reads "
          f"({load.errors} without a reply at the kill); lease generation {old.generation} -> {now['generation']} "
          f"(the takeover's call answered {took_over_in:.2f}s after the killed call's 502, lease TTL {TTL}s); "
          f"1 operation blocked unknown, never re-run; {len(swept)} call(s) of the dead replica settled unknown by "
          f"the survivors' sweep; {report.records} journal records verified")


async def _records(dsn: str) -> list[tuple[str, dict[str, Any]]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT type, data FROM of_work_records WHERE space = 'work' ORDER BY seq").fetchall()
    return [(t, json.loads(d)) for t, d in rows]
