"""Drive ``_child.py`` (a controller in its own process) from a test."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests._harness import LineChild, kill_pid, wait_for

CHILD = Path(__file__).with_name("_child.py")


class ChildController(LineChild):
    """The controller in ``_child.py``, spoken to in JSON lines (``{"op": ..., **kw}`` -> ``{"ok", "result"}``)."""

    def __init__(self, data: Path, catalog: Path, *args: str, timeout: float = 60.0) -> None:
        super().__init__([sys.executable, str(CHILD), str(data), str(catalog), *args], timeout=timeout)

    def send(self, op: str, **kw: Any) -> None:  # type: ignore[override]
        super().send(json.dumps({"op": op, **kw}))

    def read(self) -> dict[str, Any]:
        return json.loads(self.readline())

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        self.send(op, **kw)
        return self.read()

    def ok(self, op: str, **kw: Any) -> Any:
        r = self.call(op, **kw)
        assert r["ok"], r
        return r["result"]

    def stop(self) -> None:
        self.pause()

    def cont(self) -> None:
        self.resume()

    def close(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            try:
                self.call("close")
            except (AssertionError, BrokenPipeError, ValueError):
                pass
        super().close(timeout)


__all__ = ["CHILD", "ChildController", "kill_pid", "wait_for"]
