"""Scoped write barriers ("lanes"): conflict keys, the parallel-safe write pool, child rules.

Ordering is proven with gates (each handler waits for its own event) and the
scheduler's counters, never with wall-clock time.
"""

import anyio
import pytest

from openfunctions.core import (
    Admission,
    Capability,
    ConflictKeysInvalid,
    MemoryJournalSink,
    Scheduler,
    ToolDefinitionError,
    ToolExecutionContext,
    ToolRegistry,
    define_tool,
    digest,
    with_child_execution,
)

from ._helpers import Gate, until

KEYED = {"effect": "write", "conflict_keys": ["/repo"]}
KEYED_READ = {"effect": "read", "parallel_safe": True, "conflict_keys": ["/repo"]}
PARALLEL_WRITE = {"effect": "external", "parallel_safe": True}
READ = {"effect": "read", "parallel_safe": True}


def _start(tg, reg, name, key, repo=None):
    params = {"key": key} if repo is None else {"key": key, "repo": repo}
    tg.start_soon(reg.execute_detailed, name, params)


# -- what runs with what ---------------------------------------------------------


@pytest.mark.anyio
async def test_writes_sharing_a_key_never_overlap_and_run_in_arrival_order():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED), g.tool("w2", effect="external", conflict_keys=["/repo"])])
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "a", "X")
        await until(lambda: "a" in g.running)
        _start(tg, reg, "w2", "b", "X")  # another tool keyed on the same repo: the same key
        await until(lambda: sched.queued == 1)
        _start(tg, reg, "w", "c", "X")
        await until(lambda: sched.queued == 2)
        for k in "abc":
            await until(lambda k=k: k in g.running)
            assert g.running == {k}
            g.open(k)
    assert g.started == ["a", "b", "c"] and g.max_running == 1


@pytest.mark.anyio
async def test_writes_with_disjoint_keys_run_at_once():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED)])
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "a", "X")
        _start(tg, reg, "w", "b", "Y")
        await until(lambda: g.running == {"a", "b"})  # both inside their handlers at once
        assert reg.executor.scheduler.queued == 0
        g.open("a")
        g.open("b")
    assert g.max_running == 2


@pytest.mark.anyio
async def test_a_read_waits_for_an_earlier_write_to_its_key_and_a_later_read_waits_behind_a_queued_write():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED), g.tool("r", **KEYED_READ), g.tool("plain_read", **READ)])
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "r", "r1", "X")
        _start(tg, reg, "r", "r2", "X")
        await until(lambda: g.running == {"r1", "r2"})  # reads of one key share
        _start(tg, reg, "w", "w", "X")
        await until(lambda: sched.queued == 1)
        _start(tg, reg, "r", "r3", "X")  # could share with r1/r2, yet waits behind the queued write
        await until(lambda: sched.queued == 2)
        _start(tg, reg, "r", "rY", "Y")  # another key: runs now
        _start(tg, reg, "plain_read", "p", None)  # a keyless read: conflicts with no key
        await until(lambda: {"rY", "p"} <= g.running)
        assert "w" not in g.running and "r3" not in g.running
        g.open("r1")
        await until(lambda: "r1" not in g.running)
        assert "w" not in g.running  # waits for every running read of its key
        g.open("r2")
        await until(lambda: "w" in g.running)
        assert "r3" not in g.running
        g.open("w")
        await until(lambda: "r3" in g.running)
        for k in ("r3", "rY", "p"):
            g.open(k)
    assert g.started.index("w") < g.started.index("r3")


@pytest.mark.anyio
async def test_a_registry_barrier_excludes_everything_and_nothing_queued_after_it_passes_it():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED), g.tool("u"), g.tool("p", **PARALLEL_WRITE), g.tool("r", **READ)])
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "w1", "X")
        _start(tg, reg, "p", "p1")
        await until(lambda: g.running == {"w1", "p1"})
        _start(tg, reg, "u", "u")  # the barrier waits for everything running
        await until(lambda: sched.queued == 1)
        _start(tg, reg, "w", "w2", "Y")  # free key, room in the pool: still waits behind the barrier
        _start(tg, reg, "p", "p2")
        _start(tg, reg, "r", "r1")
        await until(lambda: sched.queued == 4)
        assert g.running == {"w1", "p1"}
        g.open("w1")
        await until(lambda: "w1" not in g.running)
        assert "u" not in g.running and sched.queued == 4
        g.open("p1")
        await until(lambda: g.running == {"u"})  # alone
        assert sched.queued == 3
        g.open("u")
        await until(lambda: g.running == {"w2", "p2", "r1"})  # then everything behind it at once
        for k in ("w2", "p2", "r1"):
            g.open(k)
    assert g.started[:3] == ["w1", "p1", "u"]


@pytest.mark.anyio
async def test_parallel_safe_writes_overlap_up_to_their_pool_bound():
    g = Gate()
    reg = ToolRegistry([g.tool("p", **PARALLEL_WRITE), g.tool("r", **READ)], max_parallel=1, max_parallel_writes=3)
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        for k in "abcde":
            _start(tg, reg, "p", k)
        await until(lambda: len(g.running) == 3 and sched.queued == 2)
        assert g.started == ["a", "b", "c"]
        _start(tg, reg, "r", "read")  # the read pool is its own
        await until(lambda: "read" in g.running)
        g.open("b")
        await until(lambda: "d" in g.running)
        assert len(g.running - {"read"}) == 3 and sched.queued == 1
        for k in ("a", "c", "d", "e", "read"):
            g.open(k)
    assert g.started.index("d") < g.started.index("e")


@pytest.mark.anyio
async def test_unclassified_tools_and_unkeyed_writes_stay_barriers():
    g = Gate()
    reg = ToolRegistry([g.tool("u"), g.tool("w", effect="write"), g.tool("ro", effect="read")])
    assert [reg.get(n).schedule_class for n in ("u", "w", "ro")] == ["exclusive"] * 3
    sched = reg.executor.scheduler
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "a")
        await until(lambda: "a" in g.running)
        _start(tg, reg, "w", "b")
        _start(tg, reg, "ro", "c")
        await until(lambda: sched.queued == 2)
        for k in "abc":
            await until(lambda k=k: k in g.running)
            assert g.running == {k}
            g.open(k)
    assert g.max_running == 1


@pytest.mark.anyio
async def test_cancelling_a_queued_keyed_write_lets_the_next_one_in():
    g = Gate()
    sink = MemoryJournalSink()
    reg = ToolRegistry([g.tool("w", **KEYED), g.tool("u")], sink=sink)
    sched = reg.executor.scheduler
    scopes = {}

    async def cancellable(name, key, repo=None):
        with anyio.CancelScope() as scope:
            scopes[key] = scope
            await reg.execute_detailed(name, {"key": key} if repo is None else {"key": key, "repo": repo})

    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "a", "X")
        await until(lambda: "a" in g.running)
        tg.start_soon(cancellable, "w", "b", "X")
        await until(lambda: sched.queued == 1)
        _start(tg, reg, "w", "c", "X")
        await until(lambda: sched.queued == 2)
        scopes["b"].cancel()
        await until(lambda: sched.queued == 1)
        g.open("a")
        await until(lambda: "c" in g.running)
        # A cancelled barrier frees what queued behind it.
        tg.start_soon(cancellable, "u", "u")
        await until(lambda: sched.queued == 1)
        _start(tg, reg, "w", "d", "Y")
        await until(lambda: sched.queued == 2)
        assert "d" not in g.running
        scopes["u"].cancel()
        await until(lambda: "d" in g.running)
        g.open("c")
        g.open("d")
    assert g.started == ["a", "c", "d"]
    cancelled = sorted(r.outcome + "/" + r.certainty for r in sink.receipts if r.outcome == "cancelled")
    assert cancelled == ["cancelled/known", "cancelled/known"]
    assert sched.running_writes == 0 and not sched._held and not sched.running_exclusive


# -- keys from params ------------------------------------------------------------


def _noop(params, ctx):
    return {}


def test_call_keys_come_from_pointers_and_the_key_fn():
    t = define_tool(
        name="t", description="", handler=_noop,
        capability=Capability(effect="write", conflict_keys=("/repo", "/opts/branch", "/a~1b", "/list/1"),
                              conflict_key_fn=lambda p: [f"mcp:{p.get('server', 'none')}"]),
    )
    assert t.schedule_class == "keyed"
    adm = t.admission({"repo": "r1", "opts": {"branch": 7}, "a/b": [1, {"z": 2}], "list": ["x", "y"], "server": "s"})
    assert adm == Admission("write", frozenset({"r1", "7", '[1,{"z":2}]', "y", "mcp:s"}))
    # An absent pointer (or a list index past the end) gives the key "null".
    assert t.admission({}).keys == frozenset({"null", "mcp:none"})
    # The key fn is code: not in the spec; the pointers are.
    assert t.spec()["capability"]["conflict_keys"] == ["/repo", "/opts/branch", "/a~1b", "/list/1"]
    assert "conflict_key_fn" not in t.spec()["capability"]


def test_a_tool_without_keys_keeps_its_spec_digest():
    plain = define_tool(name="t", description="", handler=_noop, capability={"effect": "write"})
    assert "conflict_keys" not in plain.spec()["capability"]
    before = {k: v for k, v in plain.spec()["capability"].items()}
    assert plain.spec_sha256 == digest({**plain.spec(), "capability": before})
    keyed = define_tool(name="t", description="", handler=_noop, capability={"effect": "write", "conflict_keys": ["/x"]})
    assert keyed.spec_sha256 != plain.spec_sha256


@pytest.mark.parametrize("pointer", ["repo", "/a~2", "/a~", "", "/" * 600])
def test_a_bad_pointer_is_refused_at_definition_time_naming_it(pointer):
    with pytest.raises(ToolDefinitionError) as info:
        define_tool(name="t", description="", handler=_noop, capability={"effect": "write", "conflict_keys": [pointer]})
    assert info.value.code == "tool_definition_invalid" and "conflict_keys" in info.value.message
    assert repr(pointer[:80]) in info.value.message


def test_an_async_key_fn_is_refused_at_definition_time():
    async def keys(params):
        return ["k"]

    with pytest.raises(ToolDefinitionError, match="conflict_key_fn"):
        Capability(effect="write", conflict_key_fn=keys)


def _infinite(params):
    while True:
        yield "k"


@pytest.mark.parametrize("fn, reason", [
    (lambda p: 1 / 0, "raised ZeroDivisionError"),
    (lambda p: "repo", "returned str"),
    (lambda p: {"a": 1}, "returned dict"),
    (lambda p: None, "returned NoneType"),
    (lambda p: [1], "a int key"),
    (lambda p: ["x" * 513], "longer than 512"),
    (lambda p: [str(i) for i in range(65)], "more than 64"),
    (_infinite, "more than 64"),
])
@pytest.mark.anyio
async def test_a_key_fn_that_raises_or_returns_junk_is_refused_and_leaves_no_stuck_slot(fn, reason):
    sink = MemoryJournalSink()
    bad = define_tool(name="bad", description="", handler=_noop, capability=Capability(effect="write", conflict_key_fn=fn))
    u = define_tool(name="u", description="", handler=_noop)
    reg = ToolRegistry([bad, u], sink=sink)
    with pytest.raises(ConflictKeysInvalid):
        bad.admission({})
    d = await reg.execute_detailed("bad", {})
    assert d.error is not None and d.error.code == "conflict_keys_invalid" and reason in d.error.message
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("rejected", "known", False)
    assert sink.starts == []
    # a registry-wide barrier still gets in: nothing was left held
    assert (await reg.execute_detailed("u", {})).receipt.outcome == "succeeded"


@pytest.mark.anyio
async def test_a_too_long_value_at_a_pointer_is_refused():
    reg = ToolRegistry([define_tool(name="w", description="", handler=_noop, capability=KEYED)])
    d = await reg.execute_detailed("w", {"repo": "r" * 600})
    assert d.error.code == "conflict_keys_invalid" and "/repo" in d.error.message
    assert (await reg.execute_detailed("w", {"repo": "r"})).receipt.outcome == "succeeded"


def test_a_call_whose_keys_come_out_empty_falls_back_to_its_lane():
    w = define_tool(name="w", description="", handler=_noop, capability=Capability(effect="write", conflict_key_fn=lambda p: []))
    pw = define_tool(name="pw", description="", handler=_noop,
                     capability=Capability(effect="write", parallel_safe=True, conflict_key_fn=lambda p: ()))
    assert w.admission({}) == Admission("exclusive")
    assert pw.admission({}) == Admission("write")


def test_scheduler_bounds_are_checked():
    with pytest.raises(ValueError, match="max_parallel_writes"):
        Scheduler(max_parallel_writes=0)


# -- delegated (child) calls -----------------------------------------------------


def _delegating(name, capability):
    async def handler(params, ctx):
        child = params["child"]
        d = await ctx.metadata["registry"].execute_detailed(child, params.get("args", {}), with_child_execution(ctx))
        return {"error": d.error.code if d.error else None, "message": d.error.message if d.error else None,
                "parent": d.receipt.parent_receipt_id}

    return define_tool(name=name, description="", handler=handler, capability=capability)


@pytest.mark.anyio
async def test_child_calls_must_fit_inside_the_parent_reservation():
    reg = ToolRegistry([
        _delegating("keyed_parent", KEYED),
        _delegating("barrier_parent", None),
        _delegating("parallel_parent", PARALLEL_WRITE),
        _delegating("read_parent", KEYED_READ),
        define_tool(name="kw", description="", handler=_noop, capability=KEYED),
        define_tool(name="kr", description="", handler=_noop, capability=KEYED_READ),
        define_tool(name="pw", description="", handler=_noop, capability=PARALLEL_WRITE),
        define_tool(name="r", description="", handler=_noop, capability=READ),
        define_tool(name="u", description="", handler=_noop),
    ])
    ctx = ToolExecutionContext(metadata={"registry": reg})

    async def child(parent, child, args=None, repo="X"):
        d = await reg.execute_detailed(parent, {"repo": repo, "child": child, "args": args or {}}, ctx)
        assert d.error is None, d.error
        return d.result.structured

    # a keyed write: children within its keys
    assert (await child("keyed_parent", "kw", {"repo": "X"}))["error"] is None
    assert (await child("keyed_parent", "kr", {"repo": "X"}))["error"] is None
    assert (await child("keyed_parent", "pw"))["error"] is None
    assert (await child("keyed_parent", "r"))["error"] is None
    out = await child("keyed_parent", "kw", {"repo": "Y"})
    assert out["error"] == "admission_refused" and "['Y']" in out["message"] and "['X']" in out["message"]
    assert (await child("keyed_parent", "u"))["error"] == "admission_refused"
    # a registry barrier: anything
    for c, args in (("kw", {"repo": "Y"}), ("u", {}), ("pw", {}), ("kr", {"repo": "Z"})):
        assert (await child("barrier_parent", c, args))["error"] is None
    # a parallel-safe write holds no keys: keyless children only, never a barrier
    assert (await child("parallel_parent", "pw"))["error"] is None
    assert (await child("parallel_parent", "r"))["error"] is None
    assert (await child("parallel_parent", "kw", {"repo": "X"}))["error"] == "admission_refused"
    assert (await child("parallel_parent", "u"))["error"] == "admission_refused"
    # a read never becomes a write, and reads only its own keys
    assert (await child("read_parent", "kr", {"repo": "X"}))["error"] is None
    assert (await child("read_parent", "kw", {"repo": "X"}))["error"] == "admission_refused"
    assert (await child("read_parent", "pw"))["error"] == "admission_refused"
    assert (await child("read_parent", "kr", {"repo": "Y"}))["error"] == "admission_refused"


@pytest.mark.anyio
async def test_a_child_context_without_a_reservation_is_admitted_on_its_own():
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED)])
    sched = reg.executor.scheduler
    per_call = ToolExecutionContext(parent_receipt_id="rcpt_parent")  # an agent's "per_call" admission
    async with anyio.create_task_group() as tg:
        _start(tg, reg, "w", "a", "X")
        await until(lambda: "a" in g.running)
        result = {}

        async def child():
            result["d"] = await reg.execute_detailed("w", {"key": "b", "repo": "X"}, per_call)

        tg.start_soon(child)
        await until(lambda: sched.queued == 1)  # it queues behind the same key like any call
        g.open("a")
        await until(lambda: "b" in g.running)
        g.open("b")
    assert result["d"].receipt.parent_receipt_id == "rcpt_parent" and result["d"].error is None
