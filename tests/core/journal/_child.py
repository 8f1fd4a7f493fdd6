"""A real process for crash tests: ``python _child.py MODE PATH [ARGS]``.

- ``writer PATH CONC``: CONC concurrent appenders forever; prints ``ack SEQ N``
  after each append returns (i.e. after its fsync).
- ``holder PATH``: opens the journal, prints ``locked``, waits to be killed.
- ``exec PATH``: executor + ExecutionJournal; a handler prints
  ``started RECEIPT_ID`` and never returns, so the test kills it mid-call.
"""

from __future__ import annotations

import itertools
import os
import sys

import anyio


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


async def writer(path: str, conc: int) -> None:
    from openfunctions.core.journal import JournalLog

    log = await JournalLog.open(path, kind="log")
    say("ready", log.last_seq)
    counter = itertools.count()

    async def loop() -> None:
        while True:
            n = next(counter)
            rec = await log.append("tick", {"n": n, "pid": os.getpid(), "pad": "x" * (n % 97)})
            say("ack", rec.seq, n)

    async with anyio.create_task_group() as tg:
        for _ in range(conc):
            tg.start_soon(loop)


async def holder(path: str) -> None:
    from openfunctions.core.journal import JournalLog

    log = await JournalLog.open(path)
    say("locked")
    await anyio.sleep_forever()
    await log.close()


async def execute(path: str) -> None:
    from openfunctions.core import ToolRegistry, define_tool
    from openfunctions.core.journal import ExecutionJournal

    async def effect(params, ctx):
        say("started", ctx.receipt_id)
        await anyio.sleep_forever()

    t = define_tool(
        name="charge_card",
        description="an external effect that never finishes",
        input_schema={"type": "object", "properties": {"amount": {"type": "integer"}}},
        handler=effect,
        capability={"effect": "external"},
    )
    journal = await ExecutionJournal.open(path)
    reg = ToolRegistry([t], sink=journal)
    await reg.execute_detailed("charge_card", {"amount": 5})


if __name__ == "__main__":
    mode, path, *rest = sys.argv[1:]
    if mode == "writer":
        anyio.run(writer, path, int(rest[0]))
    elif mode == "holder":
        anyio.run(holder, path)
    elif mode == "exec":
        anyio.run(execute, path)
    else:
        raise SystemExit(f"unknown mode {mode}")
