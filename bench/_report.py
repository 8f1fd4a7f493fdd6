"""Shared helpers for bench/ scripts: timing stats and the PERFORMANCE.md table.

Each benchmark owns one section of docs/PERFORMANCE.md between
``<!-- bench:NAME:start -->`` and ``<!-- bench:NAME:end -->``; writing a
section replaces only that section, so benchmarks run in any order.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERF = ROOT / "docs" / "PERFORMANCE.md"

_HEADER = """# Performance

Every figure here was written by a script in `bench/`, run on this project's
shared 2-core machine. Each benchmark measures a peer in the same run and
quotes medians and ratios; absolute numbers vary with the machine's load.
Re-run a section with the command shown under it.
"""


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def machine() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}"


def table(headers: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def write_section(name: str, title: str, body: str, command: str) -> None:
    """Replace (or append) the section ``name`` in docs/PERFORMANCE.md."""
    PERF.parent.mkdir(parents=True, exist_ok=True)
    text = PERF.read_text() if PERF.exists() else _HEADER
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = f"{start}\n## {title}\n\nCommand: `{command}` — run {stamp}, {machine()}.\n\n{body.strip()}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + section + after
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    PERF.write_text(text)


def thread_cpu(pid: int | str = "self") -> dict[str, tuple[str, float, float, float]]:
    """Every thread of process ``pid`` (default: this one): ``{tid: (name, user s, system s, CPU s)}``.

    CPU is the scheduler's exact run time (``/proc/.../schedstat``, ns). The
    user/system split is not exact on a kernel with tick-based accounting
    (``CONFIG_TICK_CPU_ACCOUNTING``, as on this machine): the kernel splits the
    exact total in the ratio of the 4 ms ticks that hit user or kernel mode, so
    compare the split only over many calls, and the total first. A thread that
    ends while it is read is left out.
    """
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[str, float, float, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        task = Path(f"/proc/{pid}/task/{tid}")
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
            run_ns = int((task / "schedstat").read_text().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (name, int(fields[11]) / tick, int(fields[12]) / tick, run_ns / 1e9)
    return out
