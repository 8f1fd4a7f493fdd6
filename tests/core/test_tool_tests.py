"""Tool tests: cases on the definition, judged through the executor; not part of the spec digest."""

from __future__ import annotations

import pytest

from openfunctions.core import (
    MemoryJournalSink,
    ToolDefinitionError,
    ToolError,
    ToolRegistry,
    ToolTest,
    define_tool,
    run_tool_tests,
    tool,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"], "additionalProperties": False}


def _add(p, ctx):
    if p["a"] < 0:
        raise ToolError("negative numbers are refused", code="negative", refused=True)
    return {"sum": p["a"] + p["b"], "inputs": {"a": p["a"], "b": p["b"]}}


def adder(tests=()):
    return define_tool(name="add", description="Add.", input_schema=SCHEMA, handler=_add, tests=tests)


def test_tests_are_not_part_of_the_spec():
    plain, tested = adder(), adder([{"arguments": {"a": 1, "b": 2}, "expect": {"sum": 3}}])
    assert tested.spec_sha256 == plain.spec_sha256 and "tests" not in tested.spec()
    assert tested.tests == (ToolTest(arguments={"a": 1, "b": 2}, expect={"sum": 3}),)


@pytest.mark.parametrize("case, message", [
    ({"arguments": {}, "expected": 1}, "unknown keys ['expected']"),
    ({"arguments": [1]}, "arguments must be an object"),
    ({"arguments": {}, "check": "yes"}, "check must be callable"),
    ({"arguments": {}, "error": "x", "expect": 1}, "cannot also expect a result"),
    ("not a case", "a test case is a ToolTest or a mapping"),
])
def test_malformed_cases_fail_at_definition(case, message):
    with pytest.raises(ToolDefinitionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        adder([case])


def _too_big(r):
    assert r["sum"] < 10, "sum too big"


@pytest.mark.anyio
async def test_each_kind_of_case_passes_and_fails():
    cases = [
        {"name": "expect ok", "arguments": {"a": 1, "b": 2}, "expect": {"sum": 3, "inputs": {"a": 1, "b": 2}}},
        {"name": "expect wrong", "arguments": {"a": 1, "b": 2}, "expect": {"sum": 4}},
        {"name": "match ok", "arguments": {"a": 1, "b": 2}, "match": {"inputs": {"b": 2}}},
        {"name": "match wrong", "arguments": {"a": 1, "b": 2}, "match": {"inputs": {"b": 3}}},
        {"name": "match missing", "arguments": {"a": 1, "b": 2}, "match": {"product": 2}},
        {"name": "check ok", "arguments": {"a": 1, "b": 2}, "check": lambda r: r["sum"] == 3},
        {"name": "check false", "arguments": {"a": 1, "b": 2}, "check": lambda r: r["sum"] == 4},
        {"name": "check assert", "arguments": {"a": 9, "b": 2}, "check": _too_big},
        {"name": "check raises", "arguments": {"a": 1, "b": 2}, "check": lambda r: r["missing"]},
        {"name": "error ok", "arguments": {"a": -1, "b": 2}, "error": "negative"},
        {"name": "error other", "arguments": {"a": "x", "b": 2}, "error": "negative"},
        {"name": "error none", "arguments": {"a": 1, "b": 2}, "error": "negative"},
        {"name": "unexpected error", "arguments": {"a": -1, "b": 2}},
        {"name": "smoke", "arguments": {"a": 0, "b": 0}},
    ]
    sink = MemoryJournalSink()
    registry = ToolRegistry([adder(cases)], sink=sink)
    rows = await run_tool_tests(registry)
    verdicts = {r.case: (r.passed, r.message) for r in rows}
    assert {k for k, (ok, _) in verdicts.items() if ok} == {
        "expect ok", "match ok", "check ok", "error ok", "smoke"}
    assert verdicts["expect wrong"][1] == "expected {'sum': 4}, got {'sum': 3, 'inputs': {'a': 1, 'b': 2}}"
    assert verdicts["match wrong"][1] == "$.inputs.b: expected 3, got 2"
    assert verdicts["match missing"][1] == "$.product: missing"
    assert verdicts["check false"][1].startswith("check returned False")
    assert verdicts["check assert"][1].startswith("check failed: sum too big")
    assert verdicts["check raises"][1] == "check raised KeyError: 'missing'"
    assert verdicts["error other"][1].startswith("expected error 'negative', got 'invalid_params'")
    assert verdicts["error none"][1].startswith("expected error 'negative', the call succeeded")
    assert verdicts["unexpected error"][1] == "negative: negative numbers are refused"
    # every case ran through the executor: one receipt each, the ids in the rows
    assert [r.receipt_id for r in rows] == [rec.receipt_id for rec in sink.receipts]
    assert {r.case: r.outcome for r in rows}["error ok"] == "rejected"


@pytest.mark.anyio
async def test_decorator_and_name_filter():
    @tool(tests=[{"arguments": {"text": "ab"}, "expect": {"result": "ba"}}])
    def reverse(text: str) -> str:
        """Reverse a text."""
        return text[::-1]

    registry = ToolRegistry([reverse, adder([{"arguments": {"a": 1, "b": 1}, "match": {"sum": 2}}])])
    rows = await run_tool_tests(registry, names=["reverse"])
    assert [(r.tool, r.passed) for r in rows] == [("reverse", True)]
