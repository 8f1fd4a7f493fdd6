"""The read tool, executed through a real ToolRegistry."""

from __future__ import annotations

import base64
import hashlib
import os

import pytest

from openfunctions.artifacts import MAX_READ_BYTES, ArtifactStore, create_artifact_read_tool
from openfunctions.core import ToolExecutionContext, ToolRegistry, pretty_json

pytestmark = pytest.mark.anyio

UNKNOWN = "art_" + "1" * 32


@pytest.fixture
async def store(tmp_path):
    s = await ArtifactStore(tmp_path / "store").open()
    yield s
    s.close()


async def test_tool_shape(store):
    t = create_artifact_read_tool(store)
    spec = t.spec()
    assert t.name == "of_artifact_read"
    assert spec["annotations"]["readOnlyHint"] is True
    assert spec["annotations"]["destructiveHint"] is False
    assert spec["capability"]["effect"] == "read" and spec["capability"]["parallel_safe"] is True
    assert t.schedule_class == "shared"
    assert set(spec["outputSchema"]["required"]) == {
        "artifact_id", "offset", "length", "total_size", "sha256", "eof", "data_base64", "media_type", "read_with"
    }
    assert create_artifact_read_tool(store, name="of_work_artifact_read").name == "of_work_artifact_read"


async def test_reads_every_chunk_through_the_registry(store):
    data = os.urandom(3 * MAX_READ_BYTES + 123)
    ref = await store.put(data, media_type="application/octet-stream", scope="s")
    reg = ToolRegistry([create_artifact_read_tool(store)])
    out, offset = bytearray(), 0
    while True:
        d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id, "offset": offset})
        assert d.ok, d.error
        assert d.receipt.outcome == "succeeded"
        payload = d.result.structured
        assert payload["sha256"] == ref.sha256 and payload["total_size"] == len(data)
        assert payload["offset"] == offset
        # Bounded: the full chunk's pretty text and structured form stay far inside 32 KiB.
        assert len(pretty_json(payload).encode()) < 32 * 1024
        out += base64.b64decode(payload["data_base64"])
        offset += payload["length"]
        if payload["eof"]:
            break
    assert bytes(out) == data
    assert "sha256:" + hashlib.sha256(out).hexdigest() == ref.sha256


@pytest.mark.parametrize(
    "args, path",
    [
        ({}, "$"),
        ({"artifact_id": 5}, "$.artifact_id"),
        ({"artifact_id": ""}, "$.artifact_id"),
        ({"artifact_id": "art_" + "0" * 1000}, "$.artifact_id"),
        ({"artifact_id": UNKNOWN, "offset": -1}, "$.offset"),
        ({"artifact_id": UNKNOWN, "offset": 1.5}, "$.offset"),
        ({"artifact_id": UNKNOWN, "length": 0}, "$.length"),
        ({"artifact_id": UNKNOWN, "length": MAX_READ_BYTES + 1}, "$.length"),
        ({"artifact_id": UNKNOWN, "path": "/etc/passwd"}, "$"),
    ],
)
async def test_schema_rejects_bad_arguments(store, args, path):
    reg = ToolRegistry([create_artifact_read_tool(store)])
    d = await reg.execute_detailed("of_artifact_read", args)
    assert d.error is not None and d.error.code == "invalid_params"
    assert d.receipt.outcome == "rejected" and d.receipt.handler_started is False
    assert path in [v["path"] for v in d.error.details["violations"]]


@pytest.mark.parametrize("hostile", ["../../etc/passwd", "art_%2e%2e", "art_" + "0" * 31 + "\x00", "/"])
async def test_hostile_ids_through_the_tool_read_as_unknown(store, hostile):
    reg = ToolRegistry([create_artifact_read_tool(store)])
    d = await reg.execute_detailed("of_artifact_read", {"artifact_id": hostile})
    assert d.error.code == "artifact_not_found"
    assert d.receipt.certainty == "known" and d.result.is_error


async def test_refused_id_looks_exactly_like_an_unknown_id(store):
    mine = await store.put(b"mine", scope="attempt-1")
    theirs = await store.put(b"theirs", scope="attempt-2")
    seen = []

    async def allow(info, ctx: ToolExecutionContext) -> bool:
        seen.append((info.id, ctx.metadata.get("attempt")))
        return info.scope == ctx.metadata.get("attempt")

    reg = ToolRegistry([create_artifact_read_tool(store, name="of_work_artifact_read", allow=allow)])
    ctx = ToolExecutionContext(metadata={"attempt": "attempt-1"})
    ok = await reg.execute_detailed("of_work_artifact_read", {"artifact_id": mine.id}, ctx)
    assert base64.b64decode(ok.result.structured["data_base64"]) == b"mine"

    def shape(d, artifact_id):
        text = d.result.content[0]["text"].replace(artifact_id, "<id>")
        return (d.error.code, type(d.error).__name__, text, d.result.is_error, d.result.structured,
                d.receipt.outcome, d.receipt.certainty)

    refused = await reg.execute_detailed("of_work_artifact_read", {"artifact_id": theirs.id}, ctx)
    unknown = await reg.execute_detailed("of_work_artifact_read", {"artifact_id": UNKNOWN}, ctx)
    assert shape(refused, theirs.id) == shape(unknown, UNKNOWN)
    assert refused.error.code == "artifact_not_found"
    assert (theirs.id, "attempt-1") in seen


async def test_sync_allow_and_corrupt_record_hidden_behind_allow(store):
    ref = await store.put(b"data", scope="a")
    path = os.path.join(store.root, "index", ref.id + ".json")
    os.chmod(path, 0o600)
    with open(path, "w") as f:
        f.write("{}")
    fresh = await ArtifactStore(store.root).open()
    guarded = ToolRegistry([create_artifact_read_tool(fresh, allow=lambda info, ctx: True)])
    d = await guarded.execute_detailed("of_artifact_read", {"artifact_id": ref.id})
    assert d.error.code == "artifact_not_found"
    open_reg = ToolRegistry([create_artifact_read_tool(fresh)])
    d = await open_reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id})
    assert d.error.code == "artifact_corrupt"
    fresh.close()


async def test_tampered_blob_gives_an_error_and_no_data(store):
    data = b"secret payload " * 100
    ref = await store.put(data)
    blob = os.path.join(store.root, "blobs", ref.sha256[7:])
    os.chmod(blob, 0o600)
    with open(blob, "r+b") as f:
        f.write(b"S")
    reg = ToolRegistry([create_artifact_read_tool(store)])
    d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id})
    assert d.error.code == "artifact_corrupt" and d.result.is_error
    assert d.result.structured is None
    text = "".join(c.get("text", "") for c in d.result.content)
    assert "payload" not in text and base64.b64encode(data[:16]).decode() not in text


async def test_offset_past_end_is_a_clear_error(store):
    ref = await store.put(b"12345")
    reg = ToolRegistry([create_artifact_read_tool(store)])
    d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id, "offset": 6})
    assert d.error.code == "artifact_request_invalid" and "past the end" in d.error.message
    d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id, "offset": 5})
    assert d.ok and d.result.structured["eof"] is True and d.result.structured["data_base64"] == ""


@pytest.mark.parametrize("verdict", [1, "yes", None, "raise"])
async def test_allow_fails_closed(store, verdict):
    ref = await store.put(b"data")

    def allow(info, ctx):
        if verdict == "raise":
            raise RuntimeError("scope lookup broke")
        return verdict

    reg = ToolRegistry([create_artifact_read_tool(store, allow=allow)])
    d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id})
    assert d.error.code == "artifact_not_found" and d.receipt.certainty == "known"


async def test_many_concurrent_reads_all_succeed(store):
    import anyio

    data = os.urandom(20 * MAX_READ_BYTES)
    ref = await store.put(data)
    reg = ToolRegistry([create_artifact_read_tool(store)], max_parallel=8)
    parts: dict[int, bytes] = {}

    async def one(i: int) -> None:
        d = await reg.execute_detailed("of_artifact_read", {"artifact_id": ref.id, "offset": i * MAX_READ_BYTES})
        assert d.ok, d.error
        parts[i] = base64.b64decode(d.result.structured["data_base64"])

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert b"".join(parts[i] for i in range(20)) == data


async def test_two_read_tools_say_which_store_they_read_and_replies_name_the_reader(store):
    """of_artifact_read and a layer's own read tool differ in title and description; replies say read_with."""
    default = create_artifact_read_tool(store)
    layer = create_artifact_read_tool(store, name="of_work_artifact_read", source="the work attempts' artifacts")
    assert default.title == "Read artifact" and layer.title == "Read artifact (of_work_artifact_read)"
    assert default.description != layer.description
    assert "<data-dir>/artifacts" in default.description and 'read_with: "of_artifact_read"' in default.description
    assert "the work attempts' artifacts" in layer.description and 'read_with: "of_work_artifact_read"' in layer.description
    ref = await store.put(b"hello", media_type="text/plain", scope="s")
    reg = ToolRegistry([default, layer])
    for name in ("of_artifact_read", "of_work_artifact_read"):
        d = await reg.execute_detailed(name, {"artifact_id": ref.id, "offset": None, "length": None})
        assert d.ok, d.error
        assert d.result.structured["read_with"] == name and base64.b64decode(d.result.structured["data_base64"]) == b"hello"
