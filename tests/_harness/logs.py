"""Logging put back as a test found it: structlog's configuration and the root logger's handlers and level.

Logging is process-global: a test that runs a CLI command in process (``configure_logging``) points
structlog and the root logger at the ``sys.stderr`` of that moment, which under ``capfd``/``capsys`` is a
capture pytest closes after the test; every later log line in that process (a pytest-xdist worker runs
hundreds of tests) then went to a closed file, and structlog raises ``ValueError`` there. tests/conftest.py
wraps every test in ``logging_put_back``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import structlog


def _own_handlers(root: logging.Logger) -> list[logging.Handler]:
    # pytest's capture handlers come and go around each phase of a test: not ours to put back
    return [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]


@contextmanager
def logging_put_back() -> Iterator[None]:
    """Restore structlog's configuration and the root logger's handlers and level on the way out."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = _own_handlers(root), root.level
    try:
        yield
    finally:
        if structlog.get_config() != saved:
            structlog.configure(**saved)
        if _own_handlers(root) != handlers:
            for h in _own_handlers(root):
                root.removeHandler(h)
            for h in handlers:
                root.addHandler(h)
        root.setLevel(level)


__all__ = ["logging_put_back"]
