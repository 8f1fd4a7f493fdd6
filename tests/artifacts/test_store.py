"""ArtifactStore: put/read, hostile ids, tampering, quota, reuse, recovery, ranges, modes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.artifacts import (
    MAX_READ_BYTES,
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactQuotaExceeded,
    ArtifactRequestInvalid,
    ArtifactStore,
    ArtifactStoreUnsafe,
)
from openfunctions.core import InvalidParams

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path):
    s = await ArtifactStore(tmp_path / "store").open()
    yield s
    s.close()


def blob_path(store: ArtifactStore, sha: str) -> str:
    return os.path.join(store.root, "blobs", sha.removeprefix("sha256:"))


def tamper(path: str, at: int = 0) -> None:
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


async def read_everything(store: ArtifactStore, artifact_id: str, step: int = MAX_READ_BYTES) -> bytes:
    out, offset = bytearray(), 0
    while True:
        chunk = await store.read(artifact_id, offset, step)
        out += chunk.data
        offset += chunk.length
        if chunk.eof:
            return bytes(out)


# -- put and read ------------------------------------------------------------


async def test_put_bytes_and_read_back(store):
    data = os.urandom(40_000)
    ref = await store.put(data, media_type="application/octet-stream", scope="att_1")
    assert ref.size == len(data)
    assert ref.sha256 == "sha256:" + hashlib.sha256(data).hexdigest()
    assert ref.id.startswith("art_")
    first = await store.read(ref.id)
    assert first.length == MAX_READ_BYTES and first.data == data[:MAX_READ_BYTES] and not first.eof
    assert await read_everything(store, ref.id) == data
    assert await store.read_all(ref.id) == data
    info = await store.stat(ref.id)
    assert (info.scope, info.size, info.media_type) == ("att_1", len(data), "application/octet-stream")
    assert info.created_at.endswith("Z")


async def test_async_producer_that_refills_one_buffer_stores_what_it_yielded(store):
    expected = b"".join(bytes([i]) * 1000 for i in range(5))
    buf = bytearray(1000)

    async def refilling():
        for i in range(5):
            buf[:] = bytes([i]) * 1000  # the same buffer, new content, each yield
            yield buf

    ref = await store.put(refilling(), scope="refill")
    assert ref.sha256 == "sha256:" + hashlib.sha256(expected).hexdigest()
    assert await store.read_all(ref.id) == expected


async def test_put_accepts_iterables_async_iterables_and_files(store):
    data = os.urandom(3 * 1024 * 1024 + 17)

    async def agen():
        for i in range(0, len(data), 100_000):
            yield data[i : i + 100_000]

    refs = [
        await store.put([data[:10], bytearray(data[10:]) ], scope="a"),
        await store.put(agen(), scope="b"),
        await store.put(io.BytesIO(data), scope="c"),
        await store.put(memoryview(data), scope="d"),
    ]
    assert len({r.sha256 for r in refs}) == 1
    assert len({r.id for r in refs}) == 4  # different scopes: different artifacts
    for r in refs:
        assert await store.read_all(r.id) == data
    assert (await store.usage())["used_bytes"] == len(data)  # one blob shared by all four


@pytest.mark.parametrize(
    "data, what",
    [
        ("text", "not str"),
        (12345, "got int"),
        ([b"ok", "text"], "chunks must be bytes-like"),
        (io.StringIO("text"), "binary mode"),
    ],
)
async def test_put_rejects_wrong_data_types_naming_the_problem(store, data, what):
    with pytest.raises(ArtifactRequestInvalid) as exc:
        await store.put(data)
    assert what in exc.value.message
    assert isinstance(exc.value, InvalidParams)
    assert os.listdir(os.path.join(store.root, "tmp")) == []
    assert os.listdir(os.path.join(store.root, "blobs")) == []


@pytest.mark.parametrize("media_type", ["", "text", "text/", "/plain", "text/plain\n", "a" * 300 + "/b", None, 7])
async def test_put_rejects_bad_media_types(store, media_type):
    with pytest.raises(ArtifactRequestInvalid, match="media_type"):
        await store.put(b"x", media_type=media_type)


@pytest.mark.parametrize("scope", ["", "s" * 1025, 3, "\ud800"])
async def test_put_rejects_bad_scopes(store, scope):
    with pytest.raises(ArtifactRequestInvalid, match="scope"):
        await store.put(b"x", scope=scope)


async def test_media_type_with_parameters_is_kept(store):
    ref = await store.put(b"{}", media_type='application/json; charset="utf-8"')
    assert (await store.stat(ref.id)).media_type == 'application/json; charset="utf-8"'


async def test_empty_artifact(store):
    ref = await store.put(b"")
    chunk = await store.read(ref.id)
    assert (chunk.data, chunk.length, chunk.total_size, chunk.eof) == (b"", 0, 0, True)
    assert ref.sha256 == "sha256:" + hashlib.sha256(b"").hexdigest()


# -- hostile ids -------------------------------------------------------------

VALID_SHAPE_UNKNOWN = "art_" + "0" * 32

HOSTILE_IDS = [
    "",
    "art_",
    "art_" + "0" * 31,
    "art_" + "0" * 33,
    "art_" + "A" * 32,
    "ART_" + "0" * 32,
    "../store.json",
    "../../../../etc/passwd",
    "/etc/passwd",
    "art_" + "0" * 30 + "/.",
    "art_../../store",
    "..",
    ".",
    "index/../store",
    "art_%2e%2e%2f" + "0" * 23,
    "art_" + "%30" * 32,
    "art_" + "0" * 31 + "\x00",
    "\x00",
    "art_" + "0" * 32 + "\x00.json",
    "art_" + "0" * 32 + ".json",
    "art_" + "0" * 32 + "/",
    " art_" + "0" * 32,
    "art_" + "0" * 32 + "\n",
    "art_" + "０" * 32,  # fullwidth digits
    "art_" + "0" * 32 * 1000,
    "x" * 1_000_000,
    "lock",
    "store.json",
    "blobs",
    123,
    None,
    b"art_" + b"0" * 32,
    ["art_" + "0" * 32],
    {"id": "art_" + "0" * 32},
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=lambda v: repr(v)[:40])
async def test_hostile_ids_are_not_found_without_touching_the_filesystem(store, hostile, monkeypatch):
    touched: list[object] = []
    real_open, real_stat, real_lstat = os.open, os.stat, os.lstat

    def spy(real):
        def wrapper(path, *a, **k):
            touched.append(path)
            return real(path, *a, **k)

        return wrapper

    monkeypatch.setattr(os, "open", spy(real_open))
    monkeypatch.setattr(os, "stat", spy(real_stat))
    monkeypatch.setattr(os, "lstat", spy(real_lstat))
    for op in (store.stat(hostile), store.read(hostile), store.read_all(hostile)):
        with pytest.raises(ArtifactNotFound) as exc:
            await op
        assert exc.value.code == "artifact_not_found"
        assert len(exc.value.message) < 200  # a megabyte id is not echoed back
    assert touched == []


async def test_unknown_id_of_valid_shape_is_not_found(store):
    await store.put(b"something")
    with pytest.raises(ArtifactNotFound):
        await store.read(VALID_SHAPE_UNKNOWN)


async def test_a_symlink_in_the_index_is_not_followed(store, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    os.symlink(secret, os.path.join(store.root, "index", VALID_SHAPE_UNKNOWN + ".json"))
    with pytest.raises(ArtifactCorrupt):
        await store.stat(VALID_SHAPE_UNKNOWN)


# -- tampering ---------------------------------------------------------------


async def test_tampered_blob_raises_corrupt_and_returns_nothing(store):
    data = os.urandom(50_000)
    ref = await store.put(data)
    assert (await store.read(ref.id)).data == data[:MAX_READ_BYTES]  # verified and cached
    tamper(blob_path(store, ref.sha256), at=len(data) - 1)  # a byte the first chunk does not cover
    for offset in (0, 40_000, len(data)):
        with pytest.raises(ArtifactCorrupt) as exc:
            await store.read(ref.id, offset)
        assert exc.value.code == "artifact_corrupt"
    with pytest.raises(ArtifactCorrupt):
        await store.read_all(ref.id)
    # A fresh instance (no cache) agrees.
    other = await ArtifactStore(store.root).open()
    with pytest.raises(ArtifactCorrupt):
        await other.read(ref.id)
    other.close()


@pytest.mark.parametrize("damage", ["truncate", "extend", "delete", "symlink", "directory"])
async def test_damaged_blob_file_is_corrupt(store, tmp_path, damage):
    ref = await store.put(b"0123456789" * 100)
    path = blob_path(store, ref.sha256)
    os.chmod(path, 0o600)
    if damage == "truncate":
        os.truncate(path, 10)
    elif damage == "extend":
        with open(path, "ab") as f:
            f.write(b"!")
    else:
        os.unlink(path)
        if damage == "symlink":
            (tmp_path / "other").write_bytes(b"0123456789" * 100)
            os.symlink(tmp_path / "other", path)
        elif damage == "directory":
            os.mkdir(path)
    with pytest.raises(ArtifactCorrupt):
        await store.read(ref.id)


async def test_tampered_index_record_is_corrupt(store):
    ref = await store.put(b"abc", scope="s")
    path = os.path.join(store.root, "index", ref.id + ".json")
    doc = json.loads(open(path).read())
    doc["scope"] = "someone-else"
    os.chmod(path, 0o600)
    with open(path, "w") as f:
        f.write(json.dumps(doc))
    other = await ArtifactStore(store.root).open()  # no cached record; logs the damage, still opens
    with pytest.raises(ArtifactCorrupt, match="checksum"):
        await other.stat(ref.id)
    other.close()


async def test_putting_the_content_again_heals_a_tampered_blob(store):
    data = os.urandom(5000)
    ref = await store.put(data, scope="s")
    tamper(blob_path(store, ref.sha256))
    with pytest.raises(ArtifactCorrupt):
        await store.read(ref.id)
    again = await store.put(data, scope="s")
    assert again == ref
    assert await store.read_all(ref.id) == data
    assert (await store.usage())["used_bytes"] == len(data)


# -- quota -------------------------------------------------------------------


async def test_quota_exactly_at_the_limit_then_one_byte_over(tmp_path):
    s = await ArtifactStore(tmp_path / "q", quota_bytes=1000).open()
    a = await s.put(os.urandom(600))
    b = await s.put(os.urandom(400))  # exactly at the limit
    assert (await s.usage()) == {"used_bytes": 1000, "quota_bytes": 1000}
    with pytest.raises(ArtifactQuotaExceeded) as exc:
        await s.put(b"x")
    assert exc.value.details == {"quota_bytes": 1000, "used_bytes": 1000, "size": 1}
    assert (await s.usage())["used_bytes"] == 1000
    assert sorted(os.listdir(os.path.join(s.root, "blobs"))) == sorted([a.sha256[7:], b.sha256[7:]])
    assert os.listdir(os.path.join(s.root, "tmp")) == []
    # Content already stored costs nothing: reuse and sharing still work when full.
    assert (await s.put(await s.read_all(a.id))) == a
    shared = await s.put(await s.read_all(b.id), scope="another")
    assert shared.id != b.id and shared.sha256 == b.sha256
    s.close()


async def test_one_artifact_larger_than_the_quota_is_refused_while_streaming(tmp_path):
    s = await ArtifactStore(tmp_path / "q", quota_bytes=1000).open()
    produced = 0

    def chunks():
        nonlocal produced
        for _ in range(1000):
            produced += 1
            yield b"z" * 100

    with pytest.raises(ArtifactQuotaExceeded, match="larger than the store's whole quota"):
        await s.put(chunks())
    assert produced == 11  # stopped at the first chunk past the quota, not after 100 KB
    assert os.listdir(os.path.join(s.root, "tmp")) == []
    assert (await s.usage())["used_bytes"] == 0
    s.close()


async def test_zero_quota_still_stores_empty_artifacts(tmp_path):
    s = await ArtifactStore(tmp_path / "q", quota_bytes=0).open()
    await s.put(b"")
    with pytest.raises(ArtifactQuotaExceeded):
        await s.put(b"a")
    s.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "64"])
def test_quota_must_be_a_non_negative_int(tmp_path, bad):
    with pytest.raises(ArtifactRequestInvalid, match="quota_bytes"):
        ArtifactStore(tmp_path, quota_bytes=bad)


async def test_concurrent_puts_never_overshoot_the_quota(tmp_path):
    size, fits = 1000, 10
    root = tmp_path / "q"
    # Two instances on one root: separate lock descriptors, as two processes would have.
    stores = [await ArtifactStore(root, quota_bytes=size * fits).open() for _ in range(2)]
    outcomes: list[str] = []

    async def one(i: int) -> None:
        try:
            await stores[i % 2].put(i.to_bytes(4, "big") * (size // 4))
            outcomes.append("ok")
        except ArtifactQuotaExceeded:
            outcomes.append("quota")

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(one, i)
    assert outcomes.count("ok") == fits and outcomes.count("quota") == 30
    blobs = os.listdir(os.path.join(root, "blobs"))
    assert len(blobs) == fits
    assert sum(os.path.getsize(os.path.join(root, "blobs", b)) for b in blobs) == size * fits
    for s in stores:
        assert (await s.usage())["used_bytes"] == size * fits
        s.close()


# -- reuse and restart --------------------------------------------------------


async def test_same_content_same_scope_reuses_across_restart(tmp_path):
    root = tmp_path / "r"
    s1 = await ArtifactStore(root).open()
    ref = await s1.put(b"payload", media_type="application/json", scope="att_1")
    assert await s1.put(b"payload", media_type="application/json", scope="att_1") == ref
    s1.close()
    s2 = await ArtifactStore(root).open()
    assert await s2.put([b"pay", b"load"], media_type="application/json", scope="att_1") == ref
    other_scope = await s2.put(b"payload", media_type="application/json", scope="att_2")
    other_type = await s2.put(b"payload", media_type="text/plain", scope="att_1")
    no_scope = await s2.put(b"payload", media_type="application/json")
    assert len({ref.id, other_scope.id, other_type.id, no_scope.id}) == 4
    assert (await s2.usage())["used_bytes"] == len(b"payload")
    assert len(os.listdir(os.path.join(root, "index"))) == 4
    s2.close()


async def test_recovery_restores_a_lost_reuse_key(tmp_path):
    root = tmp_path / "r"
    s1 = await ArtifactStore(root).open()
    ref = await s1.put(b"payload", scope="a")
    s1.close()
    for name in os.listdir(root / "keys"):
        os.unlink(root / "keys" / name)
    s2 = await ArtifactStore(root).open()
    assert os.listdir(root / "keys")
    assert await s2.put(b"payload", scope="a") == ref
    s2.close()


async def test_recovery_removes_orphans_and_recomputes_usage(tmp_path):
    root = tmp_path / "r"
    s1 = await ArtifactStore(root).open()
    ref = await s1.put(b"kept")
    s1.close()
    orphan = root / "blobs" / ("f" * 64)
    orphan.write_bytes(b"half-committed blob of a crashed put")
    stale_tmp = root / "tmp" / "blob-1-dead"
    stale_tmp.write_bytes(b"partial")
    (root / "index" / ".tmp-art_x.json-1-abcd").write_bytes(b"{")
    with open(root / "lock", "r+b") as f:
        f.write(b"garbage ledger!!")
    s2 = await ArtifactStore(root).open()
    assert not orphan.exists() and not stale_tmp.exists()
    assert os.listdir(root / "index") == [ref.id + ".json"]
    assert (await s2.usage())["used_bytes"] == 4
    assert await s2.read_all(ref.id) == b"kept"
    s2.close()


async def test_a_live_writers_temp_file_survives_another_opener(tmp_path):
    from openfunctions.artifacts._writer import BlobWriter as _BlobWriter

    root = tmp_path / "r"
    s1 = await ArtifactStore(root).open()
    writer = _BlobWriter(os.path.join(s1.root, "tmp"), 1 << 20)
    writer.write(b"in flight")
    s2 = await ArtifactStore(root).open()  # recovers under the lock
    assert os.path.exists(writer.path)
    writer.discard()
    s1.close()
    s2.close()


# -- ranges ------------------------------------------------------------------


async def test_offset_and_length_edges(store):
    data = bytes(range(256)) * 100  # 25 600 bytes
    ref = await store.put(data)
    c = await store.read(ref.id, 0, 1)
    assert (c.data, c.offset, c.length, c.eof) == (data[:1], 0, 1, False)
    c = await store.read(ref.id, len(data) - 1, 10)
    assert (c.data, c.length, c.eof) == (data[-1:], 1, True)
    c = await store.read(ref.id, len(data))
    assert (c.data, c.length, c.total_size, c.eof) == (b"", 0, len(data), True)
    c = await store.read(ref.id, 5, 10**9)  # clamped to 16 KiB
    assert c.length == MAX_READ_BYTES and c.data == data[5 : 5 + MAX_READ_BYTES]
    for offset, length, what in [
        (len(data) + 1, 1, "past the end"),
        (-1, 1, "offset"),
        (0, 0, "length"),
        (0, -5, "length"),
        (True, 1, "offset"),
        (0, 1.0, "length"),
        ("0", 1, "offset"),
    ]:
        with pytest.raises(ArtifactRequestInvalid, match=what) as exc:
            await store.read(ref.id, offset, length)
        assert isinstance(exc.value, InvalidParams)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=70_000), step=st.integers(min_value=1, max_value=MAX_READ_BYTES + 1000))
async def test_chunks_reassemble_exact_bytes_and_digest(store, data, step):
    ref = await store.put(data, scope="prop")
    h, out, offset = hashlib.sha256(), bytearray(), 0
    while True:
        chunk = await store.read(ref.id, offset, step)
        assert chunk.length == len(chunk.data) <= min(step, MAX_READ_BYTES)
        assert chunk.offset == offset and chunk.total_size == len(data)
        h.update(chunk.data)
        out += chunk.data
        offset += chunk.length
        if chunk.eof:
            break
        assert chunk.length > 0
    assert bytes(out) == data
    assert "sha256:" + h.hexdigest() == chunk.sha256 == ref.sha256


# -- directory safety --------------------------------------------------------


async def test_modes_of_directories_and_files(store):
    ref = await store.put(b"m")

    def mode(*parts):
        return stat.S_IMODE(os.lstat(os.path.join(store.root, *parts)).st_mode)

    for d in ("", "blobs", "index", "keys", "tmp"):
        assert mode(d) == 0o700
    assert mode("lock") == 0o600
    assert mode("store.json") == 0o400
    assert mode("blobs", ref.sha256[7:]) == 0o400
    assert mode("index", ref.id + ".json") == 0o400
    assert all(mode("keys", k) == 0o400 for k in os.listdir(os.path.join(store.root, "keys")))


async def test_a_loose_existing_store_directory_is_refused_not_tightened(tmp_path):
    # core.files' one policy: someone else may already have planted files, so say so instead of chmod-ing.
    root = tmp_path / "loose"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with pytest.raises(ArtifactStoreUnsafe, match="0755.*chmod 700"):
        await ArtifactStore(root).open()
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o755 and os.listdir(root) == []


async def test_refuses_symlinked_root_foreign_directory_and_unknown_version(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    with pytest.raises(ArtifactStoreUnsafe, match="not a plain directory"):
        await ArtifactStore(tmp_path / "link").open()
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactStoreUnsafe, match="not an artifact store"):
        await ArtifactStore(foreign).open()
    assert os.listdir(foreign) == ["notes.txt"]
    future = tmp_path / "future"
    s = await ArtifactStore(future).open()
    s.close()
    os.chmod(future / "store.json", 0o600)
    (future / "store.json").write_text(json.dumps({"format": "openfunctions-artifact-store", "v": 99}))
    with pytest.raises(ArtifactStoreUnsafe, match="version 99"):
        await ArtifactStore(future).open()


async def test_a_closed_store_reopens_lazily(tmp_path):
    s = await ArtifactStore(tmp_path / "c").open()
    s.close()
    ref = await s.put(b"again")
    assert await s.read_all(ref.id) == b"again"
    s.close()


async def test_non_contiguous_buffer_is_refused_clearly(store):
    view = memoryview(bytearray(b"abcdef"))[::2]
    with pytest.raises(ArtifactRequestInvalid, match="contiguous"):
        await store.put(view)
    with pytest.raises(ArtifactRequestInvalid, match="contiguous"):
        await store.put([view])


async def test_large_buffer_put_is_durable_and_exact(store):
    data = os.urandom(9 * 1024 * 1024 + 5)  # > one write slice: exercises the parallel write thread
    ref = await store.put(bytearray(data))
    assert ref.sha256 == "sha256:" + hashlib.sha256(data).hexdigest()
    with open(blob_path(store, ref.sha256), "rb") as f:
        assert f.read() == data


def test_find_artifact_ids_in_text():
    from openfunctions.artifacts import ARTIFACT_ID_PATTERN, find_artifact_ids, is_artifact_id

    a, b = "art_" + "a1" * 16, "art_" + "0" * 32
    text = f'{{"artifact_id": "{a}", "x": "see {b}", "again": "{a}", "glued": "x{b}", "long": "{b}00"}}'
    assert find_artifact_ids(text) == [a, b]
    assert all(is_artifact_id(i) for i in find_artifact_ids(text))
    assert ARTIFACT_ID_PATTERN == r"art_[0-9a-f]{32}"


def test_the_file_store_implements_the_store_protocol(tmp_path):
    from openfunctions.artifacts import ArtifactStoreProtocol

    assert isinstance(ArtifactStore(tmp_path), ArtifactStoreProtocol)


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024])  # inline write and helper-thread write
async def test_disk_full_is_a_clean_store_error(store, monkeypatch, size):
    import errno

    from openfunctions.artifacts import ArtifactStoreFailed
    from openfunctions.artifacts._writer import BlobWriter as _BlobWriter

    def full(self, view, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_BlobWriter, "_write_at", full)
    with pytest.raises(ArtifactStoreFailed, match="No space left") as exc:
        await store.put(os.urandom(size))
    assert exc.value.code == "artifact_store_failed" and exc.value.details == {"errno": "ENOSPC"}
    assert os.listdir(os.path.join(store.root, "tmp")) == []
    assert (await store.usage())["used_bytes"] == 0
    monkeypatch.undo()
    assert (await store.put(b"space again")).size == 11


@pytest.mark.parametrize("sub", ["blobs", "index", "keys", "tmp"])
async def test_a_symlinked_store_subdirectory_is_refused(tmp_path, sub):
    root = tmp_path / "s"
    s = await ArtifactStore(root).open()
    s.close()
    elsewhere = tmp_path / "elsewhere"
    os.rename(root / sub, elsewhere)
    os.symlink(elsewhere, root / sub)
    with pytest.raises(ArtifactStoreUnsafe, match=f"{sub}' is unsafe: it is a symlink"):
        await ArtifactStore(root).open()


async def test_cancelled_streaming_put_leaves_nothing(store):
    first_chunk_taken = anyio.Event()
    never = anyio.Event()

    async def stalled():
        yield b"x" * 1000
        first_chunk_taken.set()
        await never.wait()
        yield b"never reached"

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.put, stalled())
        await first_chunk_taken.wait()
        assert len(os.listdir(os.path.join(store.root, "tmp"))) == 1
        tg.cancel_scope.cancel()
    assert os.listdir(os.path.join(store.root, "tmp")) == []
    assert os.listdir(os.path.join(store.root, "index")) == []
    assert (await store.usage())["used_bytes"] == 0


async def test_verify_all_reports_damaged_artifacts(store):
    good = await store.put(b"good", scope="a")
    shared = await store.put(b"bad content", scope="a")
    also_bad = await store.put(b"bad content", scope="b")  # same blob, another artifact
    tamper(blob_path(store, shared.sha256))
    report = await store.verify_all()
    assert report["checked"] == 3
    assert sorted(report["corrupt"]) == sorted([shared.id, also_bad.id])
    assert report["bytes_verified"] == len(b"good")
    assert good.id not in report["corrupt"]
    assert "ArtifactStore(root=" in repr(store)
