"""The retrieval benches stay runnable (smoke runs: their numbers are not checked, only their tables)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args, "--no-write"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bench_rag_eval_prints_its_table():
    out = _run("bench/bench_rag_eval.py", "--no-minilm")
    for row in ("lexical (vector only; the old default)", "BM25 text only", "hybrid: lexical + BM25, RRF (the default)"):
        assert row in out
    assert "recall@5" in out and "MRR" in out


def test_bench_rag_ingest_prints_its_peers(pg_dsn):
    out = _run("bench/bench_rag_ingest.py", "--chunks", "300", "--one-by-one-chunks", "100", "--repeat", "1",
               "--minilm-chunks", "0", "--dsn", pg_dsn)
    assert "peer raw COPY of the same rows" in out and "Rag.ingest_many in bulk_load()" in out
    assert "x the raw COPY" in out


def test_bench_rag_loop_measures_both_paths():
    proc = subprocess.run([sys.executable, "bench/bench_rag_loop.py", "--mib", "1", "--repeat", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "inline (peer)" in proc.stdout and "Rag's path" in proc.stdout
