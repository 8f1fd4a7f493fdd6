import json

import pydantic
import pytest

from openfunctions.core import Receipt, ToolRegistry, define_tool


async def _h(params, ctx):
    return {"n": params.get("n", 0)}


@pytest.mark.anyio
async def test_receipt_round_trips_through_validation_and_canonical_json():
    d = await ToolRegistry([define_tool(name="t", description="", handler=_h)]).execute_detailed("t", {"n": 3})
    data = d.receipt.to_dict()
    again = Receipt.model_validate(data)  # the fast-built receipt is a valid model
    assert again == d.receipt
    assert json.loads(d.receipt.canonical_json()) == data
    assert set(data) == {
        "v", "receipt_id", "tool", "spec_sha256", "params_sha256", "result_sha256", "outcome", "certainty",
        "handler_started", "started_at", "finished_at", "duration_ms", "error", "policy", "principal",
        "parent_receipt_id", "recovered",
    }
    assert data["started_at"].endswith("Z") and data["finished_at"] >= data["started_at"]


def test_receipt_rejects_unknown_outcomes_and_fields():
    base = dict(receipt_id="rcpt_x", tool="t", spec_sha256=None, params_sha256=None, outcome="succeeded",
                certainty="known", handler_started=True, started_at="a", finished_at="b", duration_ms=1.0)
    Receipt.model_validate(base)
    with pytest.raises(pydantic.ValidationError):
        Receipt.model_validate({**base, "outcome": "maybe"})
    with pytest.raises(pydantic.ValidationError):
        Receipt.model_validate({**base, "surprise": 1})




def _dump_pairs():
    from openfunctions.core._receipts import PolicyRecord, ReceiptError

    base = dict(receipt_id="rcpt_" + "a" * 32, tool="t", spec_sha256="sha256:ab", params_sha256=None,
                outcome="succeeded", certainty="known", handler_started=True, started_at="2026-12-01T00:00:00.000000Z",
                finished_at="2026-12-01T00:00:00.000100Z", duration_ms=0.1)
    yield Receipt(**base)
    yield Receipt(**{**base, "outcome": "failed", "certainty": "unknown", "result_sha256": "sha256:cd",
                     "error": ReceiptError(code="tool_failed", message="é\u2028 \"quoted\""),
                     "policy": PolicyRecord(policy="allow_all", allowed=False, reason="because"),
                     "principal": "alice", "parent_receipt_id": "rcpt_" + "b" * 32, "recovered": True})
    yield Receipt(**{**base, "policy": PolicyRecord(policy="p", allowed=True)})
    yield Receipt(**{**base, "duration_ms": float("inf")})  # pydantic's own rule for a non-finite float


@pytest.mark.anyio
async def test_to_dict_is_exactly_pydantics_json_dump_key_order_included():
    # Receipt.to_dict is hand-built (hot path); it must stay what model_dump(mode="json") gives.
    receipts = list(_dump_pairs())
    d = await ToolRegistry([define_tool(name="t", description="", handler=_h)]).execute_detailed("t", {"n": 3})
    receipts.append(d.receipt)  # the executor's fast-constructed receipt
    for r in receipts:
        mine, theirs = r.to_dict(), r.model_dump(mode="json")
        assert mine == theirs and list(mine) == list(theirs)
        assert json.dumps(mine) == json.dumps(theirs)
        assert r.to_dict() is not mine  # a fresh dict each time: callers may change theirs


@pytest.mark.anyio
async def test_canonical_json_is_computed_once_and_never_goes_stale():
    import copy
    import pickle

    from openfunctions.core import canonical_json
    from openfunctions.core._receipts import ReceiptError

    d = await ToolRegistry([define_tool(name="t", description="", handler=_h)]).execute_detailed("t", {"n": 3})
    r = d.receipt
    text = r.canonical_json()
    assert text == canonical_json(r.to_dict())
    assert r.canonical_json() is text  # memoized on the instance
    # The memo is no field: equality, dumps and pickling do not see it.
    fresh = Receipt.model_validate(r.to_dict())
    assert fresh == r and r.model_dump(mode="json") == fresh.model_dump(mode="json")
    assert pickle.loads(pickle.dumps(r)) == r
    # A copy with an update is a new receipt with its own text, never the old one.
    changed = r.model_copy(update={"outcome": "unknown", "error": ReceiptError(code="x", message="y")})
    assert json.loads(changed.canonical_json())["outcome"] == "unknown"
    assert changed.canonical_json() == canonical_json(changed.to_dict()) != text
    assert copy.copy(r).canonical_json() == text and copy.deepcopy(r).canonical_json() == text
    for other in _dump_pairs():
        if other.to_dict()["duration_ms"] != float("inf"):
            assert other.canonical_json() == canonical_json(other.to_dict())
