"""bench/bench_server.py still runs end to end (both servers, every mode) without touching the docs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_server.py"


def test_bench_server_smoke_run_measures_every_mode() -> None:
    # --smoke: every mode and row once with a handful of calls (the figures are not what is checked here).
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--no-write"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [r.split("|")[1].strip() for r in rows] == [
        "in-process", "stdio", "stdio, journal on, read-only tool", "stdio, journal on, effectful tool",
        "stdio, journal on, read-only tool, --no-fast-path", "stdio, handshake era, journal off, read-only tool",
        "stdio, handshake era, journal on, read-only tool", "stdio, handshake era, journal on, effectful tool",
        "stdio, handshake era, journal on, read-only tool, --journal-sync thread",
        "stdio, handshake era, journal on, effectful tool, --journal-sync thread",
        "stdio, handshake era, journal on, read-only tool, --no-fast-path", "stdio, journal on, read-only tool, --loop uvloop",
        "http x1, mcp.Client", "http x16, mcp.Client, journal on, read-only tool",
        "http x16, mcp.Client, handshake era, journal on, read-only tool",
        "http x16", "http x16, journal on, read-only tool", "http x16, journal on, effectful tool",
        "http x16, journal on, read-only tool, --no-fast-path", "http x16, handshake era, journal on, read-only tool",
        "http x16, handshake era, journal on, effectful tool",
        "http x16, handshake era, journal on, read-only tool, --no-fast-path",
        "http load x50 (raw HTTP, of_hash_text, journal on)", "http load x50, --no-fast-path",
    ], proc.stdout


def test_profile_served_measures_each_variant_per_thread() -> None:
    # One short round of the committed measuring tool: this checkout and HEAD's tree (git archive) side by side.
    script = BENCH.parent / "profile_served.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--clients", "2", "--rounds", "1", "--seconds", "0.5", "ours@HEAD", "ours"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    table, _, paired = proc.stdout.partition("\n\n")
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:]}
    assert set(rows) == {"ours@HEAD", "ours"}, proc.stdout
    for name, (loop_u, _loop_s, _other_u, _other_s, rate, errors) in rows.items():
        assert float(loop_u) > 0 and float(rate) > 0 and errors == "0", (name, proc.stdout)
    assert paired.splitlines()[1].split()[0] == "ours", proc.stdout  # the per-round differences against ours@HEAD
