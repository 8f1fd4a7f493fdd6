"""How long one large document holds the event loop while it is hashed and chunked, against its peer in the same run.

- peer: the work inline on the event loop (what ``Rag.ingest`` did): ``Chunker.split`` and SHA-256 of the text;
- measured: ``Rag``'s own path (``_digested`` and ``_split``: a worker thread past ``OFF_LOOP_BYTES``).

A ticker task yields to the loop in a tight loop meanwhile; the figure is the longest gap between two of its ticks
(the stall another request would have waited), median over ``--repeat`` runs. What remains off-loop is the GIL: the
chunker is Python code, so the loop still waits for its share of the interpreter (and for garbage collections).

Usage: python bench/bench_rag_loop.py [--mib 5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

from openfunctions.rag import open_rag


async def longest_stall(work: Callable[[], Awaitable[object]]) -> float:
    """Milliseconds of the longest gap between two ticks of the loop while ``work`` runs."""
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    await work()
    done = True
    await ticker
    return max(gaps) * 1e3


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=5.0, help="the document's size (default: 5, the ingest limit)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sentence = "The quick brown fox jumps over the lazy dog. Keys rotate every ninety days! "
    text = (sentence * (int(args.mib * 2**20) // len(sentence) + 1))[:int(args.mib * 2**20)]
    with tempfile.TemporaryDirectory() as d:
        rag = await open_rag(data_dir=d)
        try:
            async def inline() -> None:
                rag.chunker.split(text)
                hashlib.sha256(text.encode()).hexdigest()

            async def off_loop() -> None:
                await rag._digested([rag._check_doc("d", text, None, None)])
                await rag._split([text], len(text.encode()))

            runs: dict[str, list[float]] = {"inline (peer)": [], "Rag's path": []}
            for _ in range(args.repeat):  # interleaved, so both see the same machine
                runs["inline (peer)"].append(await longest_stall(inline))
                runs["Rag's path"].append(await longest_stall(off_loop))
        finally:
            await rag.aclose()
    print(f"longest event-loop stall while a {args.mib:g} MiB document is hashed and chunked "
          f"(median of {args.repeat}):")
    for name, values in runs.items():
        print(f"  {name:14s} {statistics.median(values):7.1f} ms   runs: {', '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    asyncio.run(main())
