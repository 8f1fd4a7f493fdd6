"""Opaque ids and UTC timestamps: what every record needs, owned by no record type.

The journal, the receipts, artifacts, leases, tasks and runs all stamp their
records with these two, so they live here rather than in the receipt domain
(``receipts.py``), and the journal imports no receipt code.

- :func:`new_id` — ``prefix_`` + 32 lowercase hex chars (128 bits from the
  OS CSPRNG), e.g. ``rcpt_…``, ``jnl_…``, ``art_…``; never derived from input.
- :func:`utc_timestamp` — the current UTC time as RFC 3339 *text* with
  microseconds and ``Z``. (A ``datetime``, where one is needed, comes from
  ``datetime.datetime.now(datetime.UTC)``.)
"""

from __future__ import annotations

import datetime as _dt
import os
import time


def new_id(prefix: str) -> str:
    """An opaque random id: ``prefix_`` + 32 lowercase hex chars (128 bits from the OS CSPRNG)."""
    return prefix + "_" + os.urandom(16).hex()


# (whole seconds since the epoch, their "YYYY-MM-DDTHH:MM:SS" text): the
# date part changes once a second, so formatting it per call is wasted work
# on the journal's append path. Replaced as one tuple, so threads may share it.
_second_text: tuple[int, str] = (-1, "")


def utc_timestamp() -> str:
    """The current UTC time as RFC 3339 text with microseconds: ``2026-11-30T02:50:00.123456Z``."""
    global _second_text
    sec, us = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second_text
    if cached[0] != sec:
        cached = _second_text = (sec, _dt.datetime.fromtimestamp(sec, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{us:06d}Z"


__all__ = ["new_id", "utc_timestamp"]
