"""A real process for crash tests: ``python _child.py MODE PATH [ARGS]``.

- ``writer PATH CONC [reserve]``: CONC concurrent appenders forever; prints
  ``ack SEQ N`` after each append returns (i.e. after its fsync); with
  ``reserve`` the log keeps room reserved ahead of its records (``preallocate``).
- ``holder PATH``: opens the journal, prints ``locked``, waits to be killed.
- ``exec PATH``: executor + ExecutionJournal; a handler prints
  ``started RECEIPT_ID`` and never returns, so the test kills it mid-call.
- ``effects PATH CONC``: executor + ExecutionJournal (fsyncs slowed by 2 ms,
  so a receipt is often queued and not yet durable), CONC callers of a write
  tool forever; the handler prints ``effect RECEIPT_ID`` (the effect), the
  caller ``reply RECEIPT_ID`` once the call returned (the reply sent).
- ``zygote``: imports the journal and the executor once, then per stdin line
  ``MODE PATH [ARGS]`` forks a child running that mode (its lines go to the
  zygote's stdout) and prints ``forked PID`` before the child's first line;
  ``wait PID`` reaps a child and prints ``reaped PID CODE`` (CODE as
  ``Popen.returncode``: ``-9`` for a SIGKILL). A fork costs milliseconds where
  a fresh interpreter costs half a second, so a kill loop can afford its rounds;
  each child is still a separate process with its own journal lock.
"""

from __future__ import annotations

import itertools
import os
import sys

import anyio


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


async def writer(path: str, conc: int, reserve: bool = False) -> None:
    from openfunctions.core.journal import JournalLog

    log = await JournalLog.open(path, kind="log", preallocate=reserve)
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


def zygote() -> None:
    import traceback

    import openfunctions.core  # noqa: F401  (imported here once; every fork inherits it)
    import openfunctions.core.journal  # noqa: F401

    for line in sys.stdin:
        mode, *args = line.split()
        if mode == "wait":
            pid = int(args[0])
            _, status = os.waitpid(pid, 0)
            say("reaped", pid, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
            continue
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(go_w)
                os.read(go_r, 1)  # "forked PID" is on stdout before this child's first line
                run(mode, args[0], args[1:])
            except BaseException:
                traceback.print_exc()
                say("child-error")
                code = 1
            finally:
                os._exit(code)
        os.close(go_r)
        say("forked", pid)
        os.write(go_w, b"g")
        os.close(go_w)


def run(mode: str, path: str, rest: list[str]) -> None:
    if mode == "writer":
        anyio.run(writer, path, int(rest[0]), rest[1:2] == ["reserve"])
    elif mode == "holder":
        anyio.run(holder, path)
    elif mode == "exec":
        anyio.run(execute, path)
    elif mode == "effects":
        anyio.run(effects, path, int(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    if sys.argv[1] == "zygote":
        zygote()
    else:
        run(sys.argv[1], sys.argv[2], sys.argv[3:])
