"""The cross-replica KeyLocks hook: taken after local admission for a call with keys,
released with the reservation, and a cancellation or failure while acquiring never
leaves a slot held. Two registries sharing one in-memory KeyLocks stand for two replicas."""

from collections.abc import Callable

import anyio
import pytest

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool

from ._helpers import Gate, until

KEYED = {"effect": "write", "conflict_keys": ["/repo"]}
KEYED_READ = {"effect": "read", "parallel_safe": True, "conflict_keys": ["/repo"]}


class MemoryKeyLocks:
    """What a database's advisory locks do, in memory: shared or exclusive per key, waiters wait."""

    def __init__(self):
        self.held: dict[str, int] = {}  # -1: exclusive, n > 0: n shared holders
        self.acquired: list[tuple[frozenset[str], bool]] = []
        self.released: list[frozenset[str]] = []
        self.waiting = 0
        self.fail: Exception | None = None
        self._changed = anyio.Event()

    def _free(self, keys, shared):
        return all(self.held.get(k, 0) >= 0 if shared else k not in self.held for k in keys)

    async def acquire(self, keys: frozenset[str], *, shared: bool) -> Callable[[], None]:
        if self.fail is not None:
            raise self.fail
        while not self._free(keys, shared):
            self.waiting += 1
            try:
                await self._changed.wait()
            finally:
                self.waiting -= 1
        for k in keys:
            self.held[k] = self.held.get(k, 0) + 1 if shared else -1
        self.acquired.append((keys, shared))
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            for k in keys:
                n = self.held[k] - 1 if shared else 0
                if n > 0:
                    self.held[k] = n
                else:
                    del self.held[k]
            self.released.append(keys)
            self._changed.set()
            self._changed = anyio.Event()

        return release


@pytest.mark.anyio
async def test_key_locks_are_taken_for_keyed_calls_only_and_released_with_the_reservation():
    locks = MemoryKeyLocks()
    g = Gate()
    reg = ToolRegistry([g.tool("w", **KEYED), g.tool("r", **KEYED_READ), g.tool("u")])
    reg.executor.key_locks = locks  # assignable after construction
    async with anyio.create_task_group() as tg:
        tg.start_soon(reg.execute, "w", {"key": "a", "repo": "X"})
        tg.start_soon(reg.execute, "r", {"key": "b", "repo": "Y"})
        await until(lambda: g.running == {"a", "b"})
        assert sorted(locks.acquired, key=lambda a: sorted(a[0])) == [(frozenset({"X"}), False), (frozenset({"Y"}), True)]
        assert locks.held == {"X": -1, "Y": 1} and locks.released == []
        g.open("a")
        g.open("b")
    assert locks.held == {} and sorted(map(sorted, locks.released)) == [["X"], ["Y"]]
    g.open("c")
    await reg.execute("u", {"key": "c"})  # a registry-wide barrier is per process: no key locks
    assert len(locks.acquired) == 2


@pytest.mark.anyio
async def test_two_replicas_exclude_each_other_on_a_shared_key_only():
    locks = MemoryKeyLocks()
    g = Gate()
    tool = g.tool("w", **KEYED)
    one = ToolRegistry([tool])
    two = ToolRegistry([tool])
    one.executor.key_locks = two.executor.key_locks = locks
    async with anyio.create_task_group() as tg:
        tg.start_soon(one.execute, "w", {"key": "a", "repo": "X"})
        await until(lambda: "a" in g.running)
        tg.start_soon(two.execute, "w", {"key": "b", "repo": "X"})
        await until(lambda: locks.waiting == 1)  # admitted locally, waiting for the other replica
        assert two.executor.scheduler.running_writes == 1
        tg.start_soon(two.execute, "w", {"key": "c", "repo": "Y"})
        await until(lambda: "c" in g.running)
        assert "b" not in g.running
        g.open("a")
        await until(lambda: "b" in g.running)
        g.open("b")
        g.open("c")
    assert g.max_running == 2 and g.started == ["a", "c", "b"]


@pytest.mark.anyio
async def test_cancelled_while_acquiring_settles_cancelled_known_and_frees_the_slot():
    locks = MemoryKeyLocks()
    sink = MemoryJournalSink()
    g = Gate()
    tool = g.tool("w", **KEYED)
    other = ToolRegistry([tool])
    reg = ToolRegistry([tool], sink=sink)
    other.executor.key_locks = reg.executor.key_locks = locks
    async with anyio.create_task_group() as tg:
        tg.start_soon(other.execute, "w", {"key": "a", "repo": "X"})
        await until(lambda: "a" in g.running)
        holder = {}

        async def waiting():
            with anyio.CancelScope() as scope:
                holder["scope"] = scope
                await reg.execute_detailed("w", {"key": "b", "repo": "X"})

        tg.start_soon(waiting)
        await until(lambda: locks.waiting == 1)
        holder["scope"].cancel()
        await until(lambda: reg.executor.scheduler.running_writes == 0)
        assert locks.waiting == 0
        g.open("a")
    [receipt] = sink.receipts
    assert (receipt.outcome, receipt.certainty, receipt.handler_started) == ("cancelled", "known", False)
    assert sink.starts == [] and locks.held == {}
    g.open("c")
    assert (await reg.execute_detailed("w", {"key": "c", "repo": "X"})).receipt.outcome == "succeeded"


@pytest.mark.anyio
async def test_a_failing_key_lock_is_a_rejected_known_receipt_and_frees_the_slot():
    locks = MemoryKeyLocks()
    locks.fail = ConnectionError("database went away")
    sink = MemoryJournalSink()
    reg = ToolRegistry([define_tool(name="w", description="", handler=lambda p, c: {}, capability=KEYED)],
                       sink=sink, max_parallel_writes=1)
    reg.executor.key_locks = locks
    d = await reg.execute_detailed("w", {"repo": "X"})
    assert d.error.code == "key_locks_failed" and d.error.details == {"keys": ["X"], "cause": "ConnectionError"}
    assert (d.receipt.outcome, d.receipt.certainty) == ("rejected", "known") and sink.starts == []
    assert reg.executor.scheduler.running_writes == 0
    locks.fail = None
    assert (await reg.execute_detailed("w", {"repo": "X"})).receipt.outcome == "succeeded"


@pytest.mark.anyio
async def test_a_release_that_raises_still_frees_the_local_slot():
    class Leaky(MemoryKeyLocks):
        async def acquire(self, keys, *, shared):
            await super().acquire(keys, shared=shared)

            def release():
                raise RuntimeError("boom")

            return release

    reg = ToolRegistry([define_tool(name="w", description="", handler=lambda p, c: {}, capability=KEYED)],
                       max_parallel_writes=1)
    reg.executor.key_locks = Leaky()
    assert (await reg.execute_detailed("w", {"repo": "X"})).receipt.outcome == "succeeded"
    assert reg.executor.scheduler.running_writes == 0 and not reg.executor.scheduler._held
    # the leaky lock still holds X across "replicas"; locally nothing is stuck
    reg.executor.key_locks = None
    assert (await reg.execute_detailed("w", {"repo": "X"})).receipt.outcome == "succeeded"
