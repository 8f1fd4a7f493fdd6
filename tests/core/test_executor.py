"""Every outcome/certainty path of the executor pipeline."""

import math

import pytest

from openfunctions.core import (
    ExecutionObserver,
    MemoryJournalSink,
    ToolError,
    ToolExecutionContext,
    ToolRegistry,
    ToolResult,
    define_tool,
    digest,
)


def make(name="t", handler=None, **kw):
    async def default(params, ctx):
        return {"ok": True}

    return define_tool(name=name, description="test tool", handler=handler or default, **kw)


@pytest.mark.anyio
async def test_success_receipt_binds_params_spec_and_result():
    sink = MemoryJournalSink()
    t = make(input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    reg = ToolRegistry([t], sink=sink)
    d = await reg.execute_detailed("t", {"n": 1}, ToolExecutionContext(principal="alice"))
    r = d.receipt
    assert (r.outcome, r.certainty, r.handler_started) == ("succeeded", "known", True)
    assert r.params_sha256 == digest({"n": 1})
    assert r.spec_sha256 == t.spec_sha256
    assert r.result_sha256 == digest({"content": d.result.content, "structuredContent": {"ok": True}, "isError": False})
    assert r.principal == "alice" and r.error is None and r.receipt_id.startswith("rcpt_")
    assert d.result.structured == {"ok": True}
    assert [s.receipt_id for s in sink.starts] == [r.receipt_id]
    assert sink.receipts == [r]


@pytest.mark.anyio
async def test_receipt_ids_are_unique_and_opaque():
    reg = ToolRegistry([make()])
    ids = {(await reg.execute_detailed("t", {})).receipt.receipt_id for _ in range(50)}
    assert len(ids) == 50


@pytest.mark.anyio
@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
         "properties": {"items": {"type": "array", "prefixItems": [{"type": "integer"}]}}, "required": ["items"]},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"items": {"type": "array", "items": [{"type": "integer"}]}}, "required": ["items"]},
    ],
    ids=["2020-12", "draft-07"],
)
async def test_both_dialects_validate_and_reject_with_paths(schema):
    calls = []

    async def h(params, ctx):
        calls.append(params)
        return {}

    reg = ToolRegistry([make(handler=h, input_schema=schema)])
    ok = await reg.execute_detailed("t", {"items": [1]})
    assert ok.receipt.outcome == "succeeded"
    bad = await reg.execute_detailed("t", {"items": ["x"]})
    assert (bad.receipt.outcome, bad.receipt.certainty, bad.receipt.handler_started) == ("rejected", "known", False)
    assert bad.error.code == "invalid_params"
    assert bad.error.details["violations"][0]["path"] == "$.items[0]"
    assert "$.items[0]" in bad.result.content[0]["text"] and bad.result.is_error
    assert len(calls) == 1


@pytest.mark.anyio
async def test_violations_are_listed_and_capped():
    props = {f"p{i:02d}": {"type": "integer"} for i in range(30)}
    reg = ToolRegistry([make(input_schema={"type": "object", "properties": props})])
    d = await reg.execute_detailed("t", {k: "x" for k in props})
    assert d.error.details["violation_count"] == 30
    assert len(d.error.details["violations"]) == 20
    assert "(and 10 more)" in d.error.message


@pytest.mark.anyio
async def test_oversized_bad_argument_gives_bounded_error_text():
    reg = ToolRegistry([make(input_schema={"type": "object", "properties": {"a": {"type": "integer"}}})])
    d = await reg.execute_detailed("t", {"a": "y" * 1_000_000})
    assert d.error.code == "invalid_params" and len(d.error.message) < 1000


@pytest.mark.anyio
@pytest.mark.parametrize(
    "params,where",
    [({"a": math.nan}, "$.a"), ({"a": b"bytes"}, "$.a"), ({"a": {1, 2}}, "$.a"), ({"a": [math.inf]}, "$.a[0]")],
)
async def test_non_json_params_are_rejected_naming_the_path(params, where):
    reg = ToolRegistry([make()])
    d = await reg.execute_detailed("t", params)
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("rejected", "known", "non_json_value")
    assert where in d.error.message


@pytest.mark.anyio
async def test_cyclic_params_are_rejected():
    cyc: dict = {}
    cyc["self"] = cyc
    d = await ToolRegistry([make()]).execute_detailed("t", {"c": cyc})
    assert d.error.code == "non_json_value" and "cycle" in d.error.message


@pytest.mark.anyio
@pytest.mark.parametrize("params", [[1, 2], "text", 5])
async def test_non_object_params_are_rejected(params):
    d = await ToolRegistry([make()]).execute_detailed("t", params)
    assert d.error.code == "invalid_params" and "must be a JSON object" in d.error.message


@pytest.mark.anyio
async def test_handler_raise_is_failed_with_unknown_certainty_and_no_traceback():
    async def boom(params, ctx):
        raise RuntimeError("disk on fire")

    d = await ToolRegistry([make(handler=boom)]).execute_detailed("t", {})
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("failed", "unknown", True)
    assert d.error.code == "tool_failed"
    assert "RuntimeError: disk on fire" in d.result.content[0]["text"]
    assert "Traceback" not in d.result.content[0]["text"]


@pytest.mark.anyio
async def test_tool_error_without_effect_is_known():
    async def refuse(params, ctx):
        raise ToolError("nothing to do", code="empty_input", effect_happened=False)

    d = await ToolRegistry([make(handler=refuse)]).execute_detailed("t", {})
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("failed", "known", "empty_input")


@pytest.mark.anyio
async def test_invalid_output_after_entry_keeps_certainty_unknown():
    async def wrong(params, ctx):
        return {"count": "three"}

    t = make(handler=wrong, output_schema={"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})
    d = await ToolRegistry([t]).execute_detailed("t", {})
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("failed", "unknown", "invalid_output")
    assert "$.count" in d.error.message


@pytest.mark.anyio
async def test_missing_structured_output_is_invalid_but_error_results_pass():
    async def text_only(params, ctx):
        return "just text"

    async def error_result(params, ctx):
        return ToolResult.text("upstream said no", is_error=True)

    schema = {"type": "object"}
    reg = ToolRegistry([make("a", text_only, output_schema=schema), make("b", error_result, output_schema=schema)])
    assert (await reg.execute_detailed("a", {})).error.code == "invalid_output"
    b = await reg.execute_detailed("b", {})
    assert b.receipt.outcome == "failed" and b.result.is_error and b.error is None


@pytest.mark.anyio
async def test_non_json_result_is_failed_unknown():
    async def nan(params, ctx):
        return {"x": float("nan")}

    d = await ToolRegistry([make(handler=nan)]).execute_detailed("t", {})
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("failed", "unknown", "non_json_value")


@pytest.mark.anyio
async def test_result_normalization_shapes():
    values = {"s": "hello", "n": 42, "l": [1, 2], "d": {"k": "v"}}

    def mk(name, v):
        async def h(params, ctx):
            return v

        return make(name, h)

    reg = ToolRegistry([mk(n, v) for n, v in values.items()])
    assert (await reg.execute_detailed("s", {})).result.content == [{"type": "text", "text": "hello"}]
    assert (await reg.execute_detailed("n", {})).result.content == [{"type": "text", "text": "42"}]
    assert (await reg.execute_detailed("l", {})).result.structured is None
    d = await reg.execute_detailed("d", {})
    assert d.result.structured == {"k": "v"} and '"k": "v"' in d.result.content[0]["text"]


@pytest.mark.anyio
async def test_params_snapshot_is_private_to_the_handler():
    got = {}

    async def h(params, ctx):
        got["p"] = params
        return {}

    original = {"items": (1, 2)}
    await ToolRegistry([make(handler=h)]).execute_detailed("t", original)
    assert got["p"] == {"items": [1, 2]}
    assert got["p"] is not original


class FailingSink:
    def __init__(self, fail_start=False, fail_settled=False):
        self.fail_start, self.fail_settled = fail_start, fail_settled
        self.settled = []

    async def on_start(self, record):
        if self.fail_start:
            raise OSError("EIO on start")

    async def on_settled(self, receipt):
        self.settled.append(receipt)
        if self.fail_settled:
            raise OSError("EIO on fsync")


@pytest.mark.anyio
async def test_start_persistence_failure_never_enters_handler():
    entered = []

    async def h(params, ctx):
        entered.append(1)
        return {}

    sink = FailingSink(fail_start=True)
    assert isinstance(sink, ExecutionObserver)
    d = await ToolRegistry([make(handler=h)], sink=sink).execute_detailed("t", {})
    assert entered == []
    assert (d.receipt.outcome, d.receipt.certainty, d.receipt.handler_started) == ("rejected", "known", False)
    assert "EIO on start" in d.error.message
    assert len(sink.settled) == 1  # on_settled still ran after the journal failure


@pytest.mark.anyio
async def test_receipt_persistence_failure_makes_certainty_unknown():
    sink = FailingSink(fail_settled=True)
    d = await ToolRegistry([make()], sink=sink).execute_detailed("t", {})
    assert (d.receipt.outcome, d.receipt.certainty) == ("unknown", "unknown")
    assert d.error.code == "receipt_persistence_failed"
    assert d.result.is_error
    assert d.receipt.handler_started is True


@pytest.mark.anyio
async def test_execute_raises_the_error_and_returns_the_value():
    async def h(params, ctx):
        if params.get("fail"):
            raise ToolError("asked to fail", effect_happened=False)
        return {"v": 1}

    reg = ToolRegistry([make(handler=h)])
    assert await reg.execute("t", {}) == {"v": 1}
    with pytest.raises(ToolError, match="asked to fail"):
        await reg.execute("t", {"fail": True})


@pytest.mark.anyio
async def test_progress_reaches_the_host_reporter():
    seen = []

    async def h(params, ctx):
        for i in range(3):
            await ctx.report_progress(i + 1, 3, f"step {i + 1}")
        return {}

    async def reporter(p, total, msg):
        seen.append((p, total, msg))

    await ToolRegistry([make(handler=h)]).execute("t", {}, ToolExecutionContext(progress=reporter))
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.anyio
async def test_handler_sees_its_own_receipt_id_and_trusted_context():
    got = {}

    async def h(params, ctx):
        got["rid"], got["principal"] = ctx.receipt_id, ctx.principal
        return {}

    # Arguments named like identity fields do not become identity.
    d = await ToolRegistry([make(handler=h)]).execute_detailed("t", {"principal": "root"}, ToolExecutionContext(principal="bob"))
    assert got == {"rid": d.receipt.receipt_id, "principal": "bob"}
    assert d.receipt.principal == "bob"


@pytest.mark.anyio
async def test_lone_surrogates_in_params_and_results_are_clear_errors():
    import json as _json

    params = _json.loads('{"text": "a\\ud800b"}')  # legal JSON escape, no UTF-8 form
    d = await ToolRegistry([make()]).execute_detailed("t", params)
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("rejected", "known", "non_json_value")
    assert "$.text" in d.error.message and "surrogate" in d.error.message

    async def bad_text(params, ctx):
        return {"out": "x\udc80"}

    async def bad_str(params, ctx):
        return "\ud83d"

    reg = ToolRegistry([make("a", bad_text), make("b", bad_str)])
    a = await reg.execute_detailed("a", {})
    assert (a.receipt.outcome, a.receipt.certainty, a.error.code) == ("failed", "unknown", "non_json_value")
    b = await reg.execute_detailed("b", {})
    assert b.error.code == "non_json_value" and b.receipt.handler_started


@pytest.mark.anyio
async def test_error_messages_with_lone_surrogates_keep_the_receipt_writable():
    async def h(params, ctx):
        raise ToolError("bad input \udc80 here", effect_happened=False)

    d = await ToolRegistry([make(handler=h)]).execute_detailed("t", {})
    assert d.receipt.error.message == "bad input \\udc80 here"
    d.receipt.canonical_json().encode("utf-8")


@pytest.mark.anyio
async def test_non_string_keys_are_refused_not_silently_converted():
    d = await ToolRegistry([make()]).execute_detailed("t", {"a": [{1: "x"}]})
    assert d.error.code == "non_json_value" and "$.a[0]" in d.error.message and "non-string key" in d.error.message

    async def int_keys(params, ctx):
        return {"counts": {1: 2}}

    d = await ToolRegistry([make("k", int_keys)]).execute_detailed("k", {})
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("failed", "unknown", "non_json_value")


@pytest.mark.anyio
async def test_non_string_keys_in_a_non_object_result_are_refused():
    async def listed(params, ctx):
        return [{1: "x"}]

    d = await ToolRegistry([make("l", listed)]).execute_detailed("l", {})
    assert d.error.code == "non_json_value" and "non-string key" in d.error.message


@pytest.mark.anyio
async def test_sinks_are_added_and_removed_independently_in_order():
    from openfunctions.core import MemoryJournalSink

    calls: list[str] = []

    class Named(MemoryJournalSink):
        def __init__(self, name):
            super().__init__()
            self.name = name

        async def on_start(self, record):
            calls.append(f"{self.name}.start")

        async def on_settled(self, receipt):
            calls.append(f"{self.name}.settled")

    async def h(params, ctx):
        return {"ok": True}

    reg = ToolRegistry([define_tool(name="t", description="d", input_schema={"type": "object"}, handler=h)])
    ex = reg.executor
    durable, observer, other = Named("durable"), Named("observer"), Named("other")
    ex.add_sink(observer)
    ex.add_sink(durable, first=True)  # e.g. the server's journal, added after the controller's observer
    ex.add_sink(other)
    await reg.execute_detailed("t", {})
    assert calls == ["durable.start", "observer.start", "other.start", "durable.settled", "observer.settled", "other.settled"]
    # Removing one (the server closing) keeps the others, whoever added them first.
    assert ex.remove_sink(durable) is True and ex.remove_sink(durable) is False
    calls.clear()
    await reg.execute_detailed("t", {})
    assert calls == ["observer.start", "other.start", "observer.settled", "other.settled"]
    ex.remove_sink(observer)
    assert ex.sink is other  # one sink is called directly, no fan-out
    ex.remove_sink(other)
    assert ex.sink is None
