"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no websocket library needed).

Chromium reads commands from its fd 3 and writes replies and events to its fd
4, one JSON message per NUL-terminated chunk. Used by the chat page test only.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1000,800", "--remote-debugging-pipe")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, executable: str, profile: Path) -> None:
        to_r, self._to_w = os.pipe()      # we write commands -> chromium's fd 3
        self._from_r, from_w = os.pipe()  # chromium's fd 4 -> we read
        # Move the child's ends above 4 so that dup2 onto 3 and 4 never clobbers one of them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_r, from_w)]
        os.close(to_r)
        os.close(from_w)

        def fds() -> None:  # in the child, before exec: dup2'd descriptors are inheritable
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.log = profile.parent / f"{profile.name}.stderr.log"
        with open(self.log, "wb") as err:  # a file, not a pipe: chromium's chatter must never block it
            self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         preexec_fn=fds, close_fds=False)
        for fd in high:
            os.close(fd)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             timeout: float = 30) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._read(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from chromium in time")
            ready, _, _ = select.select([self._from_r], [], [], left)
            if ready:
                chunk = os.read(self._from_r, 1 << 20)
                if not chunk:
                    err = self.log.read_text(errors="replace")
                    raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()}): {err[-2000:]}")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_w)
        os.close(self._from_r)
