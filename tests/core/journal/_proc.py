"""Start and kill the ``_child.py`` processes."""

from __future__ import annotations

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
