"""bench/bench_store_compaction.py stays runnable (a smoke run: its figures are not checked, only that it prints them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_bench_store_compaction_compares_writers_with_and_without_a_compaction():
    proc = subprocess.run([sys.executable, "bench/bench_store_compaction.py", "--keys", "2000", "--writers", "2",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "puts/s during compaction" in proc.stdout and "puts/s without compaction" in proc.stdout
