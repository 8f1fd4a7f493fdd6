"""One artifact-store test face, two backends: the file store (openfunctions.artifacts) and PostgreSQL (store).

The same rules must hold on both: immutable artifacts behind opaque ids,
verified 16 KiB reads, reuse per (content, scope, media type), a quota that
concurrent writers -- two openers standing for two replicas -- cannot
overshoot, identical not-found errors, and changed bytes never served.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from openfunctions.artifacts import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactQuotaExceeded,
    ArtifactRequestInvalid,
    ArtifactStore,
)

from ._journal_backends import migrated

pytestmark = pytest.mark.anyio
QUOTA = 100_000


class FileArtifacts:
    name = "file"

    def __init__(self, root: Path) -> None:
        self.root = root

    async def open(self, quota: int = QUOTA) -> Any:
        return await ArtifactStore(self.root, quota_bytes=quota).open()

    async def close(self, store: Any) -> None:
        store.close()

    def tamper(self, sha256: str) -> None:
        blob = self.root / "blobs" / sha256[7:]
        blob.chmod(0o600)
        data = bytearray(blob.read_bytes())
        data[0] ^= 1
        blob.write_bytes(bytes(data))


class PgArtifacts:
    name = "postgresql"

    def __init__(self, dsn: str, store_name: str) -> None:
        self.dsn, self.store_name = dsn, store_name

    async def open(self, quota: int = QUOTA) -> Any:
        from openfunctions.store import open_pg_artifact_store

        await migrated(self.dsn)
        return await open_pg_artifact_store(self.dsn, self.store_name, quota_bytes=quota)

    async def close(self, store: Any) -> None:
        await store.aclose()

    def tamper(self, sha256: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE of_artifact_blobs SET content = overlay(content PLACING '\\x00'::bytea FROM 1) "
                         "WHERE store = %s AND sha256 = %s", (self.store_name, sha256[7:]))


@pytest.fixture(params=["file", "postgresql"])
def backend(request, tmp_path) -> Any:
    if request.param == "file":
        return FileArtifacts(tmp_path / "artifacts")
    from tests._pg import unique_name

    return PgArtifacts(request.getfixturevalue("pg_dsn"), unique_name("art"))


@pytest.fixture
async def store(backend) -> AsyncIterator[Any]:
    s = await backend.open()
    try:
        yield s
    finally:
        await backend.close(s)


async def _read_all(store: Any, artifact_id: str) -> bytes:
    out, offset = b"", 0
    while True:
        chunk = await store.read(artifact_id, offset)
        assert chunk.length <= 16 * 1024 and chunk.offset == offset
        out += chunk.data
        offset += chunk.length
        if chunk.eof:
            return out


async def test_put_stat_and_verified_bounded_reads(store) -> None:
    data = bytes(range(256)) * 200  # 51,200 bytes: four reads
    ref = await store.put(data, media_type="application/octet-stream", scope="task:t1")
    assert ref.sha256 == "sha256:" + hashlib.sha256(data).hexdigest() and ref.size == len(data)
    info = await store.stat(ref.id)
    assert (info.id, info.scope, info.media_type, info.size) == (ref.id, "task:t1", "application/octet-stream", len(data))
    assert await _read_all(store, ref.id) == data
    last = await store.read(ref.id, len(data))
    assert last.data == b"" and last.eof and last.total_size == len(data)
    assert (await store.read(ref.id, 10, 5)).data == data[10:15]


async def test_the_same_content_scope_and_type_is_one_artifact_and_costs_once(store) -> None:
    a = await store.put(b"hello" * 100, scope="s1")
    assert (await store.put(b"hello" * 100, scope="s1")).id == a.id
    b = await store.put(b"hello" * 100, scope="s2")
    c = await store.put(b"hello" * 100, scope="s1", media_type="text/plain")
    assert len({a.id, b.id, c.id}) == 3
    assert (await store.usage()) == {"used_bytes": 500, "quota_bytes": QUOTA}


async def test_streams_are_stored_like_bytes(store) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(5):
            yield bytes([i]) * 1000

    ref = await store.put(chunks(), scope="stream")
    assert await _read_all(store, ref.id) == b"".join(bytes([i]) * 1000 for i in range(5))
    assert (await store.put([b"ab", b"cd"])).size == 4


async def test_the_quota_refuses_and_stores_nothing(store) -> None:
    await store.put(b"a" * 60_000)
    with pytest.raises(ArtifactQuotaExceeded) as err:
        await store.put(b"b" * 50_000)
    assert err.value.code == "artifact_quota_exceeded"
    assert (await store.usage())["used_bytes"] == 60_000


async def test_two_openers_writing_at_once_never_pass_the_quota(backend) -> None:
    """Two openers stand for two replicas (two pools / two processes' locks): 10 distinct 15 kB puts, 6 fit."""
    one, two = await backend.open(), await backend.open()
    try:
        puts = [(one if i % 2 else two).put(bytes([i]) * 15_000, scope=f"p{i}") for i in range(10)]
        results = await asyncio.gather(*puts, return_exceptions=True)
        ok = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, ArtifactQuotaExceeded)]
        assert len(ok) == 6 and len(refused) == 4, results
        assert (await one.usage())["used_bytes"] == (await two.usage())["used_bytes"] == 90_000
        for r in ok:  # each opener reads what the other wrote
            assert await _read_all(one, r.id) == await _read_all(two, r.id)
    finally:
        await backend.close(one)
        await backend.close(two)


async def test_unknown_and_malformed_ids_get_the_same_not_found(store) -> None:
    for bad in ("art_" + "0" * 32, "art_../../etc/passwd", "", None, 7):
        with pytest.raises(ArtifactNotFound) as err:
            await store.stat(bad)
        assert err.value.code == "artifact_not_found" and "no artifact with id" in err.value.message
        with pytest.raises(ArtifactNotFound):
            await store.read(bad)


async def test_bad_arguments_name_what_was_wrong(store) -> None:
    ref = await store.put(b"abc")
    with pytest.raises(ArtifactRequestInvalid, match="media_type"):
        await store.put(b"x", media_type="nonsense")
    with pytest.raises(ArtifactRequestInvalid, match="scope"):
        await store.put(b"x", scope="")
    with pytest.raises(ArtifactRequestInvalid, match="not str"):
        await store.put("text")
    with pytest.raises(ArtifactRequestInvalid, match="past the end"):
        await store.read(ref.id, 4)


async def test_changed_bytes_are_never_served_and_a_fresh_put_heals_them(backend, store) -> None:
    data = b"important" * 1000
    ref = await store.put(data, scope="t")
    assert (await store.read(ref.id)).data == data[:16 * 1024]  # verified once (and remembered)
    backend.tamper(ref.sha256)
    with pytest.raises(ArtifactCorrupt):
        await store.read(ref.id)
    with pytest.raises(ArtifactCorrupt):
        await store.read(ref.id, 100, 10)
    assert (await store.put(data, scope="t")).id == ref.id  # the same content again repairs the blob
    assert await _read_all(store, ref.id) == data


async def test_postgresql_a_cut_connection_is_a_named_failure_and_the_next_call_works(pg_dsn) -> None:
    """Every database step of the PostgreSQL store fails the same way (ArtifactStoreFailed naming what it was
    doing, the password never shown), and the pool drops its dead connections so the next call succeeds."""
    import psycopg

    from openfunctions.artifacts import ArtifactStoreFailed
    from tests._pg import unique_name

    backend = PgArtifacts(await migrated(pg_dsn), unique_name("art"))
    store = await backend.open()
    try:
        ref = await store.put(b"kept")

        def cut() -> None:
            pids = [c.info.backend_pid for c in store.pool._pool]  # the pool's idle connections
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for pid in pids:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

        for step, what in ((lambda: store.put(b"new"), "storing an artifact (it may or may not have been stored)"),
                           (lambda: store.stat(ref.id), f"reading artifact {ref.id}"),
                           (lambda: store.usage(), "reading the artifact quota")):
            await asyncio.to_thread(cut)
            with pytest.raises(ArtifactStoreFailed) as err:
                await step()
            assert str(err.value).startswith(f"{what}: PostgreSQL at ") and "failed (" in str(err.value), err.value
            assert (await store.read(ref.id)).data == b"kept"  # the dead connections are gone: this one works
        assert (await store.usage())["used_bytes"] == len(b"kept")  # the failed put kept nothing
    finally:
        await backend.close(store)
