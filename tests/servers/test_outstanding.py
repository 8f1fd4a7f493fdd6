"""Outstanding: the "none left" set behind running calls (server) and unanswered requests (stdio)."""

from __future__ import annotations

import anyio
import pytest

from openfunctions.servers._outstanding import Outstanding


@pytest.mark.anyio
async def test_empty_is_set_exactly_while_nothing_is_outstanding():
    out: Outstanding[str] = Outstanding()
    assert out.empty.is_set() and len(out) == 0
    out.add("a")
    out.add("b")
    assert not out.empty.is_set() and sorted(out) == ["a", "b"]
    out.discard("a")
    out.discard("never added")
    assert not out.empty.is_set() and len(out) == 1
    out.discard("b")
    assert out.empty.is_set() and not out


@pytest.mark.anyio
async def test_a_waiter_wakes_when_the_last_item_goes_and_a_new_round_starts_unset():
    out: Outstanding[int] = Outstanding()
    out.add(1)
    woke = anyio.Event()

    async def waiter() -> None:
        await out.empty.wait()
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        out.discard(1)
        with anyio.fail_after(5):
            await woke.wait()
    out.add(2)
    assert not out.empty.is_set()  # a fresh event: the set one is not reused


def test_iteration_is_a_snapshot():
    out: Outstanding[int] = Outstanding()
    for i in range(3):
        out.add(i)
    for i in out:
        out.discard(i)  # would raise "set changed size during iteration" on a live view
    assert out.empty.is_set()


def test_membership_is_a_set_lookup_not_a_copy_of_the_items():
    class NoIteration(Outstanding[str]):
        def __iter__(self):
            raise AssertionError("`in` iterated (copied) the items")

    out = NoIteration()
    out.add("a")
    assert "a" in out and "b" not in out
