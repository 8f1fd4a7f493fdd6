"""Several real processes on one store, and kill -9 in the middle of a put."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

from openfunctions.artifacts import ArtifactStore

pytestmark = pytest.mark.anyio

CHILD_PUTS = textwrap.dedent(
    """
    import anyio, json, sys
    from openfunctions.artifacts import ArtifactStore, ArtifactQuotaExceeded

    async def main(root, tag, count, size, quota):
        store = await ArtifactStore(root, quota_bytes=quota).open()
        print("ready", flush=True)
        sys.stdin.readline()  # the parent's "go": every child starts together
        ok = refused = 0
        for i in range(count):
            data = f"{tag}:{i}:".encode().ljust(size, b".")
            try:
                await store.put(data, scope=tag)
                ok += 1
            except ArtifactQuotaExceeded:
                refused += 1
        print(json.dumps({"ok": ok, "refused": refused}), flush=True)

    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    """
)

CHILD_STALL = textwrap.dedent(
    """
    import anyio, os, sys
    from openfunctions.artifacts import ArtifactStore
    import openfunctions.artifacts._store as store_mod

    where = sys.argv[2]

    def stall(msg):
        print(msg, flush=True)
        sys.stdin.readline()  # never answered: the parent kills us here

    if where == "commit":
        real = store_mod.write_atomic

        def write_atomic(path, data, **kw):
            if os.path.dirname(path).endswith("index"):
                stall("in-commit")  # the ledger is charged and the blob renamed, the record not yet written
            return real(path, data, **kw)

        store_mod.write_atomic = write_atomic

    def chunks():
        yield b"a" * (1 << 20)
        if where == "stream":
            stall("streaming")
        yield b"b" * (1 << 20)

    async def main():
        store = await ArtifactStore(sys.argv[1]).open()
        await store.put(chunks())

    anyio.run(main)
    """
)


def spawn(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_processes_sharing_a_store_never_overshoot_the_quota(tmp_path):
    root = tmp_path / "shared"
    size, fits, per_child, children = 4096, 15, 12, 3
    procs = [spawn(CHILD_PUTS, root, f"p{n}", per_child, size, size * fits) for n in range(children)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert sum(r["ok"] for r in results) == fits
    assert sum(r["refused"] for r in results) == children * per_child - fits
    blobs = os.listdir(root / "blobs")
    assert len(blobs) == fits and sum(os.path.getsize(root / "blobs" / b) for b in blobs) == size * fits
    assert len(os.listdir(root / "index")) == fits
    s = await ArtifactStore(root, quota_bytes=size * fits).open()
    assert (await s.usage())["used_bytes"] == size * fits
    s.close()


@pytest.mark.parametrize("where", ["stream", "commit"])
async def test_kill_9_during_a_put_leaves_a_clean_store(tmp_path, where):
    root = tmp_path / "crash"
    s = await ArtifactStore(root).open()
    kept = await s.put(b"acknowledged before the crash")
    p = spawn(CHILD_STALL, root, where)
    try:
        assert p.stdout.readline().strip() in ("streaming", "in-commit")
        if where == "commit":
            # The victim holds the commit lock and has charged the ledger for its 2 MiB blob.
            magic, version, used = struct.unpack("<4sIQ", (root / "lock").read_bytes()[:16])
            assert used == len(b"acknowledged before the crash") + (2 << 20)
            assert len(os.listdir(root / "blobs")) == 2  # the victim's blob is renamed in, unindexed
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(timeout=30) == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
        p.stdin.close()
        p.stdout.close()
    # The survivor can still commit: the kernel dropped the dead process's flock.
    after = await s.put(b"written after the crash")
    s.close()
    fresh = await ArtifactStore(root).open()  # recovery: orphans and temp files go, usage is recomputed
    assert os.listdir(root / "tmp") == []
    assert sorted(os.listdir(root / "blobs")) == sorted([kept.sha256[7:], after.sha256[7:]])
    assert (await fresh.usage())["used_bytes"] == len(b"acknowledged before the crash") + len(b"written after the crash")
    assert await fresh.read_all(kept.id) == b"acknowledged before the crash"
    fresh.close()


CHILD_OPEN = textwrap.dedent(
    """
    import anyio, os, sys
    from openfunctions.artifacts import ArtifactStore

    async def main():
        sys.stdin.readline()
        store = await ArtifactStore(sys.argv[1]).open()
        ref = await store.put(b"same bytes from every process", scope="shared")
        print(ref.id, flush=True)

    anyio.run(main)
    """
)


async def test_processes_creating_one_new_store_at_once_agree(tmp_path):
    root = tmp_path / "fresh"
    procs = [spawn(CHILD_OPEN, root) for _ in range(4)]
    try:
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        ids = [p.stdout.readline().strip() for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    assert all(p.returncode == 0 for p in procs)
    assert len(set(ids)) == 1 and ids[0].startswith("art_")  # one artifact, reused by the others
