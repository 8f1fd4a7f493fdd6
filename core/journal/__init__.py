"""openfunctions.core.journal: crash-safe JSONL journals.

- :class:`JournalLog` — the durable append-only store (group commit, flock
  ownership, torn-tail repair, fail-closed validation).
- :class:`ExecutionJournal` — the executor's durable sink (starts, receipts, recovery).
- :func:`read_records` — lock-free validating reader.

The line format is written once, in ``_encoder.py``; docs/formats/journal.md covers the rest.

Usage::

    log = await JournalLog.open(path, kind="log")     # 0700 dir, 0600 file, flock, recovery
    rec = await log.append("step", {"n": 1})           # returns after write + fdatasync
    recs = await log.append_many([("a", {}), ("b", {})])  # one group: one fsync, one await
    for r in log.records(): ...                         # streaming, validated
    await log.close()

    journal = await ExecutionJournal.open(path)         # journal.recovered: unknown receipts;
                                                        # past 64 MiB it continues in a new segment
    registry = ToolRegistry(tools, sink=journal)

    for r in read_records(path): ...                    # lock-free, for inspection
    file_stamp(path)                                    # what a watcher polls (not the size: see preallocate)
"""

from ._execution import DEFAULT_ROTATE_BYTES, ExecutionJournal, recovered_receipt
from ._log import JournalLog, file_stamp, read_records, segment_paths
from ._record import Header, Record
from .errors import (
    JournalClosed,
    JournalCorrupt,
    JournalError,
    JournalFailed,
    JournalLocked,
    JournalMismatch,
    JournalUnsafe,
)

__all__ = [
    "DEFAULT_ROTATE_BYTES",
    "ExecutionJournal",
    "Header",
    "JournalClosed",
    "JournalCorrupt",
    "JournalError",
    "JournalFailed",
    "JournalLocked",
    "JournalLog",
    "JournalMismatch",
    "JournalUnsafe",
    "Record",
    "file_stamp",
    "read_records",
    "recovered_receipt",
    "segment_paths",
]
