"""Processes and threads the tests start, watch and kill: the one copy the crash tests share.

- ``alive(pid)``: whether a process runs (a zombie, killed but not yet reaped, counts as dead).
- ``kill_pid(pid)``: SIGKILL a process group (or the lone process), whatever state it is in.
- ``sigkill(proc)``: ``kill -9`` a child we started, reap it, check that the signal killed it, and return
  what was left unread on its stdout (a crash test compares it with what the child acknowledged).
- ``stop(proc)``: end a child if it still runs, reap it and close its pipes (teardown).
- ``LineChild``: a Python child spoken to in lines on stdin/stdout, with a watchdog that kills
  it after ``timeout`` seconds so a wedged child fails its test instead of hanging the suite.
- ``writer_threads(path)``: the journal's group-commit writer threads for the journal at ``path``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (dead, not yet reaped by its parent) is not alive."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the state follows the command name in parentheses, which may itself hold ") "
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_pid(pid: int) -> None:
    """SIGKILL ``pid``'s process group, or ``pid`` alone when it leads none; gone already is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sigkill(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    """``kill -9`` a child, reap it, check it died of that signal (not of something before it), and return
    the rest of its stdout ("" when it has no stdout pipe)."""
    proc.send_signal(signal.SIGKILL)
    rest, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == -signal.SIGKILL, f"the child had exited with {proc.returncode} before the kill"
    if isinstance(rest, bytes):
        return rest.decode(errors="replace")
    return rest or ""


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Teardown: kill the child if it still runs, reap it, close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=timeout)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


class LineChild:
    """A child process spoken to in text lines: ``send``/``readline``, ``kill9``, ``close``."""

    def __init__(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bool = True, **popen) -> None:
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin else None, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, **popen,
        )
        # a watchdog so a wedged child can never hang the suite
        self._watchdog = threading.Timer(timeout, self.kill)
        self._watchdog.daemon = True
        self._watchdog.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def readline(self) -> str:
        """The child's next line, stripped; ``AssertionError`` with its stderr if it exited instead."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"child exited (rc={self.proc.wait()}) without replying; stderr:\n{err[-4000:]}")
        return line.strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def kill9(self) -> str:
        """SIGKILL the child, reap it, check the signal killed it, and return the rest of its stdout."""
        self._watchdog.cancel()
        return sigkill(self.proc)

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin (the child's cue to exit), wait for it, kill it if it will not go."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=timeout)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.kill()
        self._watchdog.cancel()
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


def writer_threads(path: Path) -> list[threading.Thread]:
    """The live group-commit writer threads of the journal at ``path`` (they are named after its file)."""
    return [t for t in threading.enumerate() if t.name == f"journal-writer:{path.name}"]


__all__ = ["LineChild", "alive", "kill_pid", "sigkill", "stop", "writer_threads"]
