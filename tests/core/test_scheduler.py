"""Scheduler exclusivity, bounded pool, FIFO and write barriers — proven with events and counters."""

import anyio
import pytest

from openfunctions.core import AdmissionRefused, ToolExecutionContext, ToolRegistry, define_tool, with_child_execution

from ._helpers import Gate, until

READ = {"effect": "read", "parallel_safe": True}
WRITE = {"effect": "write"}


@pytest.mark.anyio
async def test_unclassified_tools_run_exclusively_in_fifo_order():
    g = Gate()
    reg = ToolRegistry([g.tool("u")])
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        for k in "abc":
            tg.start_soon(reg.execute, "u", {"key": k})
            await until(lambda k=k: k in g.running or sched.queued >= 1)
        await until(lambda: sched.queued == 2)
        assert g.running == {"a"}
        for k in "abc":
            await until(lambda k=k: k in g.running)
            assert len(g.running) == 1
            g.open(k)
    assert g.started == ["a", "b", "c"] and g.max_running == 1


@pytest.mark.anyio
async def test_parallel_safe_reads_share_a_bounded_pool():
    g = Gate()
    reg = ToolRegistry([g.tool("r", **READ)], max_parallel=3)
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        for k in "abcde":
            tg.start_soon(reg.execute, "r", {"key": k})
        await until(lambda: len(g.running) == 3 and sched.queued == 2)
        assert g.started == ["a", "b", "c"]
        g.open("b")
        await until(lambda: "d" in g.running)
        assert len(g.running) == 3 and sched.queued == 1
        for k in "acde":
            g.open(k)
    assert g.max_running == 3


@pytest.mark.anyio
async def test_write_is_a_barrier_and_later_reads_wait_behind_it():
    g = Gate()
    reg = ToolRegistry([g.tool("r", **READ), g.tool("w", **WRITE)], max_parallel=8)
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute, "r", {"key": "r1"})
        tg.start_soon(reg.execute, "r", {"key": "r2"})
        await until(lambda: g.running == {"r1", "r2"})
        tg.start_soon(reg.execute, "w", {"key": "w"})
        await until(lambda: sched.queued == 1)
        tg.start_soon(reg.execute, "r", {"key": "r3"})
        await until(lambda: sched.queued == 2)
        # the pool has room, yet r3 waits behind the queued write (no starvation)
        assert "r3" not in g.running and "w" not in g.running
        g.open("r1")
        await until(lambda: "r1" not in g.running)
        assert "w" not in g.running  # a write waits for every running read
        g.open("r2")
        await until(lambda: g.running == {"w"})
        assert sched.queued == 1
        g.open("w")
        await until(lambda: "r3" in g.running)
        g.open("r3")
    assert g.started == ["r1", "r2", "w", "r3"]


@pytest.mark.anyio
async def test_projection_shares_the_scheduler_barrier():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **WRITE), g.tool("r", **READ)])
    view = reg.project(names=["r"])
    assert view.executor is reg.executor
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute, "w", {"key": "w"})
        await until(lambda: "w" in g.running)
        tg.start_soon(view.execute, "r", {"key": "r"})
        await until(lambda: reg.executor.scheduler.queued == 1)
        assert "r" not in g.running
        g.open("w")
        await until(lambda: "r" in g.running)
        g.open("r")


def _child_caller(name, child, capability=None):
    async def handler(params, ctx):
        d = await ctx.metadata["registry"].execute_detailed(child, {}, with_child_execution(ctx, scopes=params.get("scopes")))
        return {"child_receipt": d.receipt.model_dump(), "error": d.error.code if d.error else None}

    return define_tool(name=name, description="", handler=handler, capability=capability)


@pytest.mark.anyio
async def test_child_execution_inherits_reservation_and_narrows_authority():
    seen = {}

    async def child(params, ctx):
        seen["scopes"] = ctx.scopes
        return {}

    reg = ToolRegistry([
        _child_caller("parent_x", "child_w"),
        define_tool(name="child_w", description="", handler=child, capability=WRITE),
        define_tool(name="child_r", description="", handler=child, capability=READ),
        _child_caller("parent_r", "child_w", capability=READ),
        _child_caller("parent_r2", "child_r", capability=READ),
    ])
    ctx = ToolExecutionContext(principal="p", scopes=frozenset({"a", "b"}), metadata={"registry": reg})
    # An exclusive parent may delegate a write without deadlocking on its own reservation.
    d = await reg.execute_detailed("parent_x", {"scopes": ["a", "z"]}, ctx)
    out = d.result.structured
    assert out["error"] is None
    assert out["child_receipt"]["parent_receipt_id"] == d.receipt.receipt_id
    assert seen["scopes"] == frozenset({"a"})  # narrowed, never widened
    # A read reservation cannot become a write reservation.
    d = await reg.execute_detailed("parent_r", {}, ctx)
    assert d.result.structured["error"] == "admission_refused"
    assert d.result.structured["child_receipt"]["outcome"] == "rejected"
    # A read may delegate a read.
    d = await reg.execute_detailed("parent_r2", {}, ctx)
    assert d.result.structured["error"] is None


def test_child_execution_needs_a_running_call():
    with pytest.raises(AdmissionRefused):
        with_child_execution(ToolExecutionContext())
