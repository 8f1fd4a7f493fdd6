"""Real-process crash tests: SIGKILL a writer at random moments; lock takeover."""

from __future__ import annotations

import os
import random

import anyio
import pytest

from openfunctions.core.journal import JournalLocked, JournalLog, read_records

from ._proc import Zygote, kill9, readline, spawn


def _acks(text: str) -> dict[int, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ack":
            out[int(parts[1])] = int(parts[2])
    return out


@pytest.mark.slow
def test_sigkill_at_random_moments_never_loses_an_acknowledged_record(tmp_path):
    p = tmp_path / "j.jsonl"
    rng = random.Random(20261130)
    acked: dict[int, tuple[int, int]] = {}  # seq -> (round, n)
    repaired = 0
    rounds = 60
    # Each writer a forked process (a real one, killed with a real SIGKILL): 60 interpreter start-ups
    # would be a third of this test's time.
    with Zygote() as zygote:
        for rnd in range(rounds):
            # Half the writers keep room reserved ahead of their records, half append; each reopen below
            # reserves or not at random too (a reopen that does not reserve cuts what the last one reserved).
            pid = zygote.spawn("writer", p, rng.choice([1, 8, 32]), *(["reserve"] if rng.random() < 0.5 else []))
            ready = zygote.readline()
            assert ready.startswith("ready ")
            # The reopened journal holds every record acknowledged so far.
            assert int(ready.split()[1]) >= max(acked, default=0)
            seen = ""
            for _ in range(rng.randrange(0, 120)):
                seen += zygote.readline() + "\n"
            seen += zygote.kill9(pid)
            for seq, n in _acks(seen).items():
                assert seq not in acked, f"seq {seq} acknowledged twice"
                acked[seq] = (rnd, n)

            reserve = rng.random() < 0.5

            async def reopen(reserve: bool = reserve):
                log = await JournalLog.open(p, preallocate=reserve)
                try:
                    recs = {r.seq: r for r in log.records()}
                    return log.last_seq, recs, log.repaired_tail is not None
                finally:
                    await log.close()

            last, recs, was_torn = anyio.run(reopen)
            repaired += was_torn
            assert sorted(recs) == list(range(1, last + 1))
            for seq, (r, n) in acked.items():
                assert seq in recs, f"acknowledged seq {seq} (round {r}) lost"
                if r == rnd:
                    assert recs[seq].data["n"] == n
    print(f"{len(acked)} acknowledged records, {repaired} torn tails repaired")
    assert len(acked) > rounds  # the test did exercise acknowledged writes
    final = [r.seq for r in read_records(p)]
    assert final == list(range(1, len(final) + 1))


@pytest.mark.slow
def test_second_writer_process_is_refused_and_takes_over_after_sigkill(tmp_path):
    p = tmp_path / "j.jsonl"
    holder = spawn("holder", p)
    try:
        assert readline(holder) == "locked"

        async def try_open():
            return await JournalLog.open(p)

        with pytest.raises(JournalLocked) as ei:
            anyio.run(try_open)
        assert ei.value.details["pid"] == holder.pid
        assert str(holder.pid) in str(ei.value)
        # A second process is refused too (not only this one).
        other = spawn("holder", p)
        _, err = other.communicate(timeout=60)
        assert other.returncode != 0 and "JournalLocked" in err and str(holder.pid) in err
    finally:
        kill9(holder)

    async def take_over():
        log = await JournalLog.open(p)
        rec = await log.append("t", {"after": "takeover"})
        await log.close()
        return rec.seq

    assert anyio.run(take_over) == 1
    assert os.path.exists(f"{p}.lock")  # stale lock file, no cleanup needed


@pytest.mark.slow
def test_sigkill_while_receipts_are_queued_but_not_durable_keeps_every_promise(tmp_path):
    # The file journal declares ordered receipts, so a write's reservation is
    # released once its receipt is *queued*: the next write may be admitted
    # while that receipt is not durable yet. Killed at random moments, with
    # fsyncs slowed so that window is wide, recovery must still show:
    # - every reply sent has its (succeeded, not recovered) receipt;
    # - every effect (a handler that ran) has a durable start;
    # - every start has exactly one receipt after recovery.
    from openfunctions.core.journal import ExecutionJournal

    p = tmp_path / "exec.journal"
    rng = random.Random(20261201)
    replies: set[str] = set()
    effects: set[str] = set()
    with Zygote() as zygote:
        for _ in range(12):
            pid = zygote.spawn("effects", p, rng.choice([2, 8, 16]))
            assert zygote.readline() == "ready True"
            seen = ""
            for _ in range(rng.randrange(5, 80)):
                seen += zygote.readline() + "\n"
            seen += zygote.kill9(pid)
            for line in seen.splitlines():
                kind, _, rid = line.partition(" ")
                if kind == "reply":
                    replies.add(rid)
                elif kind == "effect":
                    effects.add(rid)

            async def reopen():
                j = await ExecutionJournal.open(p)  # recovery settles what was in flight
                try:
                    return [(r.type, r.data) for r in j.log.records()]
                finally:
                    await j.close()

            records = anyio.run(reopen)
            starts = [d["receipt_id"] for t, d in records if t == "start"]
            receipts: dict[str, list[dict]] = {}
            for t, d in records:
                if t == "receipt":
                    receipts.setdefault(d["receipt_id"], []).append(d)
            assert len(starts) == len(set(starts))
            for rid in starts:
                assert len(receipts.get(rid, [])) == 1, f"start {rid} has {len(receipts.get(rid, []))} receipts"
            for rid in effects:
                assert rid in starts, f"effect {rid} ran without a durable start"
            for rid in replies:
                (got,) = receipts[rid]
                assert got["outcome"] == "succeeded" and got["recovered"] is False, got
    assert len(replies) > 50 and len(effects) > len(replies) // 2  # the test did exercise the path
