"""Artifact store throughput: put and full chunked read of a 64 MiB artifact.

Peers measured in the same run on the same bytes:
- ``hashlib.sha256`` alone (the floor for anything that verifies content);
- ``shutil.copyfile`` of a 64 MiB file (a plain copy, no fsync);
- a plain ``write + fsync`` of the bytes to a new file (the floor for a durable write).

The store's put hashes, writes, fsyncs, renames and indexes; the target is
put >= 70% of hashlib's speed. Reads are 16 KiB chunks (the tool's bound)
through ``ArtifactStore.read``: "warm" on the instance that wrote the blob
(its verification is cached), "cold" with the per-process verification cache cleared (the first read
verifies all 64 MiB), and through the read tool via a ToolRegistry.

    .venv/bin/python bench/bench_artifacts.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median, table, write_section  # noqa: E402

import openfunctions.artifacts._store as store_module  # noqa: E402
from openfunctions.artifacts import MAX_READ_BYTES, ArtifactStore, create_artifact_read_tool  # noqa: E402
from openfunctions.core import ToolRegistry  # noqa: E402

SIZE = 64 * 1024 * 1024


def settle() -> None:
    # Start every measurement without the previous one's dirty pages being
    # written back underneath it (copyfile does not fsync).
    os.sync()


def timed(fn) -> float:
    settle()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


async def atimed(fn) -> float:
    settle()
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def read_all_chunks(store: ArtifactStore, artifact_id: str, h: hashlib._Hash | None = None) -> None:
    offset = 0
    while True:
        c = await store.read(artifact_id, offset, MAX_READ_BYTES)
        if h is not None:
            h.update(c.data)
        offset += c.length
        if c.eof:
            break
    assert offset == SIZE


async def read_via_tool(reg: ToolRegistry, artifact_id: str) -> None:
    offset = 0
    while True:
        d = await reg.execute_detailed("of_artifact_read", {"artifact_id": artifact_id, "offset": offset})
        p = d.result.structured
        base64.b64decode(p["data_base64"])
        offset += p["length"]
        if p["eof"]:
            break
    assert offset == SIZE


def write_fsync(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 runs and no read-tool row")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--no-write", action="store_true", help="print the table, do not touch docs/PERFORMANCE.md")
    args = ap.parse_args()
    runs = args.runs or (3 if args.quick else 9)
    data = os.urandom(SIZE)
    expect = "sha256:" + hashlib.sha256(data).hexdigest()
    t: dict[str, list[float]] = {k: [] for k in ("hash", "copy", "write_fsync", "put", "stream", "warm", "cold", "tool")}
    with tempfile.TemporaryDirectory(prefix="bench-artifacts-", dir=os.environ.get("BENCH_TMP")) as tmp:
        src = os.path.join(tmp, "source")
        write_fsync(src, data)
        for i in range(runs):
            dst = os.path.join(tmp, f"copy-{i}")
            t["copy"].append(timed(lambda: shutil.copyfile(src, dst)))
            os.unlink(dst)
            plain = os.path.join(tmp, f"plain-{i}")
            t["write_fsync"].append(timed(lambda: write_fsync(plain, data)))
            os.unlink(plain)
            store = await ArtifactStore(os.path.join(tmp, f"store-{i}")).open()
            ref = None
            # hash right before put: the pair sees the same machine load
            t["hash"].append(timed(lambda: hashlib.sha256(data).hexdigest()))

            async def put() -> None:
                nonlocal ref
                ref = await store.put(data, media_type="application/octet-stream", scope="bench")

            t["put"].append(await atimed(put))
            assert ref is not None and ref.sha256 == expect
            stream_store = await ArtifactStore(os.path.join(tmp, f"stream-{i}")).open()

            async def put_stream() -> None:
                chunks = (data[o : o + (1 << 20)] for o in range(0, SIZE, 1 << 20))
                assert (await stream_store.put(chunks, scope="bench")).sha256 == expect

            t["stream"].append(await atimed(put_stream))
            stream_store.close()
            shutil.rmtree(stream_store.root)
            t["warm"].append(await atimed(lambda: read_all_chunks(store, ref.id)))
            store.close()
            cold = await ArtifactStore(store.root).open()
            # The verification cache is per process: forget it, as a fresh process would start.
            store_module._VERIFIED.clear()
            t["cold"].append(await atimed(lambda: read_all_chunks(cold, ref.id)))
            if i == 0:  # once, untimed: the chunks reassemble the exact content
                h = hashlib.sha256()
                await read_all_chunks(cold, ref.id, h)
                assert "sha256:" + h.hexdigest() == expect
            if not args.quick:
                reg = ToolRegistry([create_artifact_read_tool(cold)])
                t["tool"].append(await atimed(lambda: read_via_tool(reg, ref.id)))
            cold.close()
            shutil.rmtree(store.root)

    mib = SIZE / (1024 * 1024)
    med = {k: median(v) for k, v in t.items() if v}
    base = med["hash"]

    def row(label: str, key: str, note: str = "") -> list[object]:
        s = med[key]
        return [label, f"{s * 1000:.1f}", f"{mib / s:.0f}", f"{base / s:.2f}", note]

    rows = [
        row("hashlib.sha256 (peer)", "hash"),
        row("shutil.copyfile, no fsync (peer)", "copy"),
        row("write + fsync, plain file (peer)", "write_fsync"),
        row("ArtifactStore.put(bytes)", "put", "hash ‖ (write + fsync), rename, index"),
        row("ArtifactStore.put(iterator of 1 MiB)", "stream", "hash ‖ write per chunk, then fsync"),
        row("read, 16 KiB chunks, warm", "warm", "verification cached by put"),
        row("read, 16 KiB chunks, cold", "cold", "new process: the first read verifies 64 MiB"),
    ]
    if "tool" in med:
        rows.append(row("of_artifact_read via ToolRegistry", "tool", f"{SIZE // MAX_READ_BYTES} calls, base64"))
    ratio = base / med["put"]
    # Also paired per run (hash and put measured back to back), so load drifts cancel out.
    paired = median([h / p for h, p in zip(t["hash"], t["put"], strict=False)])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    body = (
        f"64 MiB of random bytes, median of {runs} runs; speed ratio = hashlib time / row time. "
        f"1-minute load average at the end of the run: {load:.1f} (on {os.cpu_count()} cores; other "
        "sessions share the machine, and put needs two cores to overlap hashing with writing).\n\n"
        + table(["operation", "median ms", "MiB/s", "vs hashlib", "note"], rows)
        + f"\n\nput / hashlib speed: **{ratio:.2f}** by medians, {paired:.2f} as the median of per-run "
        "pairs (target >= 0.70); "
        + f"put / durable plain write: **{med['write_fsync'] / med['put']:.2f}**; "
        + f"put / copyfile: **{med['copy'] / med['put']:.2f}**.\n\n"
        + "Put hashes in one thread while a helper thread writes (handing ranges to kernel writeback), "
        "then fsyncs, renames, fsyncs the directory and writes the fsynced index record. With two free "
        "cores that costs about max(hash, durable write) plus ~2 ms; under load the two threads compete "
        "for the CPU and it drifts towards hash + write. A durable plain write of the same 64 MiB ran at "
        f"{base / med['write_fsync']:.2f} of hashlib's speed in this run: that is the ceiling for any durable "
        "put on this machine, and the 70% target is reachable only where it is above 0.70. "
        "The read-tool row is dominated by the executor's per-call work (validation, receipt digest, "
        "pretty JSON of a 22 KB base64 payload), not by the store."
    )
    print(body)
    if not args.no_write:
        cmd = "python bench/bench_artifacts.py" + (" --quick" if args.quick else "")
        write_section("artifacts", "Artifact store: put and chunked read of 64 MiB", body, cmd)


if __name__ == "__main__":
    anyio.run(main)
