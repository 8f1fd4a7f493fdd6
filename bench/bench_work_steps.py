"""Cost of the trusted work pieces per effect, each against a peer measured in the same run.

- authority check (grants re-read lock-free at every check): unchanged
  grants file (stat + cached fold) and a file that changed since the last
  check (full re-read), vs. a bare ``os.stat`` of the same file;
- ``of_step.<write_file>`` through the registry (validation, path checks,
  atomic temp+fsync+rename+dir fsync, receipt) vs. the same bytes written
  with a plain ``open().write()`` + ``fsync``;
- ``of_step.<command>`` running ``true`` through the registry (process group,
  stdout/stderr to the artifact store, receipt) vs. ``subprocess.run(["true"])``.

Usage: python bench/bench_work_steps.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median, table, write_section  # noqa: E402

from openfunctions.artifacts import ArtifactStore  # noqa: E402
from openfunctions.core import ToolExecutionContext, ToolRegistry  # noqa: E402
from openfunctions.work import Authority, Catalog, GrantStore, create_step_tools  # noqa: E402

CATALOG = """
version = 1
workspace = "ws"
[steps.write_src]
kind = "write_file"
description = "write"
paths = ["src/**"]
[steps.noop]
kind = "command"
description = "true"
argv = ["true"]
env = ["PATH"]
"""


async def timed(fn, n: int) -> float:
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        xs.append(time.perf_counter() - t0)
    return median(xs) * 1e6


async def main(quick: bool) -> None:
    n = 50 if quick else 300
    grants_n = 200 if quick else 1000
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "ws" / "src").mkdir(parents=True)
        (root / "c.toml").write_text(CATALOG)
        cat = Catalog.load(root / "c.toml")
        gpath = root / "data" / "work" / "grants.journal"
        store = GrantStore(gpath)
        for i in range(grants_n - 1):
            await store.issue(principal=f"p{i}", steps=["noop"], ttl=dt.timedelta(hours=1))
        await store.issue(principal="agent", steps=["write_src", "noop"], paths=["src/**"], ttl=dt.timedelta(hours=8))
        auth = Authority(store, cat)
        step = cat.step("write_src")

        async def check() -> None:
            await auth.check(principal="agent", step=step, paths=["src/a.py"])

        async def check_changed() -> None:
            os.utime(gpath, ns=(time.time_ns(), time.time_ns()))  # defeats the cache: full re-read
            await auth.check(principal="agent", step=step, paths=["src/a.py"])

        async def bare_stat() -> None:
            os.stat(gpath)

        a_cached = await timed(check, n)
        a_changed = await timed(check_changed, max(10, n // 10))
        a_stat = await timed(bare_stat, n)

        reg = ToolRegistry(create_step_tools(cat, store=ArtifactStore(root / "art")))
        ctx = ToolExecutionContext(principal="agent", metadata={"granted_paths": ["src/**"], "artifact_scope": "bench"})
        content = "x = 1\n" * 100
        i = 0

        async def step_write() -> None:
            nonlocal i
            i += 1
            r = await reg.execute_detailed("of_step.write_src", {"path": f"src/f{i % 20}.py", "content": content}, ctx)
            assert r.ok, r.error

        def plain_write_sync() -> None:
            nonlocal i
            i += 1
            with open(root / "ws" / "src" / f"g{i % 20}.py", "w") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())

        async def plain_write() -> None:
            plain_write_sync()

        w_step = await timed(step_write, n)
        w_plain = await timed(plain_write, n)

        async def step_cmd() -> None:
            r = await reg.execute_detailed("of_step.noop", {}, ctx)
            assert r.ok and r.value["exit_code"] == 0, r.error

        async def plain_cmd() -> None:
            subprocess.run(["true"], check=True)

        m = max(20, n // 5)
        c_step = await timed(step_cmd, m)
        c_plain = await timed(plain_cmd, m)

    rows = [
        [f"authority check, grants file unchanged ({grants_n} grants)", f"{a_cached:.0f}", "bare os.stat", f"{a_stat:.1f}", f"{a_cached / a_stat:.0f}x"],
        [f"authority check, grants file changed ({grants_n} grants)", f"{a_changed:.0f}", "authority check, unchanged", f"{a_cached:.0f}", f"{a_changed / a_cached:.0f}x"],
        ["of_step write_file (600 B) via registry", f"{w_step:.0f}", "open+write+fsync", f"{w_plain:.0f}", f"{w_step / w_plain:.1f}x"],
        ["of_step command `true` via registry", f"{c_step:.0f}", "subprocess.run(['true'])", f"{c_plain:.0f}", f"{c_step / c_plain:.1f}x"],
    ]
    body = table(["operation", "median µs", "peer", "peer median µs", "ratio"], rows)
    body += (
        "\n\nThe authority check re-reads the grants journal at every effect so that a CLI revocation "
        "takes effect immediately; an unchanged file costs a stat plus the in-memory checks (path resolution "
        "with realpath, pattern matching). The write step's extra cost is the atomic replace "
        "(temp file, fsync, rename, directory fsync) plus validation and the receipt; the command step's "
        "is the process group handling and two artifact puts (each fsynced)."
    )
    print(body)
    write_section("work-steps", "Work: authority check and step tools", body,
                  "python bench/bench_work_steps.py" + (" --quick" if quick else ""))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    anyio.run(main, ap.parse_args().quick)
