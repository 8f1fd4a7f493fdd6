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


