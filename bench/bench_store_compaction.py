"""Local store: puts/s of concurrent writers while a compaction runs, against the same writers without one.

Each round, in the same process and interleaved: a store of ``--keys`` live entries (about 200 bytes
each) and ``--writers`` tasks putting one after another. Measured window: from the start of
``LocalStore.compact()`` to its return; the peer window is as long, without a compaction. Reported:
medians over ``--rounds`` of puts/s in each window, their ratio, and the compaction's duration.

Usage: python bench/bench_store_compaction.py [--keys N] [--writers N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from openfunctions.store import open_local_store


async def _round(root: str, keys: int, writers: int, compact: bool) -> tuple[float, float]:
    s = await open_local_store("bench", root, compact_min_records=10**9)
    try:
        async with s.transaction() as tx:
            for i in range(keys):
                await tx.put(f"k{i:07d}", {"i": i, "pad": "x" * 180})
        done = 0
        stop = asyncio.Event()

        async def writer(w: int) -> None:
            nonlocal done
            i = 0
            while not stop.is_set():
                await s.put(f"w{w}-{i % 50}", i)
                done += 1
                i += 1

        tasks = [asyncio.ensure_future(writer(w)) for w in range(writers)]
        await asyncio.sleep(0.05)  # writers running
        before, t0 = done, time.perf_counter()
        if compact:
            await s.compact()
        else:
            await asyncio.sleep(_round.window)  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - t0
        puts = done - before
        stop.set()
        await asyncio.gather(*tasks)
        if compact:
            _round.window = elapsed  # type: ignore[attr-defined]
        return puts / elapsed, elapsed
    finally:
        await s.aclose()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    during, without, durations = [], [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            rate, took = await _round(a, args.keys, args.writers, True)
            during.append(rate)
            durations.append(took)
            without.append((await _round(b, args.keys, args.writers, False))[0])
    d, w = statistics.median(during), statistics.median(without)
    print(f"keys={args.keys} writers={args.writers} rounds={args.rounds}")
    print(f"puts/s during compaction (median): {d:,.0f}")
    print(f"puts/s without compaction (median): {w:,.0f}")
    print(f"ratio during/without: {d / w:.2f}; compaction took {statistics.median(durations) * 1000:.0f} ms (median)")


if __name__ == "__main__":
    asyncio.run(main())
