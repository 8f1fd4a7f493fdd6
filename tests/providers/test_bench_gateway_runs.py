"""bench/bench_gateway.py still runs end to end (every mode) without touching the docs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gateway.py"


def test_bench_gateway_quick_run_measures_every_mode() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--calls", "5", "--no-write"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    cells = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")]
    rows = [c for c in cells if c != "mode"]
    assert rows == ["direct", "mounted (library)", "pass-through proxy (SDK)", "pass-through proxy (our stdio)",
                    "served gateway", "served gateway, journal on"], proc.stdout
