"""Record stream benchmark: what the core record stream adds over a bare journal append and a hand-written fold.

Pairs, each measured in the same run, interleaved, median of repeats (µs per record):

- **append** (wall time, and this process's CPU time, which leaves out the fsync waits the
  writer thread spends): ``FileRecordLog.append`` (journal append, then the stream's ``apply`` with its type check,
  shielded from cancellation) vs ``JournalLog.append`` followed by the same fold function called
  directly, as the streams did before the record stream. Both fsync each record: the fsync dominates,
  so the ratio says whether the stream's bookkeeping is visible at all.
- **replay**: ``replay(stream, path)`` of a file of N records vs ``read_records`` + the fold function.

Usage: python bench/bench_record_stream.py [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core.journal import JournalLog, read_records
from openfunctions.core.records import FileRecordLog, RecordStream, UnknownRecords, replay


def _apply(state: dict[str, int], rec: Any) -> None:
    state[rec.data["k"]] = state.get(rec.data["k"], 0) + int(rec.data["v"])


STREAM: RecordStream[dict[str, int]] = RecordStream(
    "bench", kind="bench", types={"add"}, new_state=dict, apply=_apply, unknown=UnknownRecords.REFUSE)


async def _stream_appends(path: Path, n: int, clock: Any) -> float:
    log = await FileRecordLog.open(STREAM, path)
    t = clock()
    for i in range(n):
        await log.append("add", {"k": f"k{i % 64}", "v": 1})
    dt = clock() - t
    await log.close()
    return dt / n * 1e6


async def _bare_appends(path: Path, n: int, clock: Any) -> float:
    log = await JournalLog.open(path, kind="bench")
    state: dict[str, int] = {}
    t = clock()
    for i in range(n):
        _apply(state, await log.append("add", {"k": f"k{i % 64}", "v": 1}))
    dt = clock() - t
    await log.close()
    return dt / n * 1e6


def _replays(path: Path, n: int) -> tuple[float, float]:
    t = time.perf_counter()
    a = replay(STREAM, path).state
    stream_us = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    b: dict[str, int] = {}
    for rec in read_records(path):
        _apply(b, rec)
    bare_us = (time.perf_counter() - t) / n * 1e6
    assert a == b
    return stream_us, bare_us


async def main(records: int, rounds: int) -> None:
    results: dict[str, list[tuple[float, float]]] = {"append, wall": [], "append, process CPU": [], "replay": []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for name, clock in (("append, wall", time.perf_counter), ("append, process CPU", time.process_time)):
                sp, bp = Path(d) / f"s{r}{name[-3:]}.journal", Path(d) / f"b{r}{name[-3:]}.journal"
                if r % 2:  # alternate which goes first: the disk's state drifts within a round
                    b = await _bare_appends(bp, records, clock)
                    s = await _stream_appends(sp, records, clock)
                else:
                    s = await _stream_appends(sp, records, clock)
                    b = await _bare_appends(bp, records, clock)
                results[name].append((s, b))
            results["replay"].append(_replays(sp, records))
    for name, pairs in results.items():
        s = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        ratio = statistics.median(p[0] / p[1] for p in pairs)
        print(f"{name:20s} stream {s:9.2f} µs/record   bare {b:9.2f} µs/record   stream/bare (median of pairs) {ratio:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    anyio.run(main, args.records, args.rounds)
