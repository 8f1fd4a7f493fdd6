"""``openfunctions-mcp journal reopen``: the running server's side (and the automatic re-open without traffic).

A server's :class:`~openfunctions.servers._journaling.ServedJournal` runs one
watcher task for its lifetime. Every :data:`POLL_S` seconds it

- answers an operator's re-open request for its journal, if one is there;
- otherwise, while the journal is failed and automatic re-opening is on,
  tries the re-open itself (so a server nobody calls still comes back when
  the disk frees; calls and ``/healthz`` also try, as before).

The request and its answer are files beside the journal, made so that they
work on a disk that is still completely full (an empty file and a rename
need no data block). The request is made by ``core/journal/cli.py``
(``journal reopen PATH``; also documented there); the answer here.

- request: an empty file ``<journal>.reopen-request.<nonce>`` (``nonce``: 32
  lowercase hex), created exclusively, mode 0600;
- answer: the server renames the request to ``<journal>.reopen-<status>.<nonce>``,
  ``status`` one of ``reopened``, ``healthy``, ``refused``, then writes into
  it, best effort and without fsync, canonical JSON, version 1::

      {"v": 1, "status": "<status>", "reason": "<why refused, or null>",
       "journal": "<path of the journal now in use>", "at": "<UTC ISO-8601>"}

  (an empty answer file: the disk had no room even for the reason). The
  CLI reads and removes the answer.

``healthy``: the
journal had not failed, nothing was done. ``refused``: the same safety rules
as the automatic re-open apply to an operator's request — no re-open while a
call that started on the failed file still runs, and only once a 64 KiB
written-and-fsynced probe succeeds in the journal directory (the failed
descriptor is never retried) — and the reason says which one held it back.
An operator's request ignores only the re-open interval (it works with
automatic re-opening off too).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import anyio
import structlog

log = structlog.get_logger("openfunctions.servers.journal")

POLL_S = 1.0
REQUEST_INFIX = ".reopen-request."
STATUSES = ("reopened", "healthy", "refused")
_NONCE = re.compile(r"[0-9a-f]{32}")


def requests(journal: Path) -> list[Path]:
    """The pending reopen requests for ``journal`` (well-formed names only)."""
    journal = Path(journal)
    prefix = journal.name + REQUEST_INFIX
    try:
        names = os.listdir(journal.parent)
    except OSError:
        return []
    return [journal.with_name(n) for n in sorted(names) if n.startswith(prefix) and _NONCE.fullmatch(n[len(prefix):])]


def answer_path(journal: Path, status: str, nonce: str) -> Path:
    return Path(journal).with_name(f"{Path(journal).name}.reopen-{status}.{nonce}")


def start_watch(served: Any, poll_s: float = POLL_S) -> asyncio.Task[None]:
    """Start the watcher task of ``served`` (a ServedJournal); cancel the task to stop it."""
    return asyncio.get_running_loop().create_task(_watch(served, poll_s), name="journal-reopen-watch")


async def _watch(served: Any, poll_s: float) -> None:
    while True:
        await anyio.sleep(poll_s)
        try:
            pending = await anyio.to_thread.run_sync(requests, Path(served.path))
            for request in pending:
                await answer(served, request)
            if not pending and served.failed and served.reopen_interval is not None:
                await served.try_reopen()
        except Exception as exc:  # the watcher must outlive one bad round (a file it could not read or rename)
            log.warning("journal_reopen_watch_error", error=str(exc)[:300])


async def answer(served: Any, request: Path) -> dict[str, Any]:
    """Act on one operator's re-open request and answer it beside the journal."""
    from openfunctions.core import canonical_bytes, utc_timestamp

    journal_name, nonce = request.name.split(REQUEST_INFIX, 1)
    if not served.failed:
        status, reason = "healthy", None
    elif await served.try_reopen(force=True):
        status, reason = "reopened", None
    else:
        status, reason = "refused", served.reopen_blocked or "the journal could not be re-opened"
    doc = {"v": 1, "status": status, "reason": reason, "journal": str(served.path), "at": utc_timestamp()}
    log.warning("journal_reopen_requested", status=status, reason=reason, journal=str(served.path))

    def write() -> None:
        out = answer_path(request.with_name(journal_name), status, nonce)
        os.rename(request, out)  # the answer, even on a disk with no free block
        try:
            fd = os.open(out, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, canonical_bytes(doc))
            finally:
                os.close(fd)
        except OSError as exc:  # no room for the reason: the status in the name still answers
            log.info("journal_reopen_reason_unwritten", error=str(exc))

    await anyio.to_thread.run_sync(write)
    return doc


__all__ = ["POLL_S", "REQUEST_INFIX", "STATUSES", "answer", "answer_path", "requests", "start_watch"]
