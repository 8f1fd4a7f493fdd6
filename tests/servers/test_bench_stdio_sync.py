"""bench/bench_stdio_sync.py stays runnable (a smoke run: its figures are not checked, only that it prints them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_bench_stdio_sync_runs_both_sync_modes_beside_the_sdk():
    proc = subprocess.run([sys.executable, "bench/bench_stdio_sync.py", "--rounds", "1", "--calls", "20"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "thread/SDK" in proc.stdout and "loop/SDK" in proc.stdout and "run-queue wait" in proc.stdout
