"""Writing one blob: stream into a temp file under ``tmp/`` while hashing it.

The temp file belongs to the store's on-disk format (see ``_store.py``): it
lives in ``tmp/``, is flock'ed by its live writer (so another process's
crash recovery leaves it alone), and is fsynced and made read-only before
the store renames it into ``blobs/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from openfunctions.core.files import flock, fsync_dir, open_private, try_flock

from ._fs import FROZEN_MODE, start_writeback, unlink_quiet
from .errors import ArtifactQuotaExceeded, ArtifactRequestInvalid

CHUNK = 1024 * 1024
_WRITE_SLICE = 4 * 1024 * 1024
_PARALLEL_MIN = 256 * 1024


class BlobWriter:
    """Streams content into a temp file under ``tmp/`` while hashing it.

    A large chunk is written (by a helper thread) while this thread hashes
    it: ``os.write`` and ``hashlib`` both release the GIL, so a put costs
    about max(hash, write) instead of their sum. Each chunk is finished on
    both sides before the next one is pulled, so a producer that refills one
    buffer between chunks is safe. Written ranges are handed to the kernel's
    writeback at once, which leaves the final fsync less to wait for.
    """

    def __init__(self, tmp_dir: str, cap: int, lock_path: str | None = None) -> None:
        self.cap = cap
        self.size = 0
        self.hexdigest = ""
        self._h = hashlib.sha256()
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

    def write(self, chunk: Any) -> None:
        view = as_view(chunk)
        total = view.nbytes
        if self.size + total > self.cap:
            raise ArtifactQuotaExceeded(
                f"artifact data is larger than the store's whole quota ({self.cap} bytes); nothing was stored",
                details={"quota_bytes": self.cap},
            )
        if total >= _PARALLEL_MIN:
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
        self.size += total

    def _write_at(self, view: memoryview, offset: int) -> None:
        assert self.fd is not None
        pos = 0
        while pos < view.nbytes:
            n = os.write(self.fd, view[pos : pos + _WRITE_SLICE])
            start_writeback(self.fd, offset + pos, n)
            pos += n

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
        assert self.fd is not None
        os.fsync(self.fd)
        os.fchmod(self.fd, FROZEN_MODE)
        self.hexdigest = self._h.hexdigest()

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


__all__ = ["BlobWriter", "as_view", "file_chunks", "CHUNK"]
