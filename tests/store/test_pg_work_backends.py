"""One conformance suite for the work backends: files and PostgreSQL.

Every test runs on both (``backend`` is parametrized): the lease (generation,
refusal while live, takeover after expiry, stale holders fenced), the attempt
log (fenced appends, one order, the same fold), the grants (issue, revoke,
the checks' reads, the completion fence's synchronous read), a controller
that runs an attempt to completion, two controllers sharing one work space
(an attempt started through one continues through the other), and a crash:
a controller process SIGKILLed mid-step; the next one finds the operation
``unknown``, the attempt ``blocked``, and never runs the step again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.work import (
    Authority,
    Catalog,
    GrantNotFound,
    LeaseHeld,
    LeaseLost,
    WorkController,
    WorkState,
    create_step_tools,
    file_backend,
    fold,
)
from openfunctions.work import records as R
from tests._pg import unique_name
from tests.work._catalogs import COUNT_STEP, WRITE_CATALOG
from tests.work._proc import ChildController, kill_pid, wait_for


class Clock:
    def __init__(self) -> None:
        self.t = 2_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["file", "postgresql"])
def kind(request) -> str:
    return request.param


@pytest.fixture
async def backends(kind, tmp_path, request):
    """``new(owner=..., ttl=..., clock=..., shared=...)``: one more handle on the same work space."""
    opened: list[Any] = []
    dsn = None
    space = unique_name("w")
    if kind == "postgresql":
        from openfunctions.work._pg import migrate_work

        dsn = request.getfixturevalue("pg_dsn")
        await migrate_work(dsn)

    async def new(*, owner: str | None = None, ttl: float = 10.0, clock: Any = None, shared: bool | None = None) -> Any:
        if kind == "file":
            b = file_backend(tmp_path / "data" / "work", ttl=ttl, owner=owner, clock=clock)
        else:
            from openfunctions.work._pg import open_pg_work

            b = await open_pg_work(dsn, space, ttl=ttl, owner=owner, clock=clock)
        if shared is not None:
            b = dataclasses.replace(b, shared=shared)
        opened.append(b)
        return b

    new.kind = kind  # type: ignore[attr-defined]
    new.dsn = dsn  # type: ignore[attr-defined]
    new.space = space  # type: ignore[attr-defined]
    new.data = tmp_path / "data"  # type: ignore[attr-defined]
    yield new
    for b in opened:
        await b.aclose()


# -- the lease ------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_second_owner_is_refused_while_live_and_takes_over_after_expiry_with_a_higher_generation(backends):
    clock = Clock()
    a, b = await backends(ttl=10, clock=clock), await backends(ttl=10, clock=clock)
    la = await a.leases.acquire()
    assert la.generation == 1 and la.expires_at == clock.t + 10
    with pytest.raises(LeaseHeld) as held:
        await b.leases.acquire()
    assert a.leases.owner in held.value.message and held.value.details["generation"] == 1
    clock.t += 10.01
    lb = await b.leases.acquire()
    assert lb.generation == 2
    # the old holder is fenced everywhere: renew, check, and above all its writes
    with pytest.raises(LeaseLost, match="stale"):
        await a.leases.renew(la)
    with pytest.raises(LeaseLost, match="stale"):
        await a.leases.check(la)


@pytest.mark.anyio
async def test_renewal_extends_an_expired_lease_is_lost_and_a_release_keeps_the_generation(backends):
    clock = Clock()
    a = await backends(ttl=10, clock=clock)
    la = await a.leases.acquire()
    clock.t += 6
    la = await a.leases.renew(la)
    assert la.expires_at == clock.t + 10
    clock.t += 10.5
    with pytest.raises(LeaseLost, match="expired"):
        await a.leases.renew(la)  # never silently re-taken
    la2 = await a.leases.acquire()
    assert la2.generation == 2
    await a.leases.release(la2)
    b = await backends(ttl=10, clock=clock)
    assert (await b.leases.acquire()).generation == 3  # released: free at once, the generation never reused


# -- the attempt log --------------------------------------------------------------


def _rec(i: int) -> tuple[str, dict[str, Any]]:
    return R.preview_saved(preview_id=f"prv_{i:032x}", principal="agent", plan=[{"step": "s", "params": {"i": i}}],
                           plan_digest=f"sha256:{i}", catalog_digest="sha256:c", artifact_id=None, created_at="t")


@pytest.mark.anyio
async def test_appends_are_fenced_by_the_generation_and_a_stale_holders_write_is_refused_and_never_lands(backends):
    clock = Clock()
    a, b = await backends(ttl=10, clock=clock), await backends(ttl=10, clock=clock)
    la = await a.leases.acquire()
    await a.attempts.open(la)
    live = WorkState()
    for i in range(3):
        t, d = _rec(i)
        live.apply(await a.attempts.append(la, t, {**d, "lease_generation": la.generation}))
    clock.t += 11  # a's lease expires; b takes over
    lb = await b.leases.acquire()
    await b.attempts.open(lb)
    t, d = _rec(99)
    with pytest.raises(LeaseLost, match="stale"):
        await a.attempts.append(la, t, {**d, "lease_generation": la.generation})
    t, d = _rec(3)
    live.apply(await b.attempts.append(lb, t, {**d, "lease_generation": lb.generation}))
    records = await b.attempts.read(0)
    assert [r.data["preview_id"][-2:] for r in records] == ["00", "01", "02", "03"], "the stale write never landed"
    assert [r.data["lease_generation"] for r in records] == [1, 1, 1, 2]
    assert [r.type for r in await b.attempts.read(2)] == ["preview_saved", "preview_saved"]
    # one durable state, one fold: what the log returns folds to what was applied live
    assert fold(records).snapshot() == live.snapshot()
    await a.attempts.close()
    await b.attempts.close()


# -- grants -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_grants_issue_list_check_revoke_and_the_fences_synchronous_read(backends):
    g = (await backends()).grants
    now = _dt.datetime(2026, 12, 1, 8, 0, tzinfo=_dt.UTC)
    one = await g.issue(principal="agent", steps=["build", "test"], paths=["src/**"], ttl=_dt.timedelta(hours=1),
                        issuer="op", now=now)
    two = await g.issue(principal="other", steps=["test"], ttl=_dt.timedelta(minutes=5), issuer="op", now=now)
    assert [x.grant_id for x in await g.list()] == [one.grant_id, two.grant_id]
    assert (await g.get(one.grant_id)).paths == ("src/**",)
    assert [x.grant_id for x in await g.for_principal("agent")] == [one.grant_id]
    assert [x.grant_id for x in await g.active_for("other", now + _dt.timedelta(minutes=1))] == [two.grant_id]
    assert await g.active_for("other", now + _dt.timedelta(minutes=6)) == []  # expired by the given clock
    with pytest.raises(GrantNotFound):
        await g.get("grant_nope")
    with pytest.raises(ValueError, match="step name"):
        await g.issue(principal="agent", steps=["Bad*"], ttl=_dt.timedelta(hours=1))
    r = await g.revoke(one.grant_id, by="op")
    assert r.revoked_by == "op" and r.revoked()
    again = await g.revoke(one.grant_id, by="someone-else")
    assert again.revoked_by == "op", "the first revocation wins"
    # another handle (another replica, or the CLI) sees it, through the fence's synchronous read too
    other = (await backends()).grants
    assert other.load_sync()[one.grant_id].revoked()
    assert await other.active_for("agent") == []


# -- a controller on each backend ------------------------------------------------------------

CATALOG = WRITE_CATALOG


def _catalog(root: Path, body: str = CATALOG) -> Catalog:
    (root / "ws").mkdir(exist_ok=True)
    (root / "catalog.toml").write_text('version = 1\nworkspace = "ws"\n' + body)
    return Catalog.load(root / "catalog.toml")


async def _controller(backend: Any, root: Path, catalog: Catalog, **kw: Any) -> WorkController:
    from openfunctions.artifacts import ArtifactStore

    store = ArtifactStore(root / "data" / "artifacts")
    return await WorkController.open(
        root / "data" / "work", catalog=catalog, registry=ToolRegistry(create_step_tools(catalog, store=store)),
        authority=Authority(backend.grants, catalog), backend=backend, execution_journals=None, **kw)


@pytest.mark.anyio
async def test_an_attempt_runs_to_completion_and_a_restart_folds_the_same_state(backends, tmp_path):
    catalog = _catalog(tmp_path)
    b = await backends()
    await b.grants.issue(principal="agent", steps=["write_src", "check"], paths=["src/**"], ttl=_dt.timedelta(hours=1))
    ctl = await _controller(b, tmp_path, catalog)
    prv = await ctl.preview([{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}], principal="agent")
    att = await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    assert (await ctl.verify(principal="agent"))["passed"]
    assert (await ctl.complete(principal="agent"))["state"] == "completed"
    live = ctl.state.snapshot()
    await ctl.close()
    again = await _controller(await backends(), tmp_path, catalog)
    assert again.state.attempts[att["attemptId"]].state == "completed"
    assert again.state.snapshot()["attempts"] == live["attempts"], "one durable state, one fold"
    await again.close()


@pytest.mark.anyio
async def test_two_controllers_share_one_work_space_an_attempt_started_through_one_continues_through_the_other(backends, tmp_path):
    catalog = _catalog(tmp_path, CATALOG + """
[steps.note]
kind = "write_file"
description = "write a note"
paths = ["notes/**"]
""")
    a, b = await backends(shared=True), await backends(shared=True)
    await a.grants.issue(principal="agent", steps=["write_src", "check", "note"], paths=["src/**", "notes/**"],
                         ttl=_dt.timedelta(hours=1))
    one, two = await _controller(a, tmp_path, catalog), await _controller(b, tmp_path, catalog)
    prv = await one.preview([{"step": "note", "params": {"path": "notes/n.txt", "content": "1"}},
                             {"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}], principal="agent")
    att = await one.start(prv["previewId"], principal="agent")
    await one.run_step(principal="agent")  # step 0 through the first
    r = await two.run_step(principal="agent")  # step 1 through the second: it read the first's records
    assert r["operation"]["step"] == "write_src"
    assert (await one.verify(principal="agent"))["passed"]
    assert (await two.complete(principal="agent"))["state"] == "completed"
    await one.refresh()
    assert one.status(principal="agent", attempt_id=att["attemptId"])["attempt"]["state"] == "completed"
    assert one.state.snapshot()["attempts"] == two.state.snapshot()["attempts"]
    gens = [rec.data["lease_generation"] for rec in await a.attempts.read(0)]
    assert gens == sorted(gens) and len(set(gens)) >= 5, "each call took the lease anew, generations only grow"
    assert (tmp_path / "ws" / "notes" / "n.txt").read_text() == "1"
    await one.close()
    await two.close()


@pytest.mark.anyio
async def test_a_shared_lifecycle_call_reads_the_attempt_log_and_the_inbox_once(backends, tmp_path):
    """One of_work_run_step of a shared controller: one read of the others' records (after it took the lease)
    and one of the operator's inbox, not one in the tool's readiness check and another in the call."""
    from openfunctions.work import create_work_tools

    catalog = _catalog(tmp_path)
    b = await backends(shared=True)
    await b.grants.issue(principal="agent", steps=["write_src", "check"], paths=["src/**"], ttl=_dt.timedelta(hours=1))
    ctl = await _controller(b, tmp_path, catalog)
    tools = ToolRegistry(create_work_tools(ctl, principal="agent"))
    prv = await ctl.preview([{"step": "write_src", "params": {"path": "src/a.txt", "content": "hello"}}], principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    reads: list[str] = []
    log_read = b.attempts.read

    async def counted(after: int = 0) -> list[Any]:
        reads.append("attempts")
        return await log_read(after)

    b.attempts.read = counted  # type: ignore[method-assign]
    inbox = ctl.inbox
    inbox_read = inbox.read

    def counted_inbox() -> Any:
        reads.append("inbox")
        return inbox_read()

    inbox.unchanged = lambda: False  # as the database's inbox says: no cheap change signal
    inbox.read = counted_inbox
    result = await tools.execute("of_work_run_step", {})
    assert result["operation"]["status"] == "done", result
    assert sorted(reads) == ["attempts", "inbox"], reads
    reads.clear()
    await tools.execute("of_work_status", {})  # a read: folds the others' records, takes no lease
    assert reads == ["attempts"], reads
    await ctl.close()


# -- a crash: SIGKILL mid-step ---------------------------------------------------------------------

COUNT = COUNT_STEP


@pytest.mark.slow
@pytest.mark.anyio
async def test_sigkill_mid_step_then_the_next_controller_blocks_the_unknown_operation_and_never_reruns(backends, tmp_path):
    _catalog(tmp_path, COUNT)
    b = await backends(ttl=2)
    await b.grants.issue(principal="agent", steps=["count"], ttl=_dt.timedelta(hours=1))
    extra = ("--database", backends.dsn, "--space", backends.space) if backends.kind == "postgresql" else ()
    counter = tmp_path / "ws" / "counter.txt"
    first = ChildController(backends.data, tmp_path / "catalog.toml", "--ttl", "2", *extra)
    sleeper = None
    try:
        first.ok("open")
        prv = first.ok("preview", plan=[{"step": "count", "params": {"seconds": 120}}])
        att = first.ok("start", preview_id=prv["previewId"])
        first.send("run")
        assert first.read()["event"] == "dispatching"
        wait_for(lambda: counter.exists() and len(counter.read_text().splitlines()) == 1, what="the command to run")
        sleeper = int(counter.read_text().split()[1])
        first.kill()  # SIGKILL while it holds the lease, mid-step: no outcome can be recorded
        second = ChildController(backends.data, tmp_path / "catalog.toml", "--ttl", "2", *extra)
        try:
            second.ok("open")
            r = second.call("run")  # a shared backend takes the lease here: after the dead holder's expiry
            assert r["event"] == "dispatching"
            r = second.read()
            assert not r["ok"] and r["error"]["code"] == "effect_uncertain", r
            st = second.ok("status")["attempt"]
            assert st["attemptId"] == att["attemptId"] and st["state"] == "blocked"
            [op] = st["operations"]
            assert op["status"] == "unknown" and op["step"] == "count"
            kill_pid(sleeper)
            assert len(counter.read_text().splitlines()) == 1, "the step ran once"
        finally:
            second.close()
    finally:
        first.close()
        if sleeper is not None:
            kill_pid(sleeper)
    records = await (await backends()).attempts.read(0)
    ops = [r for r in records if r.data.get("operation_id") == op["operationId"]]
    assert [r.type for r in ops].count("intent") == 1 and not [r for r in ops if r.type == "outcome"]
    intent_gen = next(r.data["lease_generation"] for r in ops if r.type == "intent")
    recovered = [r for r in records if r.type == "recovered"]
    assert recovered and recovered[-1].data["lease_generation"] > intent_gen, "taken over with a higher generation"
    if backends.kind == "postgresql":
        from openfunctions.work._pg import verify_pg_work

        assert verify_pg_work(backends.dsn, backends.space) == []


@pytest.mark.anyio
async def test_the_operators_inbox_keeps_resolutions_in_one_seq_order_and_refuses_bad_ones(backends):
    from openfunctions.work import ResolutionInbox

    b = await backends()
    if backends.kind == "postgresql":  # the database case must test the database's inbox, not fall back to files
        assert b.resolutions is not None and type(b.resolutions).__module__ == "openfunctions.work._pg"
    inbox = b.resolutions if b.resolutions is not None else ResolutionInbox(backends.data / "work")
    one = await inbox.resolve("op_1", as_="applied", reason="checked the file", by="op")
    two = await inbox.resolve("op_2", as_="not_applied", reason="nothing there", by="op")
    assert one["seq"] < two["seq"]
    with pytest.raises(ValueError, match="--as"):
        await inbox.resolve("op_3", as_="maybe", reason="x", by="op")
    with pytest.raises(ValueError, match="reason"):
        await inbox.resolve("op_3", as_="applied", reason="  ", by="op")
    other = (await backends()).resolutions or ResolutionInbox(backends.data / "work")  # another replica's view
    assert [(seq, d["operation_id"], d["as"]) for seq, d in other.read()] == [
        (one["seq"], "op_1", "applied"), (two["seq"], "op_2", "not_applied")]
