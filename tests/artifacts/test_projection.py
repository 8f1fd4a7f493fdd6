"""project_reply: the budget edges, reuse, quota exhaustion, and the bounded-result guarantee."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.artifacts import (
    ArtifactStore,
    create_artifact_read_tool,
    default_summary,
    project_reply,
    reply_sizes,
)
from openfunctions.core import ToolRegistry, canonical_bytes, pretty_json

pytestmark = pytest.mark.anyio

BUDGET = 32 * 1024


@pytest.fixture
async def store(tmp_path):
    s = await ArtifactStore(tmp_path / "store").open()
    yield s
    s.close()


def summarize(payload):
    return {
        "attempt_id": payload["attempt_id"],
        "state": payload["state"],
        "ok": payload["ok"],
        "certainty": payload["certainty"],
        "evidence": [{"kind": e["kind"], "bytes": len(e["body"])} for e in payload["evidence"]],
    }


def payload_with_pretty_size(target: int, char: str = "x") -> dict:
    """A reply whose pretty text is exactly ``target`` bytes (the larger of the two forms)."""
    base = {"attempt_id": "att_1", "state": "completed", "ok": True, "certainty": "known",
            "evidence": [{"kind": "log", "body": ""}]}
    overhead = len(pretty_json(base).encode())
    count, pad = divmod(target - overhead, len(char.encode()))
    base["evidence"][0]["body"] = char * count + "x" * pad
    canonical, pretty = reply_sizes(base)
    assert pretty == target and canonical < pretty
    return base


def assert_within(reply, budget=BUDGET):
    canonical, pretty = reply_sizes(reply)
    assert canonical <= budget and pretty <= budget


@pytest.mark.parametrize("char", ["x", "é", "€"])
@pytest.mark.parametrize("delta", [-3, -1, 0])
async def test_at_or_under_the_budget_the_payload_is_returned_unchanged(store, delta, char):
    payload = payload_with_pretty_size(BUDGET + delta, char)
    reply = await project_reply(payload, store=store, scope="att_1", summarize=summarize)
    assert reply is payload
    assert (await store.usage())["used_bytes"] == 0


@pytest.mark.parametrize("over", [1, 2, 3])
async def test_one_byte_over_the_budget_projects(store, over):
    for char in ("x", "é", "€"):
        payload = payload_with_pretty_size(BUDGET + over, char)
        reply = await project_reply(payload, store=store, scope="att_1", summarize=summarize)
        assert reply is not payload
        proj = reply["artifactProjection"]
        full = canonical_bytes(payload)
        assert proj == {
            "available": True,
            "artifact_id": proj["artifact_id"],
            "sha256": "sha256:" + hashlib.sha256(full).hexdigest(),
            "size": len(full),
            "media_type": "application/json",
        }
        assert reply["ok"] is True and reply["state"] == "completed" and reply["certainty"] == "known"
        assert reply["evidence"] == [{"kind": "log", "bytes": len(payload["evidence"][0]["body"])}]
        assert "summaryTruncated" not in reply
        assert_within(reply)
        assert await store.read_all(proj["artifact_id"]) == full


async def test_exact_budget_edges_for_the_pretty_form(store):
    """budget - 1, exactly, + 1 bytes of the pretty text (the form MCP hosts show)."""
    results = {}
    for delta in (-1, 0, 1):
        payload = payload_with_pretty_size(BUDGET + delta)
        reply = await project_reply(payload, store=store, scope="s", summarize=summarize)
        results[delta] = "artifactProjection" in reply
    assert results == {-1: False, 0: False, 1: True}


def test_pretty_text_is_never_smaller_than_canonical_json():
    # So the pretty form decides the edge; the canonical check is a safety net.
    for payload in ({"a": [1, {"b": "é"}]}, {}, {"x": ""}, {"k": list(range(10))}):
        canonical, pretty = reply_sizes(payload)
        assert pretty >= canonical


async def test_pretty_text_alone_can_trigger_projection(store):
    payload = {"ok": True, "items": list(range(6000))}
    canonical, pretty = reply_sizes(payload)
    assert canonical <= BUDGET < pretty  # indentation alone pushes it over
    reply = await project_reply(payload, store=store, scope="s")
    assert reply["artifactProjection"]["available"] is True
    assert reply["ok"] is True and "items" not in reply  # default summary: top-level scalars
    assert_within(reply)


async def test_unchanged_content_reuses_its_artifact_also_after_restart(tmp_path):
    payload = payload_with_pretty_size(BUDGET + 500)
    s1 = await ArtifactStore(tmp_path / "st").open()
    first = await project_reply(payload, store=s1, scope="att_1", summarize=summarize)
    again = await project_reply(json.loads(json.dumps(payload)), store=s1, scope="att_1", summarize=summarize)
    assert again == first
    s1.close()
    s2 = await ArtifactStore(tmp_path / "st").open()
    after = await project_reply(payload, store=s2, scope="att_1", summarize=summarize)
    assert after["artifactProjection"]["artifact_id"] == first["artifactProjection"]["artifact_id"]
    changed = dict(payload, state="verifying")
    other = await project_reply(changed, store=s2, scope="att_1", summarize=summarize)
    assert other["artifactProjection"]["artifact_id"] != first["artifactProjection"]["artifact_id"]
    s2.close()


async def test_quota_exhaustion_is_explicit_and_keeps_the_truth(tmp_path):
    s = await ArtifactStore(tmp_path / "tiny", quota_bytes=10_000).open()
    payload = payload_with_pretty_size(BUDGET + 1000)
    payload["ok"] = False
    payload["certainty"] = "unknown"
    reply = await project_reply(payload, store=s, scope="att_1", summarize=summarize)
    proj = reply["artifactProjection"]
    assert proj["available"] is False and "quota" in proj["reason"]
    assert set(proj) == {"available", "reason"}
    assert reply["ok"] is False and reply["certainty"] == "unknown" and reply["attempt_id"] == "att_1"
    assert_within(reply)
    assert (await s.usage())["used_bytes"] == 0
    s.close()


async def test_an_oversized_summary_is_truncated_and_says_so(store):
    payload = {"attempt_id": "att_9", "ok": True, "certainty": "known",
               "log": [f"line {i} " + "z" * 300 for i in range(2000)], "note": "n" * 100_000}
    reply = await project_reply(payload, store=store, scope="s", summarize=lambda p: dict(p))
    assert reply["summaryTruncated"] is True
    assert reply["artifactProjection"]["available"] is True
    assert (reply["attempt_id"], reply["ok"], reply["certainty"]) == ("att_9", True, "known")
    assert len(reply["log"]) < 2000 and reply["note"].startswith("nnn") and "more characters" in reply["note"]
    assert_within(reply)


async def test_a_summary_of_many_scalars_keeps_the_named_keys(store):
    payload = {f"k{i:05d}": i for i in range(20_000)}
    payload.update({"ok": True, "certainty": "known", "evidence": ["e" * 50_000]})
    reply = await project_reply(payload, store=store, scope="s", budget=4096,
                                summarize=lambda p: dict(p), keep=("ok", "certainty", "evidence"))
    assert reply["summaryTruncated"] is True
    assert reply["ok"] is True and reply["certainty"] == "known"
    assert reply["evidence"] and len(reply["evidence"][0]) < 100  # kept, but shortened
    assert_within(reply, 4096)


async def test_read_tool_named_and_artifact_readable_through_it(store):
    payload = payload_with_pretty_size(BUDGET * 3)
    reply = await project_reply(payload, store=store, scope="s", summarize=summarize, read_tool="of_artifact_read")
    proj = reply["artifactProjection"]
    assert proj["read_with"] == "of_artifact_read"
    reg = ToolRegistry([create_artifact_read_tool(store)])
    out, offset = bytearray(), 0
    while True:
        d = await reg.execute_detailed("of_artifact_read", {"artifact_id": proj["artifact_id"], "offset": offset})
        out += base64.b64decode(d.result.structured["data_base64"])
        offset += d.result.structured["length"]
        if d.result.structured["eof"]:
            break
    assert json.loads(out) == payload


@pytest.mark.parametrize("budget", [0, 1023, -5, 1.5, True])
async def test_budget_must_be_sane(store, budget):
    with pytest.raises(ValueError, match="budget"):
        await project_reply({"a": 1}, store=store, scope=None, budget=budget)


def test_default_summary_keeps_top_level_scalars():
    assert default_summary({"ok": True, "n": 3, "id": "x", "big": "b" * 300, "list": [1], "d": {}}) == {
        "ok": True, "n": 3, "id": "x"
    }
    assert default_summary([1, 2, 3]) == {}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=30)
    # Long strings built cheaply (generating long random text is slow), ASCII and multi-byte.
    | st.tuples(st.sampled_from(["x", "é", "€", "\n"]), st.integers(0, 6000)).map(lambda t: t[0] * t[1]),
    lambda children: st.lists(children, max_size=20) | st.dictionaries(st.text(max_size=12), children, max_size=20),
    max_leaves=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    summary=st.dictionaries(st.text(max_size=20), json_values, max_size=25),
    budget=st.integers(1024, 6000),
    keep=st.lists(st.text(max_size=20), max_size=3),
    available=st.booleans(),
)
def test_property_bounding_always_fits_and_keeps_what_fits(summary, budget, keep, available):
    from openfunctions.artifacts._projection import _bounded

    projection = (
        {"available": True, "artifact_id": "art_" + "0" * 32, "sha256": "sha256:" + "0" * 64, "size": 1,
         "media_type": "application/json"}
        if available else {"available": False, "reason": "artifact quota exhausted: " + "r" * 300}
    )
    reply = _bounded(summary, projection, budget, frozenset(keep))
    assert_within(reply, budget)
    assert reply["artifactProjection"] == projection
    if "summaryTruncated" not in reply:
        assert {k: v for k, v in reply.items() if k != "artifactProjection"} == {
            k: v for k, v in summary.items() if k not in ("artifactProjection", "summaryTruncated")
        }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(payload=st.dictionaries(st.text(max_size=20), json_values, max_size=25), budget=st.integers(1024, 6000))
async def test_property_projected_reply_always_fits(store, payload, budget):
    reply = await project_reply(payload, store=store, scope="prop", budget=budget, summarize=lambda p: dict(p))
    assert_within(reply, budget)
    if "artifactProjection" not in reply:
        assert reply is payload
    else:
        proj = reply["artifactProjection"]
        assert proj["available"] is True
        assert json.loads(await store.read_all(proj["artifact_id"])) == payload
