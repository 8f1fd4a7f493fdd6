"""Helpers of the real-process tests (test_crash.py, test_server_resume.py): environment, evidence, waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env(tmp: Path, **extra: str) -> dict[str, str]:
    """The child's environment: evidence in ``tmp`` (see ``_app.py``), no sleep unless ``extra`` asks."""
    out = dict(os.environ, WF_TEST_DIR=str(tmp), PYTHONPATH=str(ROOT))
    out.pop("WF_TEST_SLEEP_IN", None)
    out.update(extra)
    return out


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for(pred, what: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def assert_resumed_order_8(proc: subprocess.Popen, tmp: Path) -> None:
    """``_child.py ... resume-all`` finished run order-8 (killed in its read step): the charge not repeated, the read was."""
    import json

    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    [out] = json.loads(stdout)
    assert out["run_id"] == "order-8" and out["status"] == "succeeded" and out["resumed"] is True
    assert out["result"] == {"ok": True, "balance": 95}
    assert len(lines(tmp / "charges.txt")) == 1  # the settled charge was skipped
    assert len(lines(tmp / "reads.txt")) == 2  # the interrupted read ran again


def cli(tmp: Path, data: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """``openfunctions-mcp workflows ARGS --data-dir DATA`` as a real process."""
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", "workflows", *args, "--data-dir", str(data)],
                          cwd=ROOT, env=env(tmp, **extra), capture_output=True, text=True, timeout=120)
