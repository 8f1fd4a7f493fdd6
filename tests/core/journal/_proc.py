"""Start and kill the ``_child.py`` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests._harness import sigkill

CHILD = Path(__file__).with_name("_child.py")


def spawn(mode: str, path: Path, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(path), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def readline(proc: subprocess.Popen[str]) -> str:
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        err = proc.stderr.read()  # type: ignore[union-attr]
        raise AssertionError(f"child exited early (rc={proc.wait()}): {err[-2000:]}")
    return line.strip()


def kill9(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the child, reap it and return the rest of its stdout."""
    return sigkill(proc)


class Zygote:
    """A ``_child.py zygote``: forks crash-test children from one interpreter that imported the journal once.

    Each child is a real, separate process (its own journal lock) killed with a
    real SIGKILL; only the interpreter start-up is shared. One child at a time:
    its lines are read from the zygote's stdout.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD), "zygote"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.live: set[int] = set()  # forked and not yet reaped

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, *parts: object) -> None:
        self.proc.stdin.write(" ".join(map(str, parts)) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def spawn(self, mode: str, path: Path, *args: object) -> int:
        """Fork a child running ``mode``; its pid."""
        self._send(mode, path, *args)
        line = self.readline()
        assert line.startswith("forked "), line
        self.live.add(int(line.split()[1]))
        return int(line.split()[1])

    def readline(self) -> str:
        line = readline(self.proc)  # type: ignore[arg-type]
        assert line != "child-error", "the child failed (its traceback is on stderr)"
        return line

    def kill9(self, pid: int) -> str:
        """SIGKILL the child, reap it, check it died of that signal, and return the rest of its lines."""
        os.kill(pid, signal.SIGKILL)
        self.live.discard(pid)
        self._send("wait", pid)
        rest = []
        while not (line := self.readline()).startswith("reaped "):
            rest.append(line)
        assert line == f"reaped {pid} {-signal.SIGKILL}", f"the child had exited before the kill: {line}"
        return "".join(f"{r}\n" for r in rest)

    def close(self) -> None:
        """Kill a child a failed test left running, then end the zygote (EOF on its stdin)."""
        for pid in self.live:
            os.kill(pid, signal.SIGKILL)
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=60)
        self.proc.stdout.close()  # type: ignore[union-attr]
