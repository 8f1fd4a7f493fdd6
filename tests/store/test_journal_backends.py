"""Backend conformance: the execution-journal promises, on files and on PostgreSQL alike.

docs/formats/receipt.md: a receipt is durable before the result is delivered;
an effectful handler's start is durable before it runs; a start left without
its receipt is settled ``unknown`` by recovery, once, and never retried; seq,
checksums and chain verify.
"""

from __future__ import annotations

import asyncio

import pytest

from openfunctions.core import ToolRegistry, define_tool, new_id, utc_timestamp
from openfunctions.core.journal import recovered_receipt
from tests._pg import unique_name

from ._journal_backends import FileBackend, PgBackend


@pytest.fixture(params=["file", "postgresql"])
def backend(request, tmp_path):
    if request.param == "file":
        return FileBackend(tmp_path)
    return PgBackend(request.getfixturevalue("pg_dsn"), unique_name("j"))


def _tool(name="change", capability=None, seen=None, backend=None):
    async def change(params, ctx):
        if seen is not None:
            seen.append(backend.records())
        return {"n": params.get("n", 0)}

    return define_tool(name=name, description="a tool", handler=change, capability=capability)


@pytest.mark.anyio
async def test_start_is_durable_before_the_handler_and_receipt_before_delivery(backend) -> None:
    seen: list = []
    journal = await backend.open()
    try:
        registry = ToolRegistry([_tool(seen=seen, backend=backend)], sink=journal)
        out = await registry.execute_detailed("change", {"n": 1})
        rid = out.receipt.receipt_id
        assert out.receipt.outcome == "succeeded"
        assert seen == [[("start", rid)]]  # the handler saw its own start, committed
        assert backend.records() == [("start", rid), ("receipt", rid)]  # delivered: the receipt is there
    finally:
        await journal.close()
    backend.verify()


@pytest.mark.anyio
async def test_a_read_only_call_writes_only_its_receipt(backend) -> None:
    journal = await backend.open()
    try:
        registry = ToolRegistry([_tool("look", capability={"effect": "read"})], sink=journal)
        out = await registry.execute_detailed("look", {})
        assert backend.records() == [("receipt", out.receipt.receipt_id)]
    finally:
        await journal.close()


@pytest.mark.anyio
async def test_concurrent_calls_all_land_in_order_and_verify(backend) -> None:
    journal = await backend.open()
    try:
        # Writes are exclusive in the scheduler (one at a time); reviewed parallel-safe reads share a pool of 8.
        registry = ToolRegistry([_tool(), _tool("look", capability={"effect": "read", "parallel_safe": True})],
                                sink=journal)
        writes = [registry.execute_detailed("change", {"n": i}) for i in range(20)]
        reads = [registry.execute_detailed("look", {"n": i}) for i in range(60)]
        outs = await asyncio.gather(*writes, *reads)
        assert all(o.receipt.outcome == "succeeded" for o in outs)
        recs = backend.records()
        for o in outs[:20]:
            rid = o.receipt.receipt_id
            assert recs.index(("start", rid)) < recs.index(("receipt", rid))
        assert sorted(r for t, r in recs if t == "receipt") == sorted(o.receipt.receipt_id for o in outs)
        assert len(recs) == 100
        if backend.name == "postgresql":
            assert journal.commits < journal.appended  # the parallel reads' receipts shared commits
    finally:
        await journal.close()
    backend.verify()


@pytest.mark.anyio
async def test_concurrent_appends_share_commits_and_keep_call_order(backend) -> None:
    receipts = [recovered_receipt({"receipt_id": new_id("rcpt"), "tool": "t", "started_at": utc_timestamp()})
                for _ in range(50)]
    journal = await backend.open()
    try:
        await asyncio.gather(*(journal.on_settled(r) for r in receipts))
        assert backend.records() == [("receipt", r.receipt_id) for r in receipts]
        if backend.name == "postgresql":
            assert journal.commits < journal.appended  # group commit: 50 receipts in fewer statements
    finally:
        await journal.close()
    backend.verify()


@pytest.mark.anyio
async def test_recovery_settles_a_crashed_start_unknown_once_and_never_reruns(backend) -> None:
    ran: list[int] = []
    entered = asyncio.Event()

    async def slow(params, ctx):
        ran.append(1)
        entered.set()
        await asyncio.sleep(3600)

    journal = await backend.open()
    registry = ToolRegistry([define_tool(name="slow", description="never ends", handler=slow)], sink=journal)
    task = asyncio.ensure_future(registry.execute_detailed("slow", {}))
    await entered.wait()
    (start,) = backend.records()
    rid = start[1]
    await backend.crash(journal)  # the process "dies" with the handler running
    task.cancel()
    try:
        await task
    except BaseException:
        pass

    again = await backend.open()
    try:
        assert [r.receipt_id for r in again.recovered] == [rid]
        r = again.recovered[0]
        assert (r.outcome, r.certainty, r.recovered, r.error.code) == ("unknown", "unknown", True, "recovered_unknown")
        receipts = [x for x in backend.records() if x[0] == "receipt"]
        assert receipts[0] == ("receipt", rid)
    finally:
        await again.close()
    third = await backend.open()
    try:
        assert third.recovered == []  # idempotent
    finally:
        await third.close()
    assert ran == [1]  # recovery read evidence; it ran nothing
    backend.verify()
