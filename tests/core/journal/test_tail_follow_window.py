"""``journal tail --follow`` prints a record appended right after its first scan.

The follower scans the file, prints the last records, then polls the file's identity (device, inode, where its records end)
and rescans when it changes. It used to take the identity it compares against *after* printing: a record
appended in between was already in that identity, so no poll ever saw a change and the record was never
printed (a loaded machine widens the gap; the subprocess tail test failed that way under parallel workers).
Here the append happens exactly in that gap: from inside the first print.
"""

from __future__ import annotations

import argparse
import time
import types

import anyio

from openfunctions.core.journal import JournalLog, cli


def _append(path, i: int) -> None:
    async def go() -> None:
        log = await JournalLog.open(path, kind="execution")
        await log.append("start", {"i": i})
        await log.close()

    anyio.run(go)


def _follower(monkeypatch, path, print_record, sleep) -> argparse.Namespace:
    """``journal tail -f -n 1`` on ``path`` as parsed arguments, printing through ``print_record`` and polling
    through ``sleep`` (each raises KeyboardInterrupt, the follower's way out, when its test has seen enough)."""
    monkeypatch.setattr(cli, "_print_record", print_record)
    monkeypatch.setattr(cli, "time", types.SimpleNamespace(sleep=sleep))
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    cli.add_commands(parser.add_subparsers(dest="command"))
    return parser.parse_args(["journal", "tail", "-f", "-n", "1", "--interval", "0.05", str(path)])


def test_a_record_appended_between_the_first_print_and_the_first_poll_is_printed(tmp_path, monkeypatch) -> None:
    path = tmp_path / "exec.jsonl"
    _append(path, 0)
    printed: list[int] = []

    def print_record(rec, as_json) -> None:
        printed.append(rec.seq)
        if printed == [1]:  # the first print: the follower has scanned and not yet polled
            _append(path, 1)
        if len(printed) == 2:
            raise KeyboardInterrupt  # the follower's way out (Ctrl-C)

    polls = 0

    def sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        if polls > 40:  # well past the poll that must see the append: it was missed
            raise KeyboardInterrupt
        time.sleep(0.001)

    args = _follower(monkeypatch, path, print_record, sleep)
    assert args.func(args) == 0
    assert printed == [1, 2], f"printed seqs {printed} after {polls} polls"


def test_records_appended_into_reserved_room_are_printed(tmp_path, monkeypatch) -> None:
    """The execution journal keeps room reserved past its records, so its size does not move with an append:
    the follower must notice appends by where the records end (``file_stamp``), not by the size."""
    import os
    import threading

    path = tmp_path / "exec.jsonl"
    printed: list[int] = []
    polls = 0

    def print_record(rec, as_json) -> None:
        printed.append(rec.seq)

    def sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        if len(printed) == 3 or polls > 3000:
            raise KeyboardInterrupt
        time.sleep(0.005)

    args = _follower(monkeypatch, path, print_record, sleep)
    codes: list[int] = []

    async def main() -> None:
        log = await JournalLog.open(path, kind="execution", preallocate=True)
        await log.append("start", {"i": 0})
        size = os.stat(path).st_size
        follower = threading.Thread(target=lambda: codes.append(args.func(args)))
        follower.start()
        while not printed and follower.is_alive():
            await anyio.sleep(0.01)
        await log.append("start", {"i": 1})
        await anyio.sleep(0.05)
        await log.append("start", {"i": 2})
        assert os.stat(path).st_size == size  # both went into the room: the size never moved
        await anyio.to_thread.run_sync(follower.join, 30)
        await log.close()

    anyio.run(main)
    assert codes == [0] and printed == [1, 2, 3], f"printed seqs {printed} after {polls} polls"
