"""tests/_net.py: the free-port and wait-for-listen helper every server test and the bench use."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from .._net import free_port, wait_for_port

LISTEN = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
sys.stdin.read()  # listen until the test closes our stdin
"""


def test_free_port_is_bindable_on_loopback():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_wait_for_port_returns_once_the_process_listens():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", LISTEN, str(port)], stdin=subprocess.PIPE)
    try:
        wait_for_port(port, proc, timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_wait_for_port_names_an_early_exit_and_what_the_server_said():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('no such profile'); sys.exit(2)"],
        stderr=subprocess.PIPE, text=True,
    )
    with pytest.raises(RuntimeError, match=r"exited with 2 .*no such profile"):
        wait_for_port(free_port(), proc, timeout=60)
    proc.stderr.close()
