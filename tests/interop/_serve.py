"""Start the real ``openfunctions-mcp`` command as a subprocess for the interop tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp import StdioServerParameters

from .._net import free_port, wait_for_port


def cli_command() -> list[str]:
    """The installed console script next to this interpreter (``-m`` if it is missing)."""
    script = Path(sys.executable).with_name("openfunctions-mcp")
    if script.exists():
        return [str(script)]
    found = shutil.which("openfunctions-mcp")
    return [found] if found else [sys.executable, "-m", "openfunctions.servers"]


def serve_args(profile: str, data_dir: Path, *extra: str) -> list[str]:
    return ["serve", "--profile", profile, "--data-dir", str(data_dir), "--log-level", "warning", *extra]


def stdio_params(profile: str, data_dir: Path, *extra: str) -> StdioServerParameters:
    cmd = cli_command()
    return StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], *serve_args(profile, data_dir, *extra)], env=dict(os.environ)
    )


@contextmanager
def http_server(profile: str, data_dir: Path, *extra: str) -> Iterator[str]:
    """Serve ``profile`` over streamable HTTP on a free 127.0.0.1 port; yield its URL.

    Stopped with SIGTERM (the server's graceful path), SIGKILL if it lingers.
    """
    log = data_dir / "server.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):  # a free port can be taken between probing and binding
        port = free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*cli_command(), *serve_args(profile, data_dir, "--transport", "http", "--port", str(port), *extra)],
                stdout=out, stderr=subprocess.STDOUT,
            )
        try:
            wait_for_port(port, proc, timeout=60, output=log.read_text)
            break
        except (RuntimeError, TimeoutError):
            proc.kill()
            proc.wait()
            if attempt == 2:
                raise
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
