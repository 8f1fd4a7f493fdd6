"""The lease store: acquisition, renewal, expiry, takeover, fencing (in-process, a fake clock)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from openfunctions.work._errors import LeaseHeld, LeaseLost, WorkError
from openfunctions.work._lease import LeaseStore


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.mark.anyio
async def test_first_acquire_writes_generation_one_privately(tmp_path, clock):
    store = LeaseStore(tmp_path / "work", ttl=10, clock=clock)
    lease = await store.acquire()
    assert lease.generation == 1 and lease.expires_at == clock.t + 10
    rec = json.loads((tmp_path / "work" / "lease.json").read_text())
    assert rec["v"] == 1 and rec["owner"] == store.owner and rec["generation"] == 1 and rec["pid"] == os.getpid()
    assert stat.S_IMODE(os.stat(tmp_path / "work" / "lease.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "work").st_mode) == 0o700


@pytest.mark.anyio
async def test_second_owner_refused_while_live_then_takes_over_after_expiry(tmp_path, clock):
    a = LeaseStore(tmp_path, ttl=10, clock=clock)
    b = LeaseStore(tmp_path, ttl=10, clock=clock)
    la = await a.acquire()
    with pytest.raises(LeaseHeld) as err:
        await b.acquire()
    assert a.owner in err.value.message and err.value.details["generation"] == 1
    clock.t += 10.01
    lb = await b.acquire()
    assert lb.generation == 2
    # the old holder is fenced: no renewal, no fenced write, no check
    with pytest.raises(LeaseLost, match="stale"):
        await a.renew(la)
    with pytest.raises(LeaseLost, match="stale"):
        async with a.fenced(la):
            pytest.fail("a stale generation entered the fence")
    async with b.fenced(lb) as rec:
        assert rec["generation"] == 2


@pytest.mark.anyio
async def test_renewal_extends_and_expired_lease_is_lost_not_silently_retaken(tmp_path, clock):
    s = LeaseStore(tmp_path, ttl=10, clock=clock)
    lease = await s.acquire()
    clock.t += 9
    lease = await s.renew(lease)
    assert lease.expires_at == clock.t + 10
    clock.t += 9.5
    await s.check(lease)  # still live thanks to the renewal
    clock.t += 1
    with pytest.raises(LeaseLost, match="expired"):
        await s.renew(lease)
    with pytest.raises(LeaseLost, match="expired"):
        async with s.fenced(lease):
            pytest.fail("an expired lease entered the fence")


@pytest.mark.anyio
async def test_release_keeps_the_generation_so_it_is_never_reused(tmp_path, clock):
    s = LeaseStore(tmp_path, ttl=10, clock=clock)
    first = await s.acquire()
    await s.release(first)
    other = LeaseStore(tmp_path, ttl=10, clock=clock)
    second = await other.acquire()  # released: free at once, no waiting for expiry
    assert second.generation == first.generation + 1
    # releasing a lease that is no longer ours changes nothing
    await s.release(first)
    assert json.loads((tmp_path / "lease.json").read_text())["owner"] == other.owner


@pytest.mark.anyio
async def test_damaged_lease_file_fails_closed(tmp_path, clock):
    s = LeaseStore(tmp_path, ttl=10, clock=clock)
    (tmp_path / "lease.json").write_text("{not json")
    with pytest.raises(WorkError, match="not valid JSON"):
        await s.acquire()
    (tmp_path / "lease.json").write_text(json.dumps({"v": 99, "generation": 3}))
    with pytest.raises(WorkError, match="unknown format"):
        await s.acquire()


def test_ttl_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        LeaseStore(tmp_path, ttl=0)


@pytest.mark.anyio
async def test_a_dead_holder_is_taken_over_at_once_without_waiting_for_expiry(tmp_path, clock):
    a = LeaseStore(tmp_path, ttl=10, clock=clock)
    la = await a.acquire()
    assert (tmp_path / "live.1").exists()
    a._drop_live()  # what the kernel does when a's process dies: its flock on live.1 is gone
    b = LeaseStore(tmp_path, ttl=10, clock=clock)
    lb = await b.acquire()  # the lease was unexpired, but its holder is gone
    assert lb.generation == 2
    assert not (tmp_path / "live.1").exists(), "the dead generation's live file is swept"
    with pytest.raises(LeaseLost):
        await a.check(la)


# -- two real controller processes on one data directory ------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_two_processes_refused_while_live_takeover_after_expiry_stale_generation_fenced(env):
    import time

    from openfunctions.core.journal import read_records

    from ._proc import ChildController, wait_for
    from .test_crash import _counter, _write_catalog

    _write_catalog(env)
    await env.grant(["count"])
    a = ChildController(env.data, env.catalog_path, "--ttl", "1.5", "--renew", "0.3")
    b = ChildController(env.data, env.catalog_path, "--ttl", "1.5", "--renew", "0.3")
    try:
        assert a.ok("open")["generation"] == 1
        prv = a.ok("preview", plan=[{"step": "count", "params": {"seconds": 0}}])
        att = a.ok("start", preview_id=prv["previewId"])
        refused = b.call("open")
        assert not refused["ok"] and refused["error"]["code"] == "lease_held"
        assert "another controller is running" in refused["error"]["message"]
        # A stops answering (but stays alive, holding its kernel locks)
        a.stop()
        lease_file = env.work_dir / "lease.json"
        wait_for(lambda: json.loads(lease_file.read_text())["expires_at"] < time.time(), what="the lease to expire")
        assert b.ok("open")["generation"] == 2
        a.cont()
        # A resumes with generation 1: it cannot record an effect, and runs nothing
        a.send("run")
        assert a.read()["event"] == "dispatching"
        r = a.read()
        assert not r["ok"] and r["error"]["code"] == "lease_lost", r
        assert _counter(env) == []
        st = a.ok("status")
        assert st["controller"]["leaseLost"] is True and st["attempt"]["state"] == "blocked"
        seg1 = [rec.type for rec in read_records(env.work_dir / "attempts" / f"g{1:010d}.jsonl")]
        assert "intent" not in seg1 and "outcome" not in seg1
        # B holds custody of the same attempt and can run the step
        assert b.ok("status")["attempt"]["attemptId"] == att["attemptId"]
        b.send("run")
        assert b.read()["event"] == "dispatching"
        done = b.read()
        assert done["ok"] and done["result"]["operation"]["status"] == "done"
        assert done["result"]["operation"]["leaseGeneration"] == 2
        assert len(_counter(env)) == 1
    finally:
        if a.proc.poll() is None:
            a.cont()
        a.close()
        b.close()


def test_the_lease_directory_and_files_follow_the_one_private_files_policy(tmp_path):
    """work/_lease.py uses core.files (private dir, private open, flock), not its own spellings."""
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(WorkError, match="chmod 700"):
        LeaseStore(loose)  # before: accepted a directory others can read (and plant files in, when 0777)
    fresh = tmp_path / "a" / "work"
    LeaseStore(fresh)
    assert (fresh.stat().st_mode & 0o777) == 0o700
    # a live file swapped for a symlink is refused, not followed
    (fresh / "live.7").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(WorkError, match="symlink"):
        LeaseStore(fresh)._hold_live(7)
    assert not (tmp_path / "elsewhere").exists()
    os.unlink(fresh / "live.7")
