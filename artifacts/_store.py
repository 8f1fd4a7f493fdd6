"""The artifact store: immutable, content-addressed blobs behind opaque ids.

On-disk format, version 1 (written once, here; docs/formats/artifacts.md
shows how to use the store and points here for the bytes)
=========================================================================

## Directory layout

```
<root>/                  0700  the store
  store.json             0400  {"format": "openfunctions-artifact-store", "v": 1, "created_at": "<UTC ISO-8601>"}
  lock                   0600  flock(2) target for commits; first 16 bytes: the usage ledger
  blobs/<hex>            0400  content, named by the SHA-256 hex of its bytes (one per distinct content)
  index/art_<id>.json    0400  one index record per artifact
  keys/<hex>.json        0400  reuse lookup (scope, digest, media type) -> artifact id
  tmp/                   0700  blobs being written, each flock'ed by its live writer
```

A root that exists, is non-empty and has no `store.json` is refused (so a
mistyped `--data-dir` never has its files garbage-collected). An existing
directory that is a symlink, another user's, or accessible to group or others
is refused (`core.files.ensure_private_dir`, the one policy of every package;
the message says `chmod 700` it), never silently tightened.

### Index record (`index/art_<id>.json`, canonical JSON, UTF-8)

| field | type | meaning |
|---|---|---|
| `v` | int | format version, `1` |
| `artifact_id` | string | `art_` + 32 lowercase hex (128 random bits); must equal the file name |
| `sha256` | string | `sha256:<64 hex>` of the content |
| `size` | int | content length in bytes |
| `media_type` | string | `type/subtype[; param=value]`, at most 255 characters |
| `scope` | string or null | owner scope (attempt id, preview id, …), at most 1024 characters |
| `created_at` | string | UTC ISO-8601 with microseconds and `Z` |
| `check` | string | `sha256:<hex>` of the canonical JSON of all other fields |

A record whose `check` does not match, or that names another id, is
`ArtifactCorrupt`.

### Reuse key (`keys/<hex>.json`)

Name: SHA-256 hex of the canonical JSON of
`{"media_type": …, "scope": …, "sha256": "sha256:<hex>"}`. Content:
`{"artifact_id": "art_…", "v": 1}`. Written atomically but without fsync:
it is a lookup that opening the store rebuilds from the index when missing or
unreadable. A key is trusted only if the record it names has the same scope,
digest and media type.

### Usage ledger (bytes 0–15 of `lock`)

`struct "<4sIQ"`: magic `b"OFAU"`, version `1`, bytes used = the sum of the
sizes of the distinct blobs. Read and written only under the lock. Not
fsynced: after a machine crash every process restarts and the next open
recomputes it.

## Write order of a put

1. Outside the lock: stream into `tmp/blob-<pid>-<random>` while hashing
   (each chunk of 256 KiB or more is written by a helper thread while the
   calling thread hashes it, and its range is handed to kernel writeback at
   once), fsync, chmod 0400. A stream longer than the whole quota is
   stopped at the first chunk past it.
2. Under the thread lock and `flock(lock)`:
   - if `keys/` names a matching artifact, reuse it (and if its blob fails
     verification, replace the blob with the fresh copy: the store heals);
   - else, if the blob is absent: check `used + size <= quota` (else
     `ArtifactQuotaExceeded`), write the ledger, rename the temp file to
     `blobs/<hex>`, fsync `blobs/`;
   - write the index record (temp, fsync, rename, fsync `index/`), then the
     key file.

`put` returns only after the blob and the record are durable.

## Recovery (every open, under the lock)

- rebuild the ledger from the valid index records (distinct digests);
- delete blobs no valid record references (a crash between the blob rename
  and the record) — unless some record is damaged, in which case unknown
  blobs are kept and counted;
- delete `.tmp-*` (`core.files.TEMP_PREFIX`) files in `index/` and `keys/` (those writes hold the lock,
  so their writer is dead) and files in `tmp/` whose flock can be taken
  (their writer is dead);
- rewrite missing or unreadable key files.

## Guarantees and limits

- **Quota, several processes.** Commits are serialized by a thread lock and
  `flock` on one file and check the ledger inside the lock, so concurrent
  puts from tasks, threads or processes on one store never take the stored
  distinct bytes past the quota (tested with three real processes). Only blob
  bytes count: index files, keys and directories do not; content stored again
  (any scope) costs nothing. A crash can leave the ledger counting an orphan
  blob until the next open: the error is always on the safe side.
- **Verification.** Before the first byte of a blob is returned, the whole
  blob is hashed and compared with its digest. The result is cached per
  process by file identity (device, inode, size, mtime_ns, ctime_ns); any
  rewrite, replacement, chmod or touch changes the identity and forces a new
  check. On kernels with coarse timestamps, a same-size rewrite within one
  timestamp tick of the previous check could go unnoticed by that process
  (Linux 6.13+ gives fine-grained timestamps to files whose times were just
  read, which the check does).
- **Ids.** A caller's id reaches a path only after matching
  `art_[0-9a-f]{32}` exactly; files are opened with `O_NOFOLLOW`. Refused and
  unknown ids give byte-identical errors.
- **No deletion yet.** Artifacts are immutable and there is no delete or GC
  API in v1; a full store refuses new content (projection then reports
  `available: false`). Use one store per purpose (the work controller has its
  own under `work/artifacts/`).
- `close()` only while no operation is running.
- **Filesystem.** The guarantees assume one local POSIX filesystem
  (`flock`, atomic `rename`, `fsync`); a store on a network filesystem is
  not supported.
- **Other backends.** The read tool and `project_reply` depend only on
  `ArtifactStoreProtocol` (`put`, `stat`, `read`, `usage`); a backend on a
  shared engine that keeps the guarantees above can replace the file store.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import AsyncIterable, Iterable
from typing import Any

import anyio.to_thread
import structlog

from openfunctions.core import canonical_bytes, utc_timestamp
from openfunctions.core.files import TEMP_PREFIX, flock, open_private, try_flock, write_atomic

from ._checks import MAX_READ_BYTES, charge_quota, check_media_type, check_range, check_scope
from ._fs import FROZEN_MODE, ensure_dir, read_small, store_unsafe, unlink_quiet
from ._ids import check_artifact_id, is_artifact_id, new_artifact_id, not_found
from ._records import FORMAT_VERSION, HEX_RE, key_doc, key_name, parse_record, record_bytes
from ._refs import ArtifactChunk, ArtifactInfo, ArtifactRef
from ._writer import CHUNK, BlobWriter, fill_async, put_source
from .errors import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactRequestInvalid,
    ArtifactStoreFailed,
    ArtifactStoreUnsafe,
)

log = structlog.get_logger("openfunctions.artifacts")

FORMAT = "openfunctions-artifact-store"
DEFAULT_QUOTA_BYTES = 64 * 1024 * 1024
DEFAULT_MEDIA_TYPE = "application/octet-stream"

_LEDGER = struct.Struct("<4sIQ")
_LEDGER_MAGIC = b"OFAU"
_RECORD_LIMIT = 16 * 1024
_VERIFIED_CACHE_SIZE = 4096
_OPEN_FLAGS = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
# Blob verifications, per process: file identity -> the hex digest it was
# verified against. Any store instance may use an entry (the identity names
# one inode in one state, whichever root it was reached through).
_VERIFIED: OrderedDict[tuple[int, ...], str] = OrderedDict()
_VERIFIED_LOCK = threading.Lock()
_LAYOUT_NAMES = frozenset({"store.json", "lock", "blobs", "index", "keys", "tmp"})


class ArtifactStore:
    """A directory of immutable artifacts with a byte quota.

    Construction touches nothing; the first operation (or ``await open()``)
    creates or checks the directory and recovers from any earlier crash.
    Blocking work on large data (hashing, writing, verifying) runs in worker
    threads; a verified 16 KiB read is served inline.
    """

    def __init__(self, root: str | os.PathLike[str], *, quota_bytes: int = DEFAULT_QUOTA_BYTES) -> None:
        if isinstance(quota_bytes, bool) or not isinstance(quota_bytes, int) or quota_bytes < 0:
            raise ArtifactRequestInvalid(f"quota_bytes must be a non-negative integer, got {quota_bytes!r}")
        self.root = os.path.abspath(os.fspath(root))
        self.quota_bytes = quota_bytes
        self._blobs = os.path.join(self.root, "blobs")
        self._index = os.path.join(self.root, "index")
        self._keys = os.path.join(self.root, "keys")
        self._tmp = os.path.join(self.root, "tmp")
        self._lock_fd: int | None = None
        self._open_lock = threading.Lock()
        self._commit_lock = threading.Lock()  # flock does not exclude threads sharing one fd
        self._records: dict[str, ArtifactInfo] = {}

    def __repr__(self) -> str:
        return f"ArtifactStore(root={self.root!r}, quota_bytes={self.quota_bytes})"

    # -- lifecycle --------------------------------------------------------

    async def open(self) -> ArtifactStore:
        """Create or check the store and recover from a crash. Idempotent."""
        if self._lock_fd is None:
            with _os_errors(f"opening artifact store {self.root!r}"):
                await anyio.to_thread.run_sync(self._open_sync)
        return self

    def close(self) -> None:
        with self._open_lock:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    async def __aenter__(self) -> ArtifactStore:
        return await self.open()

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def _open_sync(self) -> None:
        with self._open_lock:
            if self._lock_fd is not None:
                return
            if os.path.lexists(self.root):
                self._refuse_foreign_root()  # before changing anything in it
            ensure_dir(self.root)  # missing parents too, each 0700
            fd = open_private(os.path.join(self.root, "lock"), os.O_RDWR, create=True, unsafe=store_unsafe)
            try:
                # Under the lock: two processes opening a new store at once
                # must not see each other's half-made layout.
                with flock(fd):
                    self._check_marker()
                    for d in (self._blobs, self._index, self._keys, self._tmp):
                        ensure_dir(d)
                    self._recover(fd)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd

    def _refuse_foreign_root(self) -> None:
        st = os.lstat(self.root)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise ArtifactStoreUnsafe(f"artifact store path {self.root!r} is not a plain directory (symlink or file)")
        names = set(os.listdir(self.root))
        if "store.json" in names:
            return
        foreign = sorted(n for n in names - _LAYOUT_NAMES if not n.startswith(TEMP_PREFIX + "store.json"))
        if foreign:
            raise ArtifactStoreUnsafe(
                f"{self.root!r} is a non-empty directory without store.json (it holds e.g. {foreign[0]!r}): "
                "not an artifact store, refusing to use it"
            )

    def _check_marker(self) -> None:
        marker = os.path.join(self.root, "store.json")
        try:
            raw = read_small(marker, 4096)
        except FileNotFoundError:
            fresh = {"format": FORMAT, "v": FORMAT_VERSION, "created_at": utc_timestamp()}
            write_atomic(os.path.join(self.root, "store.json"), canonical_bytes(fresh), mode=FROZEN_MODE)
            return
        except (OSError, ValueError) as exc:
            raise ArtifactStoreUnsafe(f"cannot read {marker!r}: {exc}") from None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ArtifactStoreUnsafe(f"{marker!r} does not describe an {FORMAT}")
        if doc.get("v") != FORMAT_VERSION:
            raise ArtifactStoreUnsafe(f"{marker!r} has format version {doc.get('v')!r}; this code reads version {FORMAT_VERSION}")

    def _recover(self, lock_fd: int) -> None:
        """Rebuild the ledger from the index; drop orphans and stale temp files. Runs under the lock."""
        sizes: dict[str, int] = {}
        damaged = 0
        for name in os.listdir(self._index):
            if name.startswith(TEMP_PREFIX):
                unlink_quiet(os.path.join(self._index, name))  # index writes hold the lock: no live writer
                continue
            if not (name.endswith(".json") and is_artifact_id(name[:-5])):
                continue
            try:
                info = self._load_record(name[:-5])
            except ArtifactCorrupt as exc:
                damaged += 1
                log.error("artifact_record_corrupt", store=self.root, artifact_id=name[:-5], error=exc.message)
                continue
            except ArtifactNotFound:
                continue
            self._records[info.id] = info
            sizes[info.sha256[7:]] = info.size
        for name in os.listdir(self._keys):
            if name.startswith(TEMP_PREFIX):
                unlink_quiet(os.path.join(self._keys, name))
        for info in self._records.values():
            key = key_name(info.sha256, info.scope, info.media_type)
            if self._lookup_key(key) is None:
                # Key files are a rebuildable cache (see the format header):
                # _commit writes them without fsync, and so does recovery.
                write_atomic(os.path.join(self._keys, key), key_doc(info.id), mode=FROZEN_MODE, durable=False)
        used = sum(sizes.values())
        for name in os.listdir(self._blobs):
            if not HEX_RE.fullmatch(name) or name in sizes:
                continue
            path = os.path.join(self._blobs, name)
            if damaged:
                # A damaged record may own this blob: keep it, and count it.
                used += os.lstat(path).st_size
            else:
                log.info("artifact_orphan_blob_removed", store=self.root, blob=name)
                unlink_quiet(path)
        for name in os.listdir(self._tmp):
            self._remove_if_abandoned(os.path.join(self._tmp, name))
        self._write_ledger(lock_fd, used)

    def _remove_if_abandoned(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
        except OSError:
            return
        try:
            if try_flock(fd):  # else a live writer holds it
                unlink_quiet(path)
        finally:
            os.close(fd)

    async def _ready(self) -> None:
        if self._lock_fd is None:
            await self.open()

    # -- put --------------------------------------------------------------

    async def put(
        self,
        data: Any,
        *,
        media_type: str = DEFAULT_MEDIA_TYPE,
        scope: str | None = None,
    ) -> ArtifactRef:
        """Store ``data`` and return its reference.

        ``data`` is bytes-like, an iterable or async iterable of bytes-like
        chunks, or a binary file object (anything with ``read(n)``). The same
        content with the same ``scope`` and ``media_type`` returns the
        existing artifact. Raises :class:`ArtifactQuotaExceeded` (nothing
        stored) when the new bytes would pass the quota.
        """
        media_type = check_media_type(media_type)
        scope = check_scope(scope)
        await self._ready()
        is_async, chunks = put_source(data)
        with _os_errors("storing an artifact"):
            if is_async:
                return await self._put_async_iter(chunks, media_type, scope)
            return await anyio.to_thread.run_sync(self._put_sync, chunks, media_type, scope)

    def _put_sync(self, chunks: Iterable[Any], media_type: str, scope: str | None) -> ArtifactRef:
        writer = self._new_writer()
        try:
            writer.write_many(chunks)
            writer.finish()
            return self._commit(writer, media_type, scope)
        finally:
            writer.discard()

    async def _put_async_iter(self, data: AsyncIterable[Any], media_type: str, scope: str | None) -> ArtifactRef:
        writer = await anyio.to_thread.run_sync(self._new_writer)
        try:
            await fill_async(writer, data)
            await anyio.to_thread.run_sync(writer.finish)
            return await anyio.to_thread.run_sync(self._commit, writer, media_type, scope)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(writer.discard)

    def _new_writer(self) -> BlobWriter:
        # No blob can be larger than the whole quota, so a stream past it is
        # refused before it fills the disk. (The bytes *left* are not a valid
        # cap: content that already exists is reused at no cost.)
        return BlobWriter(self._tmp, self.quota_bytes, os.path.join(self.root, "lock"))

    def _commit(self, writer: BlobWriter, media_type: str, scope: str | None) -> ArtifactRef:
        hexdigest, size = writer.hexdigest, writer.size
        sha = "sha256:" + hexdigest
        key = key_name(sha, scope, media_type)
        blob = os.path.join(self._blobs, hexdigest)
        with self._commit_lock, flock(self._require_fd()) as fd:
            used = self._read_ledger(fd)
            existing = self._lookup_key(key)
            if existing is not None:
                info = self._reusable(existing, sha, scope, media_type)
                if info is not None:
                    self._ensure_blob(writer, blob, hexdigest, size)
                    return info.ref
            if not self._ensure_blob(writer, blob, hexdigest, size, charge_only=True):
                self._write_ledger(fd, charge_quota(self.quota_bytes, used, size))
                self._ensure_blob(writer, blob, hexdigest, size)
            info = ArtifactInfo(
                id=new_artifact_id(), sha256=sha, size=size, media_type=media_type, scope=scope, created_at=utc_timestamp()
            )
            write_atomic(os.path.join(self._index, info.id + ".json"), record_bytes(info), mode=FROZEN_MODE)
            # The key file is only a lookup that open() rebuilds from the index: no fsync.
            write_atomic(os.path.join(self._keys, key), key_doc(info.id), mode=FROZEN_MODE, durable=False)
            self._records[info.id] = info
            log.debug("artifact_put", store=self.root, artifact_id=info.id, size=size, scope=scope)
            return info.ref

    def _ensure_blob(self, writer: BlobWriter, blob: str, hexdigest: str, size: int, *, charge_only: bool = False) -> bool:
        """Make ``blob`` hold the writer's bytes. With ``charge_only``, just report whether a good copy exists.

        An existing blob that fails verification is replaced by the fresh copy
        (same name, same size): the store heals instead of handing out a
        reference to damaged bytes.
        """
        try:
            fd = os.open(blob, os.O_RDONLY | _OPEN_FLAGS)
        except FileNotFoundError:
            if charge_only:
                return False
            writer.install(blob)
            self._remember(os.stat(blob), hexdigest)
            return True
        try:
            # The same per-process verification cache the read path trusts:
            # a blob this process already hashed (same file identity) is not
            # re-hashed under the commit lock on every reuse.
            good = self._is_verified(os.fstat(fd), hexdigest) or self._verify_fd(
                fd, hexdigest, size, raise_on_mismatch=False
            )
        finally:
            os.close(fd)
        if not good:
            log.warning("artifact_blob_healed", store=self.root, blob=hexdigest)
            writer.install(blob)
            self._remember(os.stat(blob), hexdigest)
        return True

    def _reusable(self, artifact_id: str, sha: str, scope: str | None, media_type: str) -> ArtifactInfo | None:
        try:
            info = self._info_sync(artifact_id)
        except (ArtifactNotFound, ArtifactCorrupt):
            return None
        if (info.sha256, info.scope, info.media_type) != (sha, scope, media_type):
            return None
        return info

    # -- read -------------------------------------------------------------

    async def stat(self, artifact_id: Any) -> ArtifactInfo:
        """The index record of an artifact (no content check). ArtifactNotFound for any bad id."""
        check_artifact_id(artifact_id)
        await self._ready()
        info = self._records.get(artifact_id)
        if info is not None:
            return info
        return await anyio.to_thread.run_sync(self._info_sync, artifact_id)

    async def read(self, artifact_id: Any, offset: int = 0, length: int = MAX_READ_BYTES) -> ArtifactChunk:
        """Read at most 16 KiB at ``offset``, after verifying the whole blob's SHA-256.

        ``length`` above 16 KiB is clamped; ``offset`` equal to the size gives
        an empty chunk with ``eof``; a negative offset, an offset past the end,
        or a length below 1 raises :class:`ArtifactRequestInvalid`. A digest
        mismatch raises :class:`ArtifactCorrupt` and returns no byte.
        """
        info = await self.stat(artifact_id)
        offset, length = check_range(offset, length, info.size)
        with _os_errors(f"reading artifact {info.id}"):
            return await self._read_verified(info, offset, length)

    async def _read_verified(self, info: ArtifactInfo, offset: int, length: int) -> ArtifactChunk:
        hexdigest = info.sha256[7:]
        fd = self._open_blob(info)
        try:
            st = os.fstat(fd)
            if not self._is_verified(st, hexdigest):
                await anyio.to_thread.run_sync(self._verify_fd, fd, hexdigest, info.size)
            data = os.pread(fd, length, offset) if length else b""
            # The verified file must still be the one we read (no rewrite in between).
            changed = _identity(os.fstat(fd)) != _identity(st)
        finally:
            os.close(fd)
        if changed or len(data) != length:
            raise ArtifactCorrupt(
                f"artifact {info.id}: its blob changed while being read; no data returned",
                details={"sha256": info.sha256},
            )
        return ArtifactChunk(
            artifact_id=info.id,
            data=data,
            offset=offset,
            length=length,
            total_size=info.size,
            sha256=info.sha256,
            eof=offset + length >= info.size,
            media_type=info.media_type,
        )

    async def read_all(self, artifact_id: Any) -> bytes:
        """The whole content, verified (for trusted in-process callers; models use ``read``)."""
        info = await self.stat(artifact_id)
        with _os_errors(f"reading artifact {info.id}"):
            return await anyio.to_thread.run_sync(self._read_all_sync, info)

    def _read_all_sync(self, info: ArtifactInfo) -> bytes:
        fd = self._open_blob(info)
        try:
            data = _read_exact(fd, info.size)
        finally:
            os.close(fd)
        if hashlib.sha256(data).hexdigest() != info.sha256[7:] or len(data) != info.size:
            raise ArtifactCorrupt(f"artifact {info.id}: stored bytes do not match digest {info.sha256}")
        return data

    async def verify_all(self) -> dict[str, Any]:
        """Check every artifact's record and blob against its digest (an fsck; reads everything once).

        Returns ``{"checked": n, "corrupt": [ids], "bytes_verified": n}``.
        Nothing is changed; a damaged blob heals when its content is put again.
        """
        await self._ready()
        return await anyio.to_thread.run_sync(self._verify_all_sync)

    def _verify_all_sync(self) -> dict[str, Any]:
        corrupt: list[str] = []
        checked = verified_bytes = 0
        done: dict[str, bool] = {}
        for name in sorted(os.listdir(self._index)):
            if not (name.endswith(".json") and is_artifact_id(name[:-5])):
                continue
            checked += 1
            try:
                info = self._load_record(name[:-5])
            except (ArtifactCorrupt, ArtifactNotFound):
                corrupt.append(name[:-5])
                continue
            hexdigest = info.sha256[7:]
            if hexdigest not in done:
                try:
                    fd = self._open_blob(info)
                except ArtifactCorrupt:
                    done[hexdigest] = False
                else:
                    try:
                        done[hexdigest] = self._verify_fd(fd, hexdigest, info.size, raise_on_mismatch=False)
                    finally:
                        os.close(fd)
                    verified_bytes += info.size if done[hexdigest] else 0
            if not done[hexdigest]:
                corrupt.append(info.id)
        return {"checked": checked, "corrupt": corrupt, "bytes_verified": verified_bytes}

    async def usage(self) -> dict[str, int]:
        """``{"used_bytes", "quota_bytes"}`` as the ledger says now."""
        await self._ready()

        def ledger() -> int:
            with self._commit_lock, flock(self._require_fd()) as fd:
                return self._read_ledger(fd)

        used = await anyio.to_thread.run_sync(ledger)
        return {"used_bytes": used, "quota_bytes": self.quota_bytes}

    def _open_blob(self, info: ArtifactInfo) -> int:
        try:
            return os.open(os.path.join(self._blobs, info.sha256[7:]), os.O_RDONLY | _OPEN_FLAGS)
        except FileNotFoundError:
            raise ArtifactCorrupt(f"artifact {info.id}: its blob {info.sha256} is missing") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ArtifactCorrupt(f"artifact {info.id}: its blob was replaced by a symlink") from None
            raise

    def _info_sync(self, artifact_id: str) -> ArtifactInfo:
        info = self._records.get(artifact_id)
        if info is None:
            info = self._load_record(artifact_id)
            self._records[artifact_id] = info
        return info

    def _load_record(self, artifact_id: str) -> ArtifactInfo:
        check_artifact_id(artifact_id)  # the only way a caller string reaches a path
        path = os.path.join(self._index, artifact_id + ".json")
        try:
            raw = read_small(path, _RECORD_LIMIT)
        except (FileNotFoundError, NotADirectoryError):
            raise not_found(artifact_id) from None
        except (OSError, ValueError) as exc:
            raise ArtifactCorrupt(f"artifact {artifact_id}: index record unreadable ({exc})") from None
        return parse_record(artifact_id, raw)

    # -- verification -----------------------------------------------------

    def _is_verified(self, st: os.stat_result, hexdigest: str) -> bool:
        with _VERIFIED_LOCK:
            return _VERIFIED.get(_identity(st)) == hexdigest

    def _remember(self, st: os.stat_result, hexdigest: str) -> None:
        with _VERIFIED_LOCK:
            _VERIFIED[_identity(st)] = hexdigest
            _VERIFIED.move_to_end(_identity(st))
            while len(_VERIFIED) > _VERIFIED_CACHE_SIZE:
                _VERIFIED.popitem(last=False)

    def _verify_fd(self, fd: int, hexdigest: str, size: int, *, raise_on_mismatch: bool = True) -> bool:
        st = os.fstat(fd)
        ok = stat.S_ISREG(st.st_mode) and st.st_size == size
        if ok:
            h = hashlib.sha256()
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            pos = 0
            while pos < size:
                n = os.preadv(fd, [view[: min(CHUNK, size - pos)]], pos)
                if n <= 0:
                    break
                h.update(view[:n])
                pos += n
            ok = pos == size and h.hexdigest() == hexdigest
            # The file must not have changed while we hashed it.
            ok = ok and _identity(os.fstat(fd)) == _identity(st)
        if ok:
            self._remember(st, hexdigest)
            return True
        if raise_on_mismatch:
            raise ArtifactCorrupt(
                f"blob sha256:{hexdigest} does not match its digest (tampered or damaged on disk); no data returned",
                details={"sha256": "sha256:" + hexdigest},
            )
        return False

    # -- locking and the ledger -------------------------------------------

    def _require_fd(self) -> int:
        if self._lock_fd is None:
            raise ArtifactStoreUnsafe(f"artifact store {self.root!r} is closed")
        return self._lock_fd

    def _read_ledger(self, fd: int) -> int:
        raw = os.pread(fd, _LEDGER.size, 0)
        if len(raw) == _LEDGER.size:
            magic, version, used = _LEDGER.unpack(raw)
            if magic == _LEDGER_MAGIC and version == 1:
                return int(used)
        raise ArtifactCorrupt(f"artifact store {self.root!r}: usage ledger is damaged; reopen the store to rebuild it")

    def _write_ledger(self, fd: int, used: int) -> None:
        os.pwrite(fd, _LEDGER.pack(_LEDGER_MAGIC, 1, used), 0)

    def _lookup_key(self, key: str) -> str | None:
        try:
            doc = json.loads(read_small(os.path.join(self._keys, key), 4096))
        except (OSError, ValueError):
            return None
        artifact_id = doc.get("artifact_id") if isinstance(doc, dict) and doc.get("v") == 1 else None
        return artifact_id if is_artifact_id(artifact_id) else None


# -- helpers ---------------------------------------------------------------


class _os_errors:
    """Turn a filesystem failure (ENOSPC, EIO, EACCES, ...) into ArtifactStoreFailed naming it."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # Returns None, never True: any other exception propagates unchanged.
        if isinstance(exc, OSError):
            name = errno.errorcode.get(exc.errno or 0, "OSError")
            raise ArtifactStoreFailed(
                f"{self.what} failed: {exc.strerror or exc} ({name})",
                details={"errno": name},
            ) from exc


def _read_exact(fd: int, size: int) -> bytes:
    parts, pos = [], 0
    while pos < size:
        part = os.pread(fd, min(size - pos, 8 * CHUNK), pos)
        if not part:
            break
        parts.append(part)
        pos += len(part)
    return b"".join(parts)


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


__all__ = [
    "ArtifactStore",
    "ArtifactRef",
    "ArtifactInfo",
    "ArtifactChunk",
    "DEFAULT_QUOTA_BYTES",
    "MAX_READ_BYTES",
    "DEFAULT_MEDIA_TYPE",
]
