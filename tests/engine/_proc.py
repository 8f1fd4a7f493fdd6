"""A real engine subprocess over stdin/stdout, for the engine tests."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: How long a test waits for one expected event before it fails (a bound, not a measurement).
EVENT_TIMEOUT_S = 60.0


def engine_env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "ENGINE_EFFECTS": str(tmp / "effects.txt"), "ENGINE_RELEASE": str(tmp / "release"),
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp)])}
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY",
              "DEEPSEEK_API_KEY", "MOONSHOT_API_KEY"):
        env.pop(k, None)
    return env


def engine_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "openfunctions.servers.cli", "engine", *args]


def write_script(path: Path, replies: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in replies))
    return path


def effects(tmp: Path) -> list[str]:
    p = tmp / "effects.txt"
    return p.read_text().splitlines() if p.exists() else []


class Engine:
    """``openfunctions-mcp engine ...`` with its events read on a thread; stderr goes to a file."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        self.stderr_path = tmp / f"stderr-{os.urandom(4).hex()}.txt"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(engine_argv(*args), cwd=tmp, env=engine_env(tmp), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self.events: list[dict[str, Any]] = []
        self._q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(json.loads(line))
        self._q.put(None)

    def send(self, cmd: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd if isinstance(cmd, bytes) else (json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def next(self) -> dict[str, Any]:
        try:
            ev = self._q.get(timeout=EVENT_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"no event in {EVENT_TIMEOUT_S} s; so far {self.events}; stderr "
                                 f"{self.stderr_path.read_text()[-2000:]}") from None
        if ev is None:
            raise AssertionError(f"the engine exited (rc {self.proc.wait()}); events {self.events}; stderr "
                                 f"{self.stderr_path.read_text()[-3000:]}")
        self.events.append(ev)
        return ev

    def until(self, etype: str, **match: Any) -> dict[str, Any]:
        """Read events up to the first of ``etype`` whose fields include ``match``."""
        while True:
            ev = self.next()
            if ev["type"] == etype and all(ev.get(k) == v for k, v in match.items()):
                return ev

    def rest(self) -> list[dict[str, Any]]:
        """Every event until the engine's stdout closes."""
        out = []
        while True:
            ev = self._q.get(timeout=EVENT_TIMEOUT_S)
            if ev is None:
                return out
            self.events.append(ev)
            out.append(ev)

    def wait(self) -> int:
        rc = self.proc.wait(timeout=EVENT_TIMEOUT_S)
        self._stderr.close()
        return rc

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no handler runs, nothing is flushed
        self.proc.wait(timeout=EVENT_TIMEOUT_S)
        self._stderr.close()


def run_headless(tmp: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(engine_argv(*args), cwd=tmp, env=engine_env(tmp), capture_output=True, text=True,
                          timeout=EVENT_TIMEOUT_S * 2)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, events, proc.stderr
