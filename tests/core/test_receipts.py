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


def test_hand_assembled_canonical_json_equals_the_generic_encoder_for_every_field_shape():
    # Receipt.canonical_json is assembled by hand (hot path); it must stay byte-equal to
    # canonical_json(to_dict()) for any value a receipt can hold.
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from openfunctions.core import canonical_json
    from openfunctions.core._receipts import PolicyRecord, ReceiptError, _hand_canonical

    text = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('"\\\n\t\x00\x1f\u2028é☃\U0001f600'))
    opt = st.none() | text
    receipts = st.builds(
        Receipt,
        receipt_id=text, tool=text, spec_sha256=opt, params_sha256=opt, result_sha256=opt,
        outcome=st.sampled_from(["succeeded", "failed", "rejected", "cancelled", "unknown"]),
        certainty=st.sampled_from(["known", "unknown"]), handler_started=st.booleans(),
        started_at=text, finished_at=text,
        duration_ms=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**20), 10**20),
        error=st.none() | st.builds(ReceiptError, code=text, message=text),
        policy=st.none() | st.builds(PolicyRecord, policy=text, allowed=st.booleans(), reason=opt),
        principal=opt, parent_receipt_id=opt, recovered=st.booleans(),
    )

    @settings(max_examples=400, deadline=None)
    @given(receipts)
    def check(r: Receipt) -> None:
        assert r.canonical_json() == canonical_json(r.to_dict())
        hand = _hand_canonical(r.__dict__)  # validated: every value has its plain type, so the hand path runs
        assert hand is not None and hand == canonical_json(r.to_dict())

    check()
    for r in _dump_pairs():  # every nested shape, and a non-finite duration (the generic path decides)
        if r.to_dict()["duration_ms"] != float("inf"):
            assert _hand_canonical(r.__dict__) == canonical_json(r.to_dict())
    # Unexpected value types (a receipt built around validation) take the generic encoder.
    odd = Receipt.model_construct(**{**next(_dump_pairs()).__dict__, "tool": 5, "v": True})
    assert _hand_canonical(odd.__dict__) is None
    assert odd.canonical_json() == canonical_json(odd.to_dict())
