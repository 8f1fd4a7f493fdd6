"""Taking one blob's bytes, the same way in every backend: dispatch, cap, hashing, off the event loop.

:func:`put_source` classifies ``put()``'s data; :class:`BlobSink` refuses a
stream past the cap and hashes; :class:`BlobWriter` streams into a temp file
under ``tmp/`` (the file store), :class:`MemoryBlob` keeps the bytes for a
database row (:func:`collect_blob`, the PostgreSQL store). The temp file belongs to the store's on-disk format (see ``_store.py``): it
lives in ``tmp/``, is flock'ed by its live writer (so another process's
crash recovery leaves it alone), and is fsynced and made read-only before
the store renames it into ``blobs/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio.to_thread

from openfunctions.core.files import flock, fsync_dir, open_private, try_flock

from ._fs import FROZEN_MODE, start_writeback, unlink_quiet
from .errors import ArtifactQuotaExceeded, ArtifactRequestInvalid

CHUNK = 1024 * 1024
_WRITE_SLICE = 4 * 1024 * 1024
_PARALLEL_MIN = 256 * 1024


class BlobSink:
    """What every backend does with ``put()``'s bytes: refuse a stream past the cap at once, hash, keep.

    :meth:`write_many` gathers small chunks into 1 MiB buffers (copying, which
    also makes a producer that refills one buffer safe); :meth:`_keep` is where
    a backend puts a checked, counted chunk (:class:`BlobWriter`: a temp file;
    :class:`MemoryBlob`: memory, for a database row). Blocking: run it in a
    worker thread (:func:`fill_async` and the stores do).
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.hexdigest = ""
        self._h = hashlib.sha256()

    def write(self, chunk: Any) -> None:
        view = as_view(chunk)
        if self.size + view.nbytes > self.cap:
            raise ArtifactQuotaExceeded(
                f"artifact data is larger than the store's whole quota ({self.cap} bytes); nothing was stored",
                details={"quota_bytes": self.cap},
            )
        self._keep(view)
        self.size += view.nbytes

    def _keep(self, view: memoryview) -> None:
        self._h.update(view)

    def write_many(self, chunks: Iterable[Any]) -> None:
        """Write a stream, gathering small chunks into 1 MiB buffers.

        Gathering copies, which also makes a producer that refills one buffer
        safe; it pays for itself because a large buffer is hashed and written
        in parallel. A stream past the cap is refused at once, not after the
        next megabyte.
        """
        acc = bytearray()
        for chunk in chunks:
            view = as_view(chunk)
            if view.nbytes >= _PARALLEL_MIN:
                if acc:
                    self.write(acc)
                    acc = bytearray()
                self.write(view)
                continue
            acc += view
            if len(acc) >= CHUNK or self.size + len(acc) > self.cap:
                self.write(acc)
                acc = bytearray()
        if acc:
            self.write(acc)

    def finish(self) -> None:
        self.hexdigest = self._h.hexdigest()


class MemoryBlob(BlobSink):
    """The bytes of one ``put()`` in memory (checked against the cap, hashed): for a backend that stores a row."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self._parts: list[bytes] = []

    def _keep(self, view: memoryview) -> None:
        self._h.update(view)
        self._parts.append(bytes(view))

    @property
    def content(self) -> bytes:
        return b"".join(self._parts)


class BlobWriter(BlobSink):
    """Streams content into a temp file under ``tmp/`` while hashing it.

    A large chunk is written (by a helper thread) while this thread hashes
    it: ``os.write`` and ``hashlib`` both release the GIL, so a put costs
    about max(hash, write) instead of their sum. Each chunk is finished on
    both sides before the next one is pulled, so a producer that refills one
    buffer between chunks is safe. Written ranges are handed to the kernel's
    writeback at once, which leaves the final fsync less to wait for.
    """

    def __init__(self, tmp_dir: str, cap: int, lock_path: str | None = None) -> None:
        super().__init__(cap)
        self._pool: ThreadPoolExecutor | None = None
        self.path = os.path.join(tmp_dir, f"blob-{os.getpid()}-{os.urandom(8).hex()}")
        # The flock on the temp file tells another process's recovery "live
        # writer, keep it". Recovery runs under an exclusive lock on ``lock``;
        # a shared lock (on a descriptor of our own) around create+flock keeps
        # it from seeing the file in between.
        with flock(lock_path, shared=True, create=False) if lock_path else contextlib.nullcontext():
            self.fd: int | None = open_private(self.path, os.O_WRONLY | os.O_EXCL, create=True)
            if not try_flock(self.fd):  # a fresh O_EXCL name: nobody else can hold it
                os.close(self.fd)
                raise AssertionError(f"new temp file {self.path!r} is already locked")

    def _keep(self, view: memoryview) -> None:
        if view.nbytes >= _PARALLEL_MIN:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="artifact-blob-write")
            pending = self._pool.submit(self._write_at, view, self.size)
            try:
                self._h.update(view)
            finally:
                pending.result()  # joins the writer before any error propagates
        else:
            self._h.update(view)
            self._write_at(view, self.size)

    def _write_at(self, view: memoryview, offset: int) -> None:
        assert self.fd is not None
        pos = 0
        while pos < view.nbytes:
            n = os.write(self.fd, view[pos : pos + _WRITE_SLICE])
            start_writeback(self.fd, offset + pos, n)
            pos += n

    def finish(self) -> None:
        assert self.fd is not None
        os.fsync(self.fd)
        os.fchmod(self.fd, FROZEN_MODE)
        super().finish()

    def install(self, dest: str) -> None:
        os.rename(self.path, dest)
        self.path = ""
        fsync_dir(os.path.dirname(dest))

    def discard(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.path:
            unlink_quiet(self.path)
            self.path = ""


def put_source(data: Any) -> tuple[bool, Any]:
    """``put()``'s ``data`` as chunks: ``(False, iterable of bytes-like)`` or ``(True, async iterable)``.

    The one dispatch every backend uses: bytes-like, a binary file (``read(n)``),
    an iterable or an async iterable of bytes-like chunks; anything else (a
    ``str`` first of all) is an :class:`ArtifactRequestInvalid` naming it.
    """
    if isinstance(data, str):
        raise ArtifactRequestInvalid("put() takes bytes, not str: encode the text first (e.g. text.encode('utf-8'))")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return False, [as_view(data)]
    if hasattr(data, "__aiter__"):
        return True, data
    if callable(getattr(data, "read", None)):
        return False, file_chunks(data)
    if isinstance(data, Iterable):
        return False, data
    raise ArtifactRequestInvalid(
        f"put() takes bytes, an iterable or async iterable of bytes, or a binary file; got {type(data).__name__}"
    )


async def fill_async(sink: BlobSink, chunks: AsyncIterable[Any]) -> None:
    """Write an async stream into ``sink``, 1 MiB at a time, each write (hash, disk) in a worker thread.

    Each chunk is copied as it arrives: an async producer may refill one
    buffer between yields, so a view kept until the next write could change.
    """
    acc = bytearray()
    async for chunk in chunks:
        acc += as_view(chunk)
        if len(acc) >= CHUNK or sink.size + len(acc) > sink.cap:
            await anyio.to_thread.run_sync(sink.write_many, [acc])
            acc = bytearray()
    await anyio.to_thread.run_sync(sink.write_many, [acc])


async def collect_blob(data: Any, cap: int) -> MemoryBlob:
    """All of ``put()``'s ``data`` in memory, hashed in a worker thread, refused past ``cap`` bytes at once.

    For a backend that stores the bytes as a row (the PostgreSQL store); the
    file store streams into a :class:`BlobWriter` with the same dispatch.
    """
    is_async, chunks = put_source(data)
    blob = MemoryBlob(cap)
    if is_async:
        await fill_async(blob, chunks)
    else:
        await anyio.to_thread.run_sync(blob.write_many, chunks)
    blob.finish()
    return blob


def as_view(chunk: Any) -> memoryview:
    if isinstance(chunk, (bytes, bytearray, memoryview)):
        try:
            return memoryview(chunk).cast("B")
        except TypeError as exc:  # e.g. a non-contiguous memoryview
            raise ArtifactRequestInvalid(f"artifact data must be a contiguous buffer: {exc}") from None
    raise ArtifactRequestInvalid(f"artifact data chunks must be bytes-like, got {type(chunk).__name__}")


def file_chunks(f: Any) -> Iterable[Any]:
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return
        if isinstance(chunk, str):
            raise ArtifactRequestInvalid("put() got a text-mode file: open it in binary mode ('rb')")
        yield chunk


__all__ = ["BlobSink", "BlobWriter", "CHUNK", "MemoryBlob", "as_view", "collect_blob", "file_chunks", "fill_async",
           "put_source"]
