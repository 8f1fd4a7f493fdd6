"""The tests' shared harness: one copy of what many test packages need.

- ``net``: free loopback ports, waiting for a server subprocess to listen, reading a socket to its close.
- ``waits``: polling an outside fact (a file, a pid, a thread) with a short growing interval and a bound.
- ``procs``: ``alive``, ``kill_pid``, ``sigkill``, ``stop``, ``LineChild`` (a crash-test child with a
  watchdog), ``writer_threads`` (the journal's writer threads).
- ``pg``: the session's real PostgreSQL (fixture ``pg_dsn``, offered to every test by tests/conftest.py)
  and ``unique_name`` for the stores and indexes tests create in it.
- ``logs``: logging put back after each test (tests/conftest.py wraps every test in it).
- ``tree``: a copy of the source tree for a test that builds from it.

The suite runs on pytest-xdist workers (README's test command, ``-n 2 --dist loadgroup``), each a
process and a pytest session of its own. What they could share is kept apart here: ``free_port`` hands
each worker its own class of ports (net.py); each worker that needs PostgreSQL starts its own server in
its own directory, and a killed worker's server is swept by the next start (pg.py); the release build
works in a copy of the tree, not in the checkout the other worker reads (tree.py), and its tests share
one ``xdist_group`` so one worker builds once (tests/conftest.py). State inside one process (logging,
event loop policies, environment variables through ``monkeypatch``) is per worker already.

Protocol tests talk to servers in process (the SDK's in-memory client, httpx's ASGI transport); a
subprocess is for the tests whose subject is a transport, a process boundary or a crash.
"""

from .net import LOOPBACK, free_port, read_until_closed, wait_for_port
from .pg import pg_dsn, required, unique_name
from .procs import LineChild, alive, kill_pid, sigkill, stop, writer_threads
from .waits import await_file, await_for, wait_for, wait_for_file

__all__ = [
    "LOOPBACK", "LineChild", "alive", "await_file", "await_for", "free_port", "kill_pid", "pg_dsn",
    "read_until_closed", "required", "sigkill", "stop", "unique_name", "wait_for", "wait_for_file",
    "wait_for_port", "writer_threads",
]
