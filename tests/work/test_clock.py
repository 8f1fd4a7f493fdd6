"""One injectable clock: lease renewal and expiry, grant expiry at completion, without waiting on the wall clock."""

from __future__ import annotations

import datetime as _dt

import anyio
import pytest

from openfunctions.work._errors import GrantExpired, LeaseLost
from openfunctions.work._lease import LeaseStore

from .test_controller import CATALOG, PLAN, Counter

pytestmark = pytest.mark.anyio


class FakeClock:
    """Time moves only when the test says so; the renewal lane sleeps until the test ticks it."""

    def __init__(self) -> None:
        self.t = 1_900_000_000.0
        self.ticks = 0
        self.slept = anyio.Event()
        self._tick = anyio.Event()

    def time(self) -> float:
        return self.t

    def now(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(self.t, _dt.UTC)

    async def sleep(self, seconds: float) -> None:
        self.slept.set()
        await self._tick.wait()
        self._tick = anyio.Event()

    def tick(self) -> None:
        self._tick.set()


async def test_renewal_is_paced_by_the_injected_clock(env):
    clock = FakeClock()
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"), ttl_s=10**9)
    ctl = await env.open(Counter().tools(), clock=clock, lease_ttl=30)
    await clock.slept.wait()
    assert ctl._renewals == 0
    before = ctl.lease.expires_at
    clock.t += 20
    clock.tick()
    while ctl._renewals == 0:
        await anyio.sleep(0)
    assert ctl.lease.expires_at == before + 20  # renewed against the injected time


async def test_a_lease_expired_by_the_clock_fences_the_controller(env):
    clock = FakeClock()
    env.write_catalog(CATALOG)
    await env.grant(("bump", "look", "check"), ttl_s=10**9)
    ctl = await env.open(Counter().tools(), clock=clock, lease_ttl=30)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    clock.t += 31  # past expiry, and no renewal ran
    thief = LeaseStore(env.work_dir, ttl=30, clock=clock.time)
    await thief.acquire()
    with pytest.raises(LeaseLost):
        await ctl.run_step(principal="agent")


async def test_grant_expiry_at_completion_reads_the_injected_clock(env):
    clock = FakeClock()
    env.write_catalog(CATALOG)
    g = await env.grants().issue(principal="agent", steps=["bump", "look", "check"], paths=["**"],
                                 ttl=_dt.timedelta(hours=1), issuer="test", now=clock.now())
    ctl = await env.open(Counter().tools(), clock=clock, lease_ttl=10**6)
    prv = await ctl.preview(PLAN, principal="agent")
    await ctl.start(prv["previewId"], principal="agent")
    await ctl.run_step(principal="agent")
    await ctl.run_step(principal="agent")
    assert (await ctl.verify(principal="agent"))["passed"]
    clock.t += 2 * 3600  # the grant is an hour past its expiry, on the injected clock only
    with pytest.raises(GrantExpired, match=g.grant_id):
        await ctl.complete(principal="agent")
