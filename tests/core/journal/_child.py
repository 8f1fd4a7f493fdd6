"""A real process for crash tests: ``python _child.py MODE PATH [ARGS]``.

- ``writer PATH CONC``: CONC concurrent appenders forever; prints ``ack SEQ N``
  after each append returns (i.e. after its fsync).
- ``holder PATH``: opens the journal, prints ``locked``, waits to be killed.
- ``exec PATH``: executor + ExecutionJournal; a handler prints
  ``started RECEIPT_ID`` and never returns, so the test kills it mid-call.
- ``effects PATH CONC``: executor + ExecutionJournal (fsyncs slowed by 2 ms,
  so a receipt is often queued and not yet durable), CONC callers of a write
  tool forever; the handler prints ``effect RECEIPT_ID`` (the effect), the
  caller ``reply RECEIPT_ID`` once the call returned (the reply sent).
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


async def effects(path: str, conc: int) -> None:
    import time

    from openfunctions.core import ToolRegistry, define_tool
    from openfunctions.core.journal import ExecutionJournal, JournalLog
    from openfunctions.core.journal._fsutil import FileOps

    class SlowSync(FileOps):
        def sync(self, fd: int) -> None:
            time.sleep(0.002)
            super().sync(fd)

    async def effect(params, ctx):
        say("effect", ctx.receipt_id)
        return {"ok": True}

    t = define_tool(name="write_it", description="an effect", input_schema={"type": "object"}, handler=effect,
                    capability={"effect": "write"})
    # Recovery is the test's (it reopens with ExecutionJournal.open after each kill).
    journal = ExecutionJournal(await JournalLog.open(path, kind="execution", _ops=SlowSync()))
    reg = ToolRegistry([t], sink=journal)
    say("ready", journal.ordered_receipts)

    async def caller() -> None:
        while True:
            d = await reg.execute_detailed("write_it", {})
            if d.receipt.outcome == "succeeded":
                say("reply", d.receipt.receipt_id)

    async with anyio.create_task_group() as tg:
        for _ in range(conc):
            tg.start_soon(caller)


if __name__ == "__main__":
    mode, path, *rest = sys.argv[1:]
    if mode == "writer":
        anyio.run(writer, path, int(rest[0]))
    elif mode == "holder":
        anyio.run(holder, path)
    elif mode == "exec":
        anyio.run(execute, path)
    elif mode == "effects":
        anyio.run(effects, path, int(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")
