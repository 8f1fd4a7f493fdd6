"""The executor's promise holds under any exception, ours or not, in every stage:
a receipt (rejected/known before the handler, failed/unknown after), the
reservation released (a later call still runs), every start record settled."""

import pytest

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool


def _ok(params, ctx):
    return {"ok": True}


def _registry():
    sink = MemoryJournalSink()
    tools = [
        # unclassified: a registry-wide barrier, so a leaked slot would block every later call
        define_tool(name="u", description="", handler=_ok,
                    output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        define_tool(name="k", description="", handler=_ok, capability={"effect": "write", "conflict_keys": ["/repo"]}),
    ]
    return ToolRegistry(tools, sink=sink), sink


def _raise(exc):
    def sync(*args, **kwargs):
        raise exc

    async def coro(*args, **kwargs):
        raise exc

    return sync, coro


BEFORE = [("_capture", RecursionError("deep")), ("_validate", RecursionError("deep")),
          ("_resolve_policy", ValueError("bad")), ("_admit", KeyError("x"))]
AFTER = [("_normalize", ValueError("Exceeds the limit (4300 digits)")), ("_check_output", LookupError("$ref"))]


async def _later_calls_still_run(reg, sink):
    for name, params in (("u", {}), ("k", {"repo": "X"})):
        d = await reg.execute_detailed(name, params)
        assert d.error is None and d.receipt.outcome == "succeeded"
    sched = reg.executor.scheduler
    assert (sched.running_exclusive, sched.running_writes, sched.running_shared, sched.queued) == (False, 0, 0, 0)
    # every start record is settled by a receipt
    assert {s.receipt_id for s in sink.starts} <= {r.receipt_id for r in sink.receipts}


@pytest.mark.parametrize("stage, exc", BEFORE, ids=[s for s, _ in BEFORE])
@pytest.mark.parametrize("tool, params", [("u", {}), ("k", {"repo": "X"})])
@pytest.mark.anyio
async def test_a_foreign_exception_before_the_handler_is_a_rejected_known_receipt(monkeypatch, stage, exc, tool, params):
    reg, sink = _registry()
    sync, coro = _raise(exc)
    monkeypatch.setattr(reg.executor, stage, coro if stage in ("_resolve_policy", "_admit") else sync)
    d = await reg.execute_detailed(tool, params)
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("rejected", "known", False)
    assert d.error.code == "execution_stage_failed"
    assert d.error.details == {"stage": stage.lstrip("_"), "exception": type(exc).__name__}
    assert d.receipt.error.code == "execution_stage_failed" and d.result.is_error
    assert sink.receipts[-1].receipt_id == d.receipt.receipt_id and sink.starts == []
    monkeypatch.undo()
    await _later_calls_still_run(reg, sink)


@pytest.mark.parametrize("stage, exc", AFTER, ids=[s for s, _ in AFTER])
@pytest.mark.parametrize("tool, params", [("u", {}), ("k", {"repo": "X"})])
@pytest.mark.anyio
async def test_a_foreign_exception_after_the_handler_is_a_failed_unknown_receipt(monkeypatch, stage, exc, tool, params):
    reg, sink = _registry()
    sync, _ = _raise(exc)
    monkeypatch.setattr(reg.executor, stage, sync)
    d = await reg.execute_detailed(tool, params)
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("failed", "unknown", True)
    assert d.error.code == "execution_stage_failed" and d.error.details["stage"] == stage.lstrip("_")
    assert d.receipt.result_sha256 is None and d.value is None
    assert [s.receipt_id for s in sink.starts] == [d.receipt.receipt_id] == [r.receipt_id for r in sink.receipts]
    monkeypatch.undo()
    await _later_calls_still_run(reg, sink)


@pytest.mark.anyio
async def test_a_result_too_large_to_print_still_settles():
    # Python refuses int -> str beyond 4300 digits (a ValueError, not one of ours).
    sink = MemoryJournalSink()
    reg = ToolRegistry([define_tool(name="big", description="", handler=lambda p, c: {"n": 10**5000})], sink=sink)
    d = await reg.execute_detailed("big", {})
    assert d.receipt.outcome == "failed" and d.receipt.certainty == "unknown"
    assert d.error is not None and d.result.is_error
    assert [r.receipt_id for r in sink.receipts] == [s.receipt_id for s in sink.starts] == [d.receipt.receipt_id]
    assert reg.executor.scheduler.running_exclusive is False
