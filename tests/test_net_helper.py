"""tests/_harness/net.py: free_port never hands out one port twice in a process (the kernel does reuse a
just-released port for the next bind(0): 870 repeats in 3 x 3,000 probes here, 8 in 200 x 36), nor to two
pytest-xdist workers of one run (each takes its own residue class of ports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._harness.net import free_port, worker_slot

REPO = Path(__file__).resolve().parents[1]


def test_free_port_never_repeats_a_port_in_one_process() -> None:
    ports = [free_port() for _ in range(3000)]
    assert len(set(ports)) == len(ports)


def _ports_of_worker(worker: str, count: int, n: int) -> subprocess.Popen:
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": str(count)}
    code = f"import json; from tests._harness.net import free_port; print(json.dumps([free_port() for _ in range({n})]))"
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)


def test_two_workers_running_at_once_never_get_the_same_port() -> None:
    # Two real processes asking at the same time, as two workers do: without the classes the kernel hands
    # a port one of them just released to the other (the repeats the test above counts, across processes).
    children = [_ports_of_worker(f"gw{i}", 2, 2000) for i in range(2)]
    got = [json.loads(c.communicate(timeout=120)[0]) for c in children]
    assert all(c.returncode == 0 for c in children)
    assert {p // 2 % 2 for p in got[0]} == {0} and {p // 2 % 2 for p in got[1]} == {1}
    assert not set(got[0]) & set(got[1])


def test_the_worker_slot_comes_from_xdist_s_variables_and_is_everything_outside_it(monkeypatch) -> None:
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(var, raising=False)
    assert worker_slot() == (0, 1)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert worker_slot() == (3, 4)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")  # `-n 1`: one worker owns every port
    assert worker_slot() == (0, 1)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "x")
    assert worker_slot() == (0, 1)
