"""Kept for the modules that import it by this name: the code lives in tests/_harness/net.py."""

from tests._harness.net import LOOPBACK, free_port, read_until_closed, wait_for_port

__all__ = ["LOOPBACK", "free_port", "read_until_closed", "wait_for_port"]
