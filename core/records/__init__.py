"""openfunctions.core.records: durable state as a record stream with one fold.

Every durable state of the project that is "an append-only stream of records, folded into
state" is defined once as a :class:`RecordStream` (its record types, its one ``apply``, its
policy for a record type it does not know) and stored by a backend that folds through that
same ``apply`` live and at replay:

- :class:`FileRecordLog` / :func:`replay`: a core journal file (``JournalLog``) and its
  segments; compaction rotates, writes the snapshot and a ``compacted`` record in one fsync.
- :class:`TableRecordLog` over a :class:`RecordTable`: rows of a shared database table (the
  PostgreSQL side lives with its domain; core defines only the protocol).

Usage::

    def apply(state, rec):                     # the one fold: live and at replay
        state[rec.data["k"]] = rec.data["v"]

    values = RecordStream("values", kind="values", types={"set"}, new_state=dict, apply=apply,
                          unknown=UnknownRecords.KEEP,
                          snapshot=lambda s: [("set", {"k": k, "v": v}) for k, v in s.items()])
    stream = await FileRecordLog.open(values, path)
    await stream.append("set", {"k": "a", "v": 1})   # durable, then folded into stream.state
    await stream.compact()                            # snapshot + compacted record, one fsync
    await stream.close()
    assert replay(values, path).state == {"a": 1}

docs/ARCHITECTURE.md ("Durable state") lists every stream and its backend.
"""

from ._file import FileRecordLog, Replay, drop_unfinished, replay
from ._stream import (
    COMPACTED,
    Compaction,
    Entry,
    Pair,
    RecordMalformed,
    RecordStream,
    RecordStreamError,
    StreamRecord,
    UnknownRecords,
    UnknownRecordType,
    entries,
)
from ._table import RecordTable, TableRecordLog

__all__ = [
    "COMPACTED", "Compaction", "Entry", "FileRecordLog", "Pair", "RecordMalformed", "RecordStream",
    "RecordStreamError", "RecordTable", "Replay", "StreamRecord", "TableRecordLog", "UnknownRecordType",
    "UnknownRecords", "drop_unfinished", "entries", "replay",
]
