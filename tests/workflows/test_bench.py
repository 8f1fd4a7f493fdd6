"""bench/bench_workflows.py stays runnable (a smoke run: its numbers are not checked, only its table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_workflows_quick_run_prints_its_table():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_workflows.py"), "--quick", "--no-write"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for row in ("write tools: pipe of 10 tool steps, in memory (CPU µs)", "read tools: durable run, execution journal + run journal"):
        assert row in proc.stdout


@pytest.mark.slow
def test_bench_workflows_pg_quick_run_prints_its_ratios(pg_dsn):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_workflows_pg.py"), "--runs", "2", "--rounds", "1",
                           "--database", pg_dsn], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "database / file = " in proc.stdout and "database / raw (2 inserts) = " in proc.stdout
