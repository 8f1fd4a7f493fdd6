"""The lease store: acquisition, renewal, expiry, takeover, fencing (in-process, a fake clock)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from openfunctions.work.errors import LeaseHeld, LeaseLost, WorkError
from openfunctions.work.lease import LeaseStore


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
