"""The local store: one directory, one journal, state folded in memory.

Why the project's journal and not one file per key replaced atomically: a
journal gives every guarantee the store needs in one place and at the cost
of one ``fdatasync`` shared by all concurrent writers (group commit): a
transaction or a compare-and-set is *one* record, so it is atomic on disk
without a second mechanism; a torn final record is cut on open (after being
saved to ``.broken``), damage anywhere else fails closed; ownership is a
kernel ``flock`` that dies with its process. Atomic replace per key costs
two fsyncs per write (file + directory), cannot make a multi-key
transaction atomic, and puts caller-chosen key text into file names.

On-disk layout (format 1)::

    <data_dir>/store/<name>/            0700
        LOCK                            0600  flock held while the store is open (pid inside, a message only)
        store.journal                   0600  an openfunctions journal (format: core/journal/_encoder.py), kind "store"
        store.journal.lock              the journal's own writer lock

``store.journal`` header ``meta``: ``{"store": <name>, "format": 1, "rev": <int>}``
— ``rev`` is the revision counter's floor (a compacted file starts there, so
versions never go back). Records (``data`` field by field):

- ``put``: ``{"k": key, "v": JSON value, "ver": int, "at": RFC 3339 UTC}``
- ``del``: ``{"k": key, "ver": int, "at": ...}`` (``ver`` is the revision the delete consumed)
- ``txn``: ``{"ops": [put-or-del data with "op": "put"|"del"], "at": ...}`` — one
  transaction, applied whole or (if its line is torn) not at all.

:data:`STORE` is the journal as a core record stream
(``openfunctions.core.records``): its one fold applies a record to the
in-memory state, during recovery and live (live, a write is applied when it
is queued, before it is durable: a value lives in memory once acknowledged,
and reads never return a value whose record is not yet durable — a read
waits for a pending write of its key to be fsynced). Its policy for a record
type it does not know is ``REFUSE``: the store is what its callers read, and
versions are compared by compare-and-set, so a state folded without a newer
writer's record (a value it set, a revision it consumed) is never served.
Such a record, or a record missing a field, fails the open with
``StoreCorrupt`` naming the file and the record.

Compaction (while running, and at open): when the journal holds more than
``compact_min_records`` records (default :data:`COMPACT_MIN_RECORDS`) and
more than ``compact_ratio`` (default 2) records per live key, the store
rewrites it in the background, without stopping reads or writes. It is the
core record stream's background compaction
(``FileRecordLog.compact_background``, documented with its files and steps
at the top of core/records/_file.py), the one compaction every file-backed
stream has:

1. snapshot the live entries (on the event loop, between two calls) and
   start noting every record that goes to the old journal from then on (the
   *tail*);
2. write the snapshot to ``store.journal.compact`` (a complete new journal,
   header meta ``{"store", "format": 1, "rev": <the snapshot's revision>,
   "compacted": true, "whole": true}``), then copy the tail over while it
   grows;
3. switch: new writes wait (reads do not); once the old journal's queued
   appends are durable and closed, the rest of the tail is appended, the new
   file is fsynced, renamed over ``store.journal`` and the directory fsynced;
   the journal is reopened and the waiting writes go to it.

Until the rename the old journal is the whole truth (every acknowledged
write is in it), and the leftover ``.compact`` file is deleted on the next
open; after the rename the new file holds the snapshot and every record
since: it is a complete journal, and holds no record type but ``put``,
``del`` and ``txn`` (the two header flags are all that is new; a reader that
does not know them ignores them, so the format stays 1 both ways). The store
applies a write when it queues it, before handing it to the journal
(``FileRecordLog.write``), so a record may be in both the snapshot and the
tail (applied just before the snapshot and written just after): replaying it
twice is harmless, records carry absolute versions. :meth:`LocalStore.compact`
runs the same on demand and :meth:`LocalStore.stats` reports the counters.
One process owns a store at a time (``StoreLocked`` names the holder; the
``LOCK`` file is held across the compaction's reopen); to share state
between processes or machines use PostgreSQL.
"""

from __future__ import annotations

import asyncio
import bisect
import errno
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio

from openfunctions.core import JournalCorrupt, JournalLocked, JournalUnsafe, utc_timestamp
from openfunctions.core.journal import JournalLog, JournalMismatch, Record
from openfunctions.core.records import Entry as Pending
from openfunctions.core.records import FileRecordLog, RecordStream, StreamRecord, UnknownRecords, drop_unfinished

from ._api import (
    DEFAULT_LIST_LIMIT,
    DEFAULT_MAX_VALUE_BYTES,
    MAX_KEY_BYTES,
    Entry,
    Store,
    Transaction,
    check_key,
    check_list_args,
    check_name,
    check_version,
    encode_value,
    prefix_end,
)
from ._errors import Conflict, StoreClosed, StoreCorrupt, StoreFailed, StoreLocked, StoreUnsafe

FORMAT = 1
JOURNAL_NAME = "store.journal"
COMPACT_MIN_RECORDS = 10_000
COMPACT_RATIO = 2.0
_NOTHING: Mapping[str, Entry] = MappingProxyType({})  # get's hot dict while the store is not fast


def default_data_dir() -> Path:
    """``<cwd>/.data``, resolved now (the caller's cwd at creation, not at first use)."""
    return Path.cwd().resolve() / ".data"


def store_dir(name: str, data_dir: str | os.PathLike[str] | None) -> Path:
    check_name(name)
    base = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
    return base / "store" / name


class _State:
    """The folded state: entries by key, keys sorted, the revision counter."""

    def __init__(self, rev: int = 0) -> None:
        self.data: dict[str, Entry] = {}
        self.keys: list[str] = []  # sorted; maintained by apply (recovery sorts once at the end)
        self.rev = rev
        self.records = 0
        self._bulk = False

    def _set(self, key: str, value: Any, ver: int, at: str) -> None:
        if key not in self.data and not self._bulk:
            bisect.insort(self.keys, key)
        self.data[key] = Entry(key, value, ver, at)
        if ver > self.rev:
            self.rev = ver

    def _del(self, key: str, ver: int) -> None:
        if self.data.pop(key, None) is not None and not self._bulk:
            i = bisect.bisect_left(self.keys, key)
            del self.keys[i]
        if ver > self.rev:
            self.rev = ver


def _key_ver(data: dict[str, Any]) -> tuple[str, int]:
    k, ver = data["k"], data["ver"]
    if type(k) is not str or type(ver) is not int:
        raise TypeError(f"k must be a string and ver an integer, not {type(k).__name__} and {type(ver).__name__}")
    return k, ver


def _apply(state: _State, rec: StreamRecord) -> None:
    """Apply one record to the state: the one fold (:data:`STORE`'s), used live and at recovery."""
    data = rec.data
    at = data.get("at", "")
    if rec.type == "put":
        k, ver = _key_ver(data)
        state._set(k, data["v"], ver, at)
    elif rec.type == "del":
        state._del(*_key_ver(data))
    else:  # "txn": applied whole (its ops are checked before any is applied)
        ops = data["ops"]
        if not isinstance(ops, list) or any(not isinstance(op, dict) or op.get("op") not in ("put", "del")
                                            for op in ops):
            raise ValueError("ops must be a list of {op: put|del, ...}")
        for op in ops:
            _key_ver(op)
            if op["op"] == "put" and "v" not in op:
                raise KeyError("v")
        for op in ops:
            if op["op"] == "put":
                state._set(op["k"], op["v"], op["ver"], at)
            else:
                state._del(op["k"], op["ver"])
    state.records += 1


def _malformed(where: Path | str, rec: StreamRecord, exc: Exception) -> StoreCorrupt:
    why = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    return StoreCorrupt(f"store journal {str(where)!r}: record {rec.seq} ({rec.type!r}) cannot be applied: {why}; "
                        "nothing was changed (move the store directory aside to start empty, or restore a backup)",
                        details={"path": str(where), "seq": rec.seq, "type": rec.type})


def _snapshot(state: _State) -> list[tuple[str, dict[str, Any]]]:
    """The records a compaction writes: one ``put`` per live entry (the revision floor goes in the header)."""
    return [("put", {"k": e.key, "v": e.value, "ver": e.version, "at": e.updated_at}) for e in state.data.values()]


#: The store's journal as a core record stream: its one fold, live and at recovery, and its snapshot, which the
#: core's background compaction writes (module docstring).
STORE: RecordStream[_State] = RecordStream(
    "local store", kind="store", types={"put", "del", "txn"}, new_state=_State, apply=_apply,
    unknown=UnknownRecords.REFUSE, meta={"format": FORMAT}, snapshot=_snapshot, malformed=_malformed)


class _DirLock:
    """flock on ``<dir>/LOCK`` for the life of the store (held across compaction's reopen)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "LOCK"
        self.fd: int | None = None

    def acquire(self, name: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise StoreLocked(
                    f"store {name!r} at {str(self.path.parent)!r} is already open"
                    f"{f' (by pid {raw})' if raw else ''}; one process owns a local store at a time: stop the "
                    "other server or command, or use PostgreSQL (--store postgresql://...) to share one",
                    details={"path": str(self.path.parent), "pid": int(raw) if raw.isdigit() else None},
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the description drops the flock
            self.fd = None


def _ensure_dir(path: Path) -> None:
    """Create the store directory 0700 (parents too) or check it: a real directory we own, not group/other-accessible."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StoreUnsafe(f"store directory {str(path)!r} is not a plain directory (symlink or file)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise StoreUnsafe(f"store directory {str(path)!r} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise StoreUnsafe(
            f"store directory {str(path)!r} has mode {stat.S_IMODE(st.st_mode):04o}; it must not be accessible "
            "to group or others (chmod 700 it)"
        )


def _journal_error(exc: Exception, name: str) -> Exception:
    if isinstance(exc, JournalLocked):
        return StoreLocked(f"store {name!r}: {exc.message}", details=exc.details)
    if isinstance(exc, JournalUnsafe):
        return StoreUnsafe(f"store {name!r}: {exc.message}", details=exc.details)
    if isinstance(exc, (JournalCorrupt, JournalMismatch)):
        return StoreCorrupt(f"store {name!r}: {exc.message}", details=exc.details)
    return exc


class LocalStore(Store):
    backend = "local"

    def __init__(self, name: str, directory: Path, max_value_bytes: int, *,
                 compact_min_records: int = COMPACT_MIN_RECORDS, compact_ratio: float = COMPACT_RATIO) -> None:  # use open_local_store
        if not isinstance(compact_min_records, int) or compact_min_records < 0:
            raise StoreUnsafe(f"compact_min_records must be an integer >= 0, got {compact_min_records!r}")
        if not isinstance(compact_ratio, (int, float)) or not compact_ratio >= 1.0:
            raise StoreUnsafe(f"compact_ratio must be a number >= 1 (records per live key), got {compact_ratio!r}")
        self.name = name
        self.directory = directory
        self._where = str(directory / JOURNAL_NAME)  # what a record the fold refuses is named by
        self.max_value_bytes = max_value_bytes
        self.compact_min_records = compact_min_records
        self.compact_ratio = float(compact_ratio)
        self._state = _State()
        self._log: FileRecordLog[_State] | None = None
        self._lock = _DirLock(directory)
        self._pending: dict[str, asyncio.Task[Any]] = {}
        self._last: asyncio.Task[Any] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._ok = False  # open, not failed
        # get's hot path reads this dict: the folded state while the store is open, not failed and has
        # no write in flight, else an empty dict (so a hit needs no other test; see get)
        self._hot: Mapping[str, Entry] = _NOTHING
        self._compacting: asyncio.Task[None] | None = None
        self.compactions = 0

    def _refresh(self) -> None:
        self._ok = not self._closed and self._log is not None and self._failure is None
        self._hot = self._state.data if self._ok and not self._pending else _NOTHING

    # -- open / recovery ----------------------------------------------------
    @classmethod
    async def open(cls, name: str, data_dir: str | os.PathLike[str] | None = None, *,
                   max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES, compact_min_records: int = COMPACT_MIN_RECORDS,
                   compact_ratio: float = COMPACT_RATIO) -> LocalStore:
        directory = store_dir(name, data_dir)
        self = cls(name, directory, max_value_bytes, compact_min_records=compact_min_records, compact_ratio=compact_ratio)
        await anyio.to_thread.run_sync(self._lock_dir)
        try:
            log, self._state = await anyio.to_thread.run_sync(self._open_log)
            self._log = FileRecordLog(STORE, log, self._state, [])
            hmeta = log.header.meta or {}
            if not isinstance(hmeta.get("format", FORMAT), int) or hmeta.get("format", FORMAT) > FORMAT:
                raise StoreCorrupt(f"store {name!r} was written in format {hmeta.get('format')!r}; this code reads {FORMAT}")
            self._refresh()
            if self._needs_compaction():
                await self._compact()
        except BaseException:
            if self._log is not None:
                await self._log.close()
                self._log = None
            self._refresh()
            self._lock.release()
            raise
        return self

    def _lock_dir(self) -> None:
        _ensure_dir(self.directory)
        self._lock.acquire(self.name)
        drop_unfinished(self.directory / JOURNAL_NAME)  # an unfinished compaction: the old journal is still the whole truth

    def _open_log(self) -> tuple[JournalLog, _State]:
        state = _State()
        state._bulk = True

        def see(rec: Record) -> None:
            STORE.apply(state, rec, self._where)

        meta = {"store": self.name, "format": FORMAT, "rev": 0}
        try:
            log = JournalLog.open_sync(self.directory / JOURNAL_NAME, kind="store", meta=meta,
                                       on_record=see)
        except (JournalLocked, JournalUnsafe, JournalCorrupt, JournalMismatch) as exc:
            raise _journal_error(exc, self.name) from None
        state.rev = max(state.rev, int((log.header.meta or {}).get("rev", 0)))
        state.keys = sorted(state.data)
        state._bulk = False
        return log, state

    def _needs_compaction(self) -> bool:
        st = self._state
        return st.records > self.compact_min_records and st.records > self.compact_ratio * max(1, len(st.data))

    async def _compact(self) -> None:
        """Rewrite the journal with the live entries, while calls go on (see the module docstring)."""
        assert self._log is not None
        self.compactions += 1
        state = self._state
        base_records = state.records
        # The snapshot is taken as this is called (no await before it), at the revision the header keeps.
        try:
            result = await self._log.compact_background(meta={"store": self.name, "format": FORMAT, "rev": state.rev})
        except BaseException as exc:
            if self._log.failed and self._failure is None:
                # the old journal is closed and the new one not open: the files are consistent (the old one
                # until the rename, the new one after) but this process cannot go on writing
                self._failure = exc
            raise
        finally:
            self._refresh()
        state.records = result.written + (state.records - base_records)

    async def _compact_in_background(self) -> None:
        try:
            await self._compact()
        except Exception:
            pass  # a failed background compaction leaves the old journal in use (or the store failed: _failure)
        finally:
            self._compacting = None

    async def compact(self) -> None:
        """Rewrite the journal with only the live entries now (reads and writes go on meanwhile)."""
        self._check()
        while self._compacting is not None:
            await asyncio.wait([self._compacting])
        self._check()
        self._compacting = asyncio.get_running_loop().create_task(self._compact())
        try:
            await asyncio.shield(self._compacting)
        finally:
            self._compacting = None

    def stats(self) -> dict[str, Any]:
        """Counters: live keys, journal records (what compaction compares), compactions run in this process."""
        return {"keys": len(self._state.data), "records": self._state.records, "revision": self._state.rev,
                "compactions": self.compactions, "compacting": self._compacting is not None}

    # -- helpers ------------------------------------------------------------
    def _check(self) -> None:
        if self._closed or self._log is None:
            raise StoreClosed(f"store {self.name!r} is closed")
        if self._failure is not None:
            raise StoreFailed(
                f"store {self.name!r} failed a write earlier ({self._failure}); it refuses calls until reopened",
            )

    async def _wait(self, task: asyncio.Task[Any] | None) -> None:
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: BaseException) -> StoreFailed:
        if self._failure is None:
            self._failure = exc
            self._refresh()
        return StoreFailed(f"store {self.name!r}: the write may or may not be on disk ({type(exc).__name__}: {exc}); "
                           "the store refuses calls until reopened")

    def _append(self, type: str, data: dict[str, Any], keys: list[str]) -> asyncio.Task[Any]:
        """Queue one record (log order = call order: tasks start FIFO), state already applied."""
        task = asyncio.get_running_loop().create_task(self._write(type, data))
        self._last = task
        for k in keys:
            self._pending[k] = task
        self._hot = _NOTHING

        def done(t: asyncio.Task[Any], keys: list[str] = keys) -> None:
            for k in keys:
                if self._pending.get(k) is t:
                    del self._pending[k]
            if not t.cancelled() and t.exception() is not None and self._failure is None:
                self._failure = t.exception()
            if not self._pending:
                self._refresh()

        task.add_done_callback(done)
        if self._compacting is None and self._needs_compaction():
            self._compacting = asyncio.get_running_loop().create_task(self._compact_in_background())
        return task

    async def _write(self, type: str, data: dict[str, Any]) -> Any:
        # During a compaction's switch this waits (waiters wake in FIFO order); during the rest of it the
        # record goes to the old journal and the compaction copies it to the new one.
        if self._log is None:
            raise StoreFailed(f"store {self.name!r} has no open journal")
        return await self._log.write(type, data)

    def _next_ver(self) -> int:
        self._state.rev += 1
        return self._state.rev

    # -- the interface --------------------------------------------------------
    async def get(self, key: str) -> Entry | None:
        # The hot path (bench/bench_store.py): a key found in the state was checked when it was
        # written, so a hit on an open store with no write in flight needs no other test. ``_hot`` is
        # the state then, and an empty dict otherwise: one attribute read and one lookup per hit.
        try:
            e = self._hot.get(key)
        except TypeError:  # unhashable: the checks below say what is wrong with it
            e = None
        if e is not None:
            return e
        if not (type(key) is str and key.isascii() and 0 < len(key) <= MAX_KEY_BYTES and "\x00" not in key):
            check_key(key)
        if not self._ok:
            self._check()
        if self._pending:
            while (t := self._pending.get(key)) is not None:
                await self._wait(t)
                if self._pending.get(key) is t:
                    # done, and its done-callback (which takes it out of _pending) has not run yet:
                    # awaiting a finished task does not yield, so looping again would spin forever
                    break
        return self._state.data.get(key)

    async def put(self, key: str, value: Any) -> Entry:
        check_key(key)
        encode_value(value, key, self.max_value_bytes)
        self._check()
        return await self._put(key, value)

    async def _put(self, key: str, value: Any) -> Entry:
        ver, at = self._next_ver(), utc_timestamp()
        data = {"k": key, "v": value, "ver": ver, "at": at}
        STORE.apply(self._state, Pending("put", data), self._where)
        await self._wait(self._append("put", data, [key]))
        return Entry(key, value, ver, at)

    async def delete(self, key: str) -> bool:
        check_key(key)
        self._check()
        if key not in self._state.data:
            await self._wait(self._pending.get(key))  # a pending delete of this key: report after it is durable
            return False
        await self._delete(key)
        return True

    async def _delete(self, key: str) -> None:
        data = {"k": key, "ver": self._next_ver(), "at": utc_timestamp()}
        STORE.apply(self._state, Pending("del", data), self._where)
        await self._wait(self._append("del", data, [key]))

    def _conflict(self, key: str, expected: int) -> Conflict:
        cur = self._state.data.get(key)
        have = cur.version if cur is not None else 0
        return Conflict(
            f"key {key!r}: expected version {expected}{' (absent)' if expected == 0 else ''}, found {have}"
            f"{' (absent)' if have == 0 else ''}; nothing was written",
            details={"key": key, "expected_version": expected, "version": have},
        )

    async def compare_and_set(self, key: str, expected_version: int, value: Any) -> Entry:
        check_key(key)
        check_version(expected_version)
        encode_value(value, key, self.max_value_bytes)
        self._check()
        # Check and apply without an await in between: the event loop makes this atomic.
        cur = self._state.data.get(key)
        if (cur.version if cur is not None else 0) != expected_version:
            raise self._conflict(key, expected_version)
        return await self._put(key, value)

    async def compare_and_delete(self, key: str, expected_version: int) -> None:
        check_key(key)
        check_version(expected_version)
        self._check()
        cur = self._state.data.get(key)
        if expected_version == 0 or cur is None or cur.version != expected_version:
            raise self._conflict(key, expected_version)
        await self._delete(key)

    async def list(self, prefix: str = "", *, after: str | None = None, limit: int = DEFAULT_LIST_LIMIT,
                   reverse: bool = False) -> list[Entry]:
        prefix, after, limit = check_list_args(prefix, after, limit)
        self._check()
        await self._wait(self._last)  # everything shown is durable
        keys, data = self._state.keys, self._state.data
        lo = bisect.bisect_left(keys, prefix)
        upper = prefix_end(prefix)
        hi = bisect.bisect_left(keys, upper) if upper is not None else len(keys)
        if after is not None:
            if reverse:
                hi = min(hi, bisect.bisect_left(keys, after))
            else:
                lo = max(lo, bisect.bisect_right(keys, after))
        if reverse:
            picked = keys[max(lo, hi - limit):hi][::-1]
        else:
            picked = keys[lo:min(hi, lo + limit)]
        return [data[k] for k in picked]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        self._check()
        tx = _LocalTransaction(self)
        yield tx
        await tx._commit()

    async def flush(self) -> None:
        self._check()
        await self._wait(self._last)

    async def aclose(self) -> None:
        if self._compacting is not None:
            await asyncio.wait([self._compacting])  # it finishes or gives up cleanly either way
        if self._log is None:
            self._closed = True
            self._refresh()
            self._lock.release()
            return
        try:
            if self._last is not None:
                await asyncio.wait([self._last])
            await self._log.close()
        finally:
            self._log = None
            self._closed = True
            self._refresh()
            self._lock.release()

    def __repr__(self) -> str:
        return f"<LocalStore {self.name!r} at {str(self.directory)!r} keys={len(self._state.data)}>"


class _LocalTransaction(Transaction):
    """Optimistic: reads remember versions, writes are buffered; commit checks
    the read versions and appends one ``txn`` record, both without an await
    in between (atomic on the event loop, atomic on disk)."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store
        self._reads: dict[str, int] = {}
        self._writes: dict[str, tuple[str, Any]] = {}

    async def get(self, key: str) -> Entry | None:
        check_key(key)
        if key in self._writes:
            op, value = self._writes[key]
            return Entry(key, value, 0, "") if op == "put" else None
        e = await self._store.get(key)
        self._reads.setdefault(key, e.version if e is not None else 0)
        return e

    async def put(self, key: str, value: Any) -> None:
        check_key(key)
        encode_value(value, key, self._store.max_value_bytes)
        self._writes[key] = ("put", value)

    async def delete(self, key: str) -> None:
        check_key(key)
        self._writes[key] = ("del", None)

    async def _commit(self) -> None:
        s = self._store
        s._check()
        for key, ver in self._reads.items():
            cur = s._state.data.get(key)
            if (cur.version if cur is not None else 0) != ver:
                raise Conflict(
                    f"transaction on store {s.name!r}: key {key!r} changed since it was read "
                    f"(version {ver} -> {cur.version if cur is not None else 0}); nothing was written",
                    details={"key": key},
                )
        ops = []
        for key, (op, value) in self._writes.items():
            if op == "put":
                ops.append({"op": "put", "k": key, "v": value, "ver": s._next_ver()})
            elif key in s._state.data:
                ops.append({"op": "del", "k": key, "ver": s._next_ver()})
        if not ops:
            return
        data = {"ops": ops, "at": utc_timestamp()}
        STORE.apply(s._state, Pending("txn", data), s._where)
        await s._wait(s._append("txn", data, [op["k"] for op in ops]))


async def open_local_store(name: str, data_dir: str | os.PathLike[str] | None = None, *,
                       max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES, compact_min_records: int = COMPACT_MIN_RECORDS,
                       compact_ratio: float = COMPACT_RATIO) -> LocalStore:
    """Open (creating if absent) the local store ``name``.

    Files live in ``<data_dir>/store/<name>/``; ``data_dir`` defaults to
    ``<cwd>/.data``, resolved once, now. Pass the old ``data_dir`` to keep
    using old data: the runtime never copies or merges stores.
    The journal is compacted in the background once it holds more than
    ``compact_min_records`` records and more than ``compact_ratio`` records
    per live key (module docstring: how, and why a crash loses nothing).
    Raises StoreLocked (another process has it open), StoreUnsafe, StoreCorrupt.
    """
    return await LocalStore.open(name, data_dir, max_value_bytes=max_value_bytes,
                                 compact_min_records=compact_min_records, compact_ratio=compact_ratio)


__all__ = ["STORE", "LocalStore", "default_data_dir", "open_local_store", "store_dir"]
