"""stdio journal sync modes side by side: ``--journal-sync thread``, ``--journal-sync loop`` and the SDK, one round each in turn.

A serial handshake-era ``mcp.Client`` (2025-11-25) calls the effectful no-op tool (``bench_server``'s ``noop_write``:
a durable start record before the handler, a durable receipt before the reply) on three stdio servers, rounds
interleaved (thread, loop, SDK, thread, ...) so machine load hits all three alike. Reports median calls/s, the median
paired ratios, and where each server's time went per call, from the kernel's per-thread scheduler counters
(``/proc/<pid>/task/<tid>/schedstat``: time on a CPU, time runnable but waiting for one, and how many times the
thread was put on a CPU). ``main`` is the server's event-loop thread, ``others`` its other threads together (the
journal's writer thread in ``thread`` mode). A thread woken by the disk or a pipe while other processes keep
the cores busy shows that wake-up as run-queue wait.

    python bench/bench_stdio_sync.py --rounds 5 --busy 3   # three busy-loop processes beside it (they end with it)

``--slice-us N`` asks the kernel for an N µs time slice for every thread of our two servers
(``sched_setattr``'s ``sched_runtime`` for a normal task, EEVDF, Linux 6.12+; x86-64 only here): a probe of
whether a shorter slice lets a thread woken by the disk get a core sooner. The servers do not do this themselves.

Linux only (``/proc``); prints, writes nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_server as bs  # noqa: E402
from _report import median  # noqa: E402


def _children() -> dict[int, str]:
    """This process's child processes: pid -> command line (NUL-separated)."""
    out = {}
    me = str(os.getpid())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                out[int(d)] = Path(f"/proc/{d}/cmdline").read_text()
        except (OSError, IndexError):
            continue
    return out


def _schedstat(pid: int) -> dict[str, tuple[int, int, int]]:
    """Per thread of ``pid`` ("main" or a tid): ns on a CPU, ns waiting on a run queue, times scheduled in."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            run, wait, slices = map(int, Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out["main" if tid == str(pid) else tid] = (run, wait, slices)
    return out


class _SchedAttr(ctypes.Structure):
    # struct sched_attr (include/uapi/linux/sched/types.h)
    _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64), ("util_min", ctypes.c_uint32),
                ("util_max", ctypes.c_uint32)]


_SYS_SCHED_SETATTR_X86_64 = 314
SLICE_NS = 0  # --slice-us, in ns; 0: leave the kernel's default


def _set_slice(pid: int, ns: int) -> None:
    """Ask for an ``ns`` time slice for every thread of ``pid`` (SCHED_OTHER, nice 0); raises OSError if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    for tid in os.listdir(f"/proc/{pid}/task"):
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), policy=0, runtime=ns)
        if libc.syscall(_SYS_SCHED_SETATTR_X86_64, int(tid), ctypes.byref(attr), 0) != 0:
            raise OSError(ctypes.get_errno(), f"sched_setattr on thread {tid} of {pid}")


class _Counted(bs._Target):
    """A target whose server's scheduler counters are summed over its rounds."""

    def __init__(self, label: str, marker: str, **kw: Any) -> None:
        super().__init__(label, **kw)
        self.marker = marker  # a piece of the server's command line that tells it apart from the others
        self.sched: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.calls = 0

    def server_pid(self) -> int | None:
        return next((pid for pid, cmd in _children().items() if self.marker in cmd), None)


async def _counted_round(t: bs._Target, clients: Any, n: int) -> tuple[float, int]:
    assert isinstance(t, _Counted)
    pid = t.server_pid()
    if pid and SLICE_NS and t.label != "sdk":
        _set_slice(pid, SLICE_NS)  # every round: a thread started since gets it too
    before = _schedstat(pid) if pid else {}
    rate, calls = await _plain_round(t, clients, n)
    if pid:
        for name, now in _schedstat(pid).items():
            was = before.get(name, (0, 0, 0))
            acc = t.sched["main" if name == "main" else "others"]
            for i in range(3):
                acc[i] += now[i] - was[i]
        t.calls += calls
    return rate, calls


_plain_round = bs._round


async def run(rounds: int, n: int) -> None:
    from mcp import Client, StdioServerParameters

    tmp = Path(tempfile.mkdtemp(prefix="bench-stdio-sync-"))

    def params(cmd: list[str]) -> Any:
        return StdioServerParameters(command=cmd[0], args=cmd[1:], env=bs._env())

    def legacy(p: Any) -> Any:
        return Client(p, read_timeout_seconds=60, mode="legacy")

    thread = params(bs._ours_cmd(tmp / "thread", "--journal-sync", "thread", journal=True))
    loop = params(bs._ours_cmd(tmp / "loop", "--journal-sync", "loop", journal=True))
    sdk = StdioServerParameters(command=sys.executable, args=bs._sdk_cmd("stdio")[1:], env=bs._env())
    targets = [_Counted("thread", "sync\0thread", make_clients=lambda: [legacy(thread)], tool="noop_write"),
               _Counted("loop", "sync\0loop", make_clients=lambda: [legacy(loop)], tool="noop_write"),
               _Counted("sdk", "--serve-sdk", make_clients=lambda: [legacy(sdk)], tool="noop_write")]
    bs._round = _counted_round  # type: ignore[assignment]
    try:
        await bs._run_mode("stdio, handshake era, journal on, effectful tool", list(targets), n, rounds, warmup=40)
    finally:
        bs._round = _plain_round
    th, lp, sd = (t.rates for t in targets)
    print(f"median calls/s: thread {median(th):.0f}, loop {median(lp):.0f}, SDK {median(sd):.0f}; paired: "
          f"thread/SDK {median([a / b for a, b in zip(th, sd, strict=True)]):.2f}x, "
          f"loop/SDK {median([a / b for a, b in zip(lp, sd, strict=True)]):.2f}x, "
          f"loop/thread {median([a / b for a, b in zip(lp, th, strict=True)]):.2f}x; "
          f"1-minute load {os.getloadavg()[0]:.1f}")
    for t in targets:
        parts = [f"{name}: on CPU {v[0] / t.calls / 1e3:.0f}, run-queue wait {v[1] / t.calls / 1e3:.0f}, "
                 f"scheduled in {v[2] / t.calls:.1f}x" for name, v in sorted(t.sched.items()) if v[2]]
        print(f"  {t.label} server, per call (µs): " + "; ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200, help="calls per round")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes to run beside it (CPU load; they end with it)")
    ap.add_argument("--slice-us", type=int, default=0, help="time slice for our servers' threads (µs; 0: the default)")
    args = ap.parse_args()
    global SLICE_NS
    SLICE_NS = args.slice_us * 1000
    # Each busy loop also ends by itself after 10 minutes, should this process die without killing it.
    spin = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy)]
    try:
        anyio.run(run, args.rounds, args.calls)
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
