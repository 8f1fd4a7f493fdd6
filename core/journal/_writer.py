"""Group commit: the thread that makes a journal's appended lines durable.

The log (``_log.py``) encodes each record on the event loop and hands the
line to :meth:`GroupWriter.enqueue` together with the appender's future.
One writer thread per open log then repeats, for as long as there is work:

1. take **everything** queued so far (under ``_mu``) — the open batch is
   closed to new lines at that moment;
2. one ``write`` of those lines, one ``fdatasync`` (:meth:`GroupWriter._write`:
   at most ``TORN_WRITE_MAX`` bytes per fsync; into reserved room when the
   log reserves it);
3. record the new durable seq/size, and wake each batch's appenders on
   their event loop (``call_soon_threadsafe``).

The hand-over is cheap on purpose (it runs on the event loop for every
append): the thread blocks on ``_wake``, a plain ``threading.Lock`` used as
a binary semaphore (acquire and release happen in C, the wait with the GIL
released), and an append releases it only when the thread said it is idle
(``_idle``); a thread mid-write looks at the queue anyway when its fsync
returns, so most appends under load signal nothing. ``drain`` keeps a
``threading.Condition`` on the same lock (off the hot path: notified only
while someone drains). The way back is one ``call_soon_threadsafe`` per
batch (one per event loop in a take).

Why a thread of its own rather than ``run_in_executor`` per batch: the
thread takes the next batch the moment an fsync returns, without a round
trip through the event loop, so appenders woken by one batch encode their
next records while the following batch is being synced (the disk and the
CPU overlap, as far as the GIL lets the thread in). Order: one thread,
batches in queue order, lines in seq order, so the file order is seq order.

**On the loop** (``enqueue(on_loop=True)``, the log decides: ``JournalLog.sync_on_loop``):
the writer thread is not used at all. The append that opens a batch (the
first after the previous flush) schedules one
:meth:`GroupWriter._flush_on_loop` with ``call_soon``; it runs at the start of the next iteration and writes and
syncs, on the loop's own thread, everything appended meanwhile (one
``write``, one ``fdatasync``), then resolves the futures directly; while
other callbacks are ready it first steps behind them, at most
``FLUSH_DEFERRALS`` times and for at most ``FLUSH_DEFER_BUDGET_S`` (2 ms) since the batch opened, so they can join the batch (whether any are
ready is asyncio-private: :func:`callbacks_ready` is the one place that asks). So a batch is what
one to five iterations appended, and the loop is blocked for the fsync. Why: under many clients, a writer thread waiting for the GIL is woken
by every GIL release of the busy loop thread (each ``send``, ``recv``,
``epoll_wait``) and loses the race each time; measured at 200 HTTP clients,
4.5 futex calls and 2.2 context switches per call, against 0 and 0.03
without a journal, and ~300 µs more loop CPU per call. Redis's
``appendfsync always`` flushes the same way, before its loop sleeps.
``drain`` hands lines still waiting for a loop flush to the thread.

Invariants:

- a future is resolved only after its line was written *and* synced;
- **fail-stop** ("fsyncgate"): after a failed write or fsync the kernel may
  have dropped the dirty pages and a retry could acknowledge lost data, so
  the writer never retries: every queued appender gets
  :class:`JournalFailed`, and so does every later ``enqueue``, until the
  journal is closed and reopened (which re-validates the file);
- the thread holds no reference to the log that owns it, so a log dropped
  without ``close()`` can still be collected (its ``__del__`` stops us);
- an idle thread exits after ``IDLE_EXIT`` seconds; the next enqueue starts
  a new one (many attempt journals may be open, most of them idle).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import structlog

from ..errors import JournalFailed
from ._fsutil import FileOps
from ._record import TORN_WRITE_MAX
from .errors import JournalClosed

log = structlog.get_logger("openfunctions.journal")

# Reserved room (a writer opened with ``reserved``): how far past the data the file is kept, growing with it.
# An fdatasync after a write into room already reserved commits no size change, which is most of an appending
# fdatasync's cost on ext4 (docs/formats/journal.md, "Reserved room"); room is reserved again, at most
# RESERVE_MAX bytes at a time, whenever a write would reach its end.
RESERVE_MIN = 64 * 1024
RESERVE_MAX = 4 << 20
RESERVE_ALIGN = 4096
# Seconds an idle writer thread waits for work before exiting.
IDLE_EXIT = 2.0
# On the loop: how many times a flush steps behind other ready callbacks before it writes anyway,
# and for how long at most (seconds since the batch opened): the bound on what batching may add to a
# call's latency, as PostgreSQL's commit_delay bounds its group commit.
FLUSH_DEFERRALS = 4
FLUSH_DEFER_BUDGET_S = 0.002


def callbacks_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` has callbacks due to run now, other than the one running.

    The only place the journal reads asyncio's internals: ``_ready`` is the
    deque of handles ``BaseEventLoop`` runs in its next pass, and asyncio has
    no public way to ask whether it is empty. A loop flush uses the answer to
    step behind callbacks that may append (so they share its fsync; measured a
    win, see :meth:`GroupWriter._flush_on_loop`). A loop without ``_ready``
    (uvloop, or a later asyncio that renames it) answers ``False``: the flush
    then writes at once, in the iteration after the first append, which is
    correct, only less batched.
    """
    ready = getattr(loop, "_ready", None)
    return bool(ready)


class _Batch:
    """Lines that share one write + one fdatasync, and their appenders' futures.

    ``lines`` and ``waiters`` are filled under the writer's lock; after the
    writer took the batch only the batch's event loop touches ``waiters``.
    """

    __slots__ = ("lines", "last_seq", "waiters", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.lines: list[bytes] = []
        self.last_seq = 0
        # One future per appender: cancelling one caller cancels only its own.
        self.waiters: list[asyncio.Future[None]] = []
        self.loop = loop

    def resolve(self, error: Callable[[], BaseException] | None) -> None:
        """On the batch's loop: wake every appender still waiting, with success
        or with its own exception from ``error()`` (tasks must not share one
        exception object: each raise rewrites its traceback)."""
        for f in self.waiters:
            if not f.done():
                if error is None:
                    f.set_result(None)
                else:
                    f.set_exception(error())


def _wake(
    batches: list[_Batch], error: Callable[[], BaseException] | None, here: asyncio.AbstractEventLoop | None = None,
) -> None:
    """Resolve each batch's futures on its own loop: at once for ``here`` (the running loop), else through
    ``call_soon_threadsafe``."""
    for b in batches:
        if b.loop is here:
            b.resolve(error)
            continue
        try:
            b.loop.call_soon_threadsafe(b.resolve, error)
        except RuntimeError:
            pass  # that loop is closed: nobody is left waiting


class GroupWriter:
    """The durable half of a journal: queue, writer thread, durable position."""

    def __init__(
        self, fd: int, ops: FileOps, path: str, durable_seq: int, durable_size: int, *, reserved: int | None = None,
    ) -> None:
        """``reserved``: the file's size, for a writer that reserves room ahead of its records (the file is
        then open without ``O_APPEND``, positioned at ``durable_size``); ``None``: it appends."""
        self._fd = fd
        #: whether this writer reserves room (the file may be longer than its data; close cuts it)
        self.reserves = reserved is not None
        self._reserved = reserved  # where the reserved room ends (the file's size); None once not reserving
        self._ops = ops
        self._path = path
        # Everything below is shared with the thread and guarded by _mu.
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)  # drain() waits on it for progress (notified while _draining)
        # The thread blocks on _wake for work: released (once) only by _signal, only while _idle.
        self._wake = threading.Lock()
        self._wake.acquire()
        self._idle = False  # the thread is blocked (or about to block) on _wake
        self._batch: _Batch | None = None  # the open batch (the newest in _queue)
        self._queue: list[_Batch] = []
        self._thread: threading.Thread | None = None
        self._writing = False
        self._stopping = False
        self._draining = 0
        self._on_exit: Callable[[], None] | None = None  # set by abandon()
        self.failure: BaseException | None = None
        self.durable_seq = durable_seq
        self.durable_size = durable_size

    def failed_error(self) -> JournalFailed:
        return JournalFailed(
            f"journal {self._path!r} refuses writes after a failed write/fsync ({self.failure}); "
            "close and reopen it to recover",
            details={"path": self._path, "cause": str(self.failure)},
        )

    def enqueue(
        self, lines: list[bytes], last_seq: int, waiter: asyncio.Future[None], loop: asyncio.AbstractEventLoop,
        *, on_loop: bool = False,
    ) -> None:
        """Queue ``lines`` (records up to ``last_seq``, in order); ``waiter``
        (a future of ``loop``) resolves once all of them are durable.

        With ``on_loop`` (the caller runs on ``loop``) the thread is not told
        either: an append that opens a new batch for ``loop`` schedules one
        :meth:`_flush_on_loop` on it, which writes and syncs everything
        queued by then (see "On the loop" in the module doc).

        Raises JournalFailed if the writer has failed: checked under the
        lock, so no line is ever queued behind a failure.
        """
        with self._mu:
            if self.failure is not None:
                raise self.failed_error()
            batch = self._batch
            if batch is None or batch.loop is not loop:
                # A batch's futures belong to one loop; an append from another
                # loop opens a new batch behind this one (order is kept).
                batch = self._batch = _Batch(loop)
                self._queue.append(batch)
                kick = True
            else:
                kick = False
            batch.lines += lines
            batch.last_seq = last_seq
            batch.waiters.append(waiter)
            if on_loop:
                if kick:  # a new batch for this loop: its flush. (A flag per writer would hang a second loop
                    # for good once the first one closed with its flush still scheduled.)
                    loop.call_soon(self._flush_on_loop, loop, 0, loop.time())
            elif kick:
                self._kick()

    def _kick(self) -> None:
        """Under ``_mu``: make sure a thread is running and sees the queue."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"journal-writer:{self._path.rsplit('/', 1)[-1]}", daemon=True
            )
            self._thread.start()
        else:
            self._signal()

    def _signal(self) -> None:
        """Under ``_mu``: wake the thread if it is idle (one release per idle
        spell: ``_wake`` is never released twice without an acquire). A busy
        thread re-reads the state before it blocks again, so it needs no signal."""
        if self._idle:
            self._idle = False
            self._wake.release()

    def _progress(self) -> None:
        """Under ``_mu``: tell ``drain`` (if anyone drains) that the state moved."""
        if self._draining:
            self._cv.notify_all()

    def _flush_on_loop(self, loop: asyncio.AbstractEventLoop, deferred: int = 0, opened: float = 0.0) -> None:
        """On ``loop``, the iteration after an ``on_loop`` append: write and
        sync everything queued, then wake the appenders. Fail-stop as on the
        thread; a failure is told to the appenders, not raised (this runs as
        a bare loop callback). If the thread is writing (a ``drain`` started
        it), the thread takes the queue after its write instead.

        While other callbacks are ready to run, the flush steps behind them,
        up to ``FLUSH_DEFERRALS`` times (an iteration each), so that what they
        append shares this fsync: an ``fdatasync`` costs the loop's thread
        ~160 µs of CPU here, and at 50 HTTP clients this cut the fsyncs per
        call from 0.35 to 0.10 and the loop's CPU per call by ~45 µs. It
        stops stepping back once ``FLUSH_DEFER_BUDGET_S`` has passed since the
        batch opened: when an iteration is long (a burst of lockstep clients
        parsed in one pass), every step behind it made each call of the burst
        wait for the whole burst again, before its handler and before its
        reply (100 HTTP clients of a tool that waits 200 ms: 0.81-0.90x the
        SDK's calls/s with four unbounded steps, 0.92-0.95x with the budget;
        docs/PERFORMANCE.md, scoped write barriers)."""
        if deferred < FLUSH_DEFERRALS and loop.time() - opened < FLUSH_DEFER_BUDGET_S and callbacks_ready(loop):
            loop.call_soon(self._flush_on_loop, loop, deferred + 1, opened)
            return
        with self._mu:
            if self.failure is not None or self._stopping or not self._queue:
                return
            if self._writing:
                self._kick()
                return
            batches, self._queue, self._batch = self._queue, [], None
            self._writing = True
        try:
            size = self._write(batches)
        except BaseException as exc:
            failed = self._fail(exc, batches)
            _wake(failed, self.failed_error, here=loop)
            self._log_failure()
            if not isinstance(exc, Exception):
                raise
            return
        self._synced(size, batches[-1].last_seq)
        _wake(batches, None, here=loop)

    def _write(self, batches: list[_Batch]) -> int:
        """Write the lines of ``batches`` at the end of the data and sync them; returns how many bytes.

        By whoever writes (``_writing`` set, so nothing else moves ``durable_size`` meanwhile). Never more
        than :data:`TORN_WRITE_MAX` bytes between two fsyncs (a longer line goes alone): recovery tells a torn
        last write from damage by that bound (``_decoder.py``)."""
        lines = [line for b in batches for line in b.lines]
        data = b"".join(lines)
        start = self.durable_size
        if len(data) <= TORN_WRITE_MAX:
            self._put(data, start)
            self._ops.sync(self._fd)
            return len(data)
        at, size = start, 0
        chunk: list[bytes] = []
        for line in lines:
            if chunk and size + len(line) > TORN_WRITE_MAX:
                self._put(b"".join(chunk), at)
                self._ops.sync(self._fd)
                at, size = at + size, 0
                chunk = []
            chunk.append(line)
            size += len(line)
        self._put(b"".join(chunk), at)
        self._ops.sync(self._fd)
        return at + size - start

    def _put(self, data: bytes, at: int) -> None:
        """Write ``data`` at offset ``at`` (the fd's position: writes are sequential), first reserving room
        past it if this writer reserves: the file must still end in reserved room after the write, which is
        how recovery knows a hole inside the data may be a torn write rather than damage."""
        if self._reserved is not None and at + len(data) >= self._reserved:
            self._reserve(at + len(data))
        self._ops.write_all(self._fd, data)

    def _reserve(self, end: int) -> None:
        """Grow the reserved room to past ``end``: by as much as the data already holds, at least
        ``RESERVE_MIN``, at most ``RESERVE_MAX``. If the file system refuses, stop reserving (append from
        here on: correct, only each fsync commits a size change again)."""
        assert self._reserved is not None
        target = end + min(max(end, RESERVE_MIN), RESERVE_MAX)
        target += -target % RESERVE_ALIGN
        try:
            self._ops.reserve(self._fd, self._reserved, target - self._reserved)
        except OSError as exc:
            self._reserved = None
            log.info("journal_reserve_off", path=self._path, error=str(exc))
            return
        self._reserved = target

    def _synced(self, size: int, last_seq: int) -> None:
        """After a loop flush's write + sync: move the durable position."""
        with self._mu:
            self.durable_size += size
            self.durable_seq = last_seq
            self._writing = False
            if self._queue:
                self._signal()  # lines queued meanwhile waited for this write: an idle thread takes them now
            self._progress()

    def _fail(self, exc: BaseException, batches: list[_Batch], *, on_thread: bool = False) -> list[_Batch]:
        """Enter fail-stop after ``exc`` from a write or sync of ``batches``
        (``_writing`` set); returns them and everything queued behind them,
        whose appenders must all be told (nothing of it is durable)."""
        with self._mu:
            self.failure = exc if isinstance(exc, Exception) else OSError(f"write interrupted: {exc!r}")
            failed = batches + self._queue
            self._queue, self._batch = [], None
            self._writing = False
            if on_thread:
                self._exit()
            else:
                self._signal()  # an idle thread sees the failure state (and exits after IDLE_EXIT)
                self._cv.notify_all()
        return failed

    def _log_failure(self) -> None:
        """Log the fail-stop, after the appenders were told: the log line is a courtesy, their
        ``JournalFailed`` is the report. A log that cannot write (structlog's ``PrintLogger`` raises on a
        closed stream) must not leave an appender waiting forever or kill the writer thread."""
        try:
            log.error("journal_failed", path=self._path, error=str(self.failure))
        except Exception:
            pass

    def busy(self) -> bool:
        with self._mu:
            return bool(self._queue) or self._writing

    def drain(self) -> None:
        """Block until nothing is queued or in flight (or the writer failed)."""
        with self._mu:
            if self._queue and not self._writing:
                self._kick()  # lines queued for a loop flush (on_loop) that has not run: the thread takes them
            self._draining += 1
            try:
                while (self._queue or self._writing) and self._thread is not None:
                    self._cv.wait()
            finally:
                self._draining -= 1

    def stop(self) -> None:
        """Drop what is queued (as a crash would), finish an in-flight write, end the thread.

        The dropped records' appenders get :class:`JournalClosed` (never
        left waiting). Not for the writer thread itself: see :meth:`abandon`.
        """
        with self._mu:
            self._stopping = True
            dropped, self._queue, self._batch = self._queue, [], None
            thread = self._thread
            self._signal()
            self._cv.notify_all()
        if dropped:
            _wake(dropped, self._closed_error)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def on_writer_thread(self) -> bool:
        return self._thread is threading.current_thread()

    def abandon(self, on_exit: Callable[[], None]) -> None:
        """From the writer thread itself (a dropped log collected there): stop
        without taking the lock — the thread may hold it right now — and let
        the thread run ``on_exit`` (close the fd, release the flock) once it
        has finished what it is writing."""
        self._on_exit = on_exit
        self._stopping = True

    def _closed_error(self) -> JournalClosed:
        return JournalClosed(
            f"journal {self._path!r} was closed before this record was written", details={"path": self._path}
        )

    def _run(self) -> None:
        try:
            self._loop_batches()
        finally:
            on_exit = self._on_exit
            if on_exit is not None:
                on_exit()

    def _loop_batches(self) -> None:
        mu = self._mu
        while True:
            with mu:
                if self._stopping:
                    self._exit()
                    return
                if self._queue and not self._writing:  # not behind a loop flush's write
                    batches, self._queue, self._batch = self._queue, [], None
                    self._writing = True
                else:
                    self._idle = True
                    batches = None
            if batches is None:
                if self._wake.acquire(timeout=IDLE_EXIT):
                    continue
                with mu:
                    if not self._idle:  # signalled just after the timeout: consume that release, look again
                        self._wake.acquire(blocking=False)
                        continue
                    if self._queue or self._writing:  # a loop flush is writing: not idle, wait on
                        continue
                    self._idle = False
                    self._exit()
                    return
            try:
                size = self._write(batches)
            except BaseException as exc:
                _wake(self._fail(exc, batches, on_thread=True), self.failed_error)
                self._log_failure()
                if not isinstance(exc, Exception):
                    raise
                return
            with mu:
                self.durable_size += size
                self.durable_seq = batches[-1].last_seq
                self._writing = False
                self._progress()
            _wake(batches, None)

    def _exit(self) -> None:
        """Under ``_mu``, on the thread: it is gone; the next ``_kick`` starts a new one."""
        self._thread = None
        if self._idle:  # stopped while idle: a pending release (from _signal) is nobody's now
            self._idle = False
        self._wake.acquire(blocking=False)  # leave _wake held (consumed) for the next thread
        self._cv.notify_all()

__all__ = ["GroupWriter", "IDLE_EXIT", "FLUSH_DEFERRALS", "RESERVE_MAX", "RESERVE_MIN", "callbacks_ready"]
