import json

import pydantic
import pytest

from openfunctions.core import Receipt, ToolRegistry, define_tool, new_id


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


def test_ids_are_opaque_random_hex():
    ids = {new_id("rcpt") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("rcpt_") and len(i) == 37 and all(c in "0123456789abcdef" for c in i[5:]) for i in ids)


def test_utc_now_is_rfc3339_microseconds_and_tracks_the_clock():
    import datetime as dt
    import re

    from openfunctions.core.receipts import utc_now

    before = dt.datetime.now(dt.UTC)
    stamps = [utc_now() for _ in range(2000)]
    after = dt.datetime.now(dt.UTC)
    for s in stamps:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", s), s
    parsed = [dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps]
    assert parsed == sorted(parsed)
    # Every stamp lies within the real clock's window (second boundaries: the next test).
    assert before - dt.timedelta(microseconds=1) <= parsed[0] and parsed[-1] <= after


def test_utc_now_is_exact_around_second_boundaries(monkeypatch):
    # The date text is cached per second: drive a fake clock across
    # boundaries (forwards, backwards, ±1 ns/µs) and compare with datetime.
    import datetime as dt

    from openfunctions.core import receipts

    def reference(ns: int) -> str:
        t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=ns // 1000)
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    base = 1_796_000_000 * 10**9  # 2026-11-30
    clock = [0]
    monkeypatch.setattr(receipts.time, "time_ns", lambda: clock[0])
    monkeypatch.setattr(receipts, "_second_text", (-1, ""))
    for s in (0, 1, 59, 60, 3599, 3600, 86399, 86400, 1, 0):
        for delta in (-1001, -1000, -999, -1, 0, 1, 999, 1000, 999_999_999):
            clock[0] = base + s * 10**9 + delta
            assert receipts.utc_now() == reference(clock[0]), clock[0]
