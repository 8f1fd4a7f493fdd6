"""``chat --serve`` stopped by SIGTERM (what a service manager sends): exit 0, no traceback on stderr."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _read_until(proc: subprocess.Popen, needle: str, timeout: float = 60.0) -> str:
    """stderr up to the line holding ``needle`` (bounded in time: a server that never says it is up fails the test)."""
    seen = ""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            raise AssertionError(f"no {needle!r} on stderr in {timeout}s: {seen[-2000:]}")
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"stderr closed before {needle!r} (exit {proc.wait()}): {seen[-2000:]}")
        seen += line
    return seen


@pytest.mark.slow
def test_sigterm_stops_the_served_chat_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["hello"]))
    env = dict(os.environ, OPENFUNCTIONS_LOG_LEVEL="warning")
    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.servers", "chat", "--serve", "--provider", "scripted", "--script",
         str(script), "--port", "0", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        before = _read_until(proc, "chat served at http://127.0.0.1:")
        proc.send_signal(signal.SIGTERM)
        out, after = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = before + after
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr and '"level": "error"' not in stderr, stderr
