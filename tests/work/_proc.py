"""Drive ``_child.py`` (a controller in its own process) from a test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("_child.py")


class ChildController:
    def __init__(self, data: Path, catalog: Path, *args: str, timeout: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(data), str(catalog), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        # a watchdog so a wedged child can never hang the suite
        self._watchdog = threading.Timer(timeout, self.kill)
        self._watchdog.daemon = True
        self._watchdog.start()

    def send(self, op: str, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"child exited (rc={self.proc.poll()}) without replying; stderr:\n{err[-4000:]}")
        return json.loads(line)

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        self.send(op, **kw)
        return self.read()

    def ok(self, op: str, **kw: Any) -> Any:
        r = self.call(op, **kw)
        assert r["ok"], r
        return r["result"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("close")
            except (AssertionError, BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._watchdog.cancel()
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()


def wait_for(predicate, *, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll an external fact (a file another process writes) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill_pid(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
