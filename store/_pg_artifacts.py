"""An artifact store in PostgreSQL: the index and the blobs that server replicas share.

Implements ``openfunctions.artifacts.ArtifactStoreProtocol`` (``put``, ``stat``,
``read``, ``usage``; plus ``read_all``) with the file store's rules, applied by
the same code (``openfunctions.artifacts``' checks, ids, quota charge, index
record bytes, and the taking in of ``put()``'s data: one dispatch, the cap, the
hash in a worker thread): immutable artifacts behind opaque ``art_`` ids, verified bounded
reads, a byte quota that concurrent writers on any replica cannot overshoot,
reuse of the same (content, scope, media type).

Schema (component ``"artifacts"`` in ``of_schema``; :data:`MIGRATIONS`, applied
only by ``openfunctions-mcp db migrate``; PostgreSQL 15 or later)::

    of_artifact_usage(store text PRIMARY KEY,     -- one row per store name ("default", ...)
        used_bytes bigint)                        -- the sum of its distinct blobs' sizes (the ledger)
    of_artifact_blobs(store, sha256 text,         -- PRIMARY KEY (store, sha256): "<64 hex>" of content
        size bigint, content bytea)               -- STORAGE EXTERNAL: a 16 KiB slice reads only its pages
    of_artifacts(artifact_id text PRIMARY KEY,    -- "art_" + 32 hex (128 random bits)
        store, sha256, media_type, scope,         -- UNIQUE NULLS NOT DISTINCT: the reuse key
        record text)                              -- the index record, byte for byte a file store's
                                                  -- index/art_<id>.json (fields + "check"), parsed
                                                  -- and checked on every stat

Why blobs in PostgreSQL (the default) rather than a directory every replica
mounts: the file store's quota and crash rules rest on ``flock`` and atomic
``rename`` on one local POSIX filesystem, which network filesystems do not
reliably give; in the database the quota check, the blob and the index row
commit in one transaction under one row lock (``of_artifact_usage``), every
replica sees the artifact the moment ``put`` returns, and the database's backup
covers the artifacts with the tasks that cite them. The cost: blob bytes travel
through the database (WAL, replication, backups); artifacts are bounded by the
quota (64 MiB by default) and one blob by PostgreSQL's 1 GiB ``bytea`` limit.
An object store is the next backend when artifacts grow past that.

Promises:

- **put** returns after one committed transaction that holds the store's
  usage row ``FOR UPDATE``: reuse an existing artifact (healing its blob if
  its bytes no longer match), or check ``used + size <= quota``
  (``ArtifactQuotaExceeded``, nothing stored), insert the blob (if new),
  move the ledger, insert the index row.
- **read** returns at most 16 KiB, and only after the blob's SHA-256 was
  checked against the index record: the digest and the slice come from one
  statement (one row version). A process remembers a verified row version
  (``xmin``) and skips re-hashing it; any rewrite of the row changes ``xmin``.
- Unknown and malformed ids give the identical ``ArtifactNotFound``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from openfunctions.artifacts import (
    DEFAULT_MEDIA_TYPE,
    DEFAULT_QUOTA_BYTES,
    MAX_READ_BYTES,
    ArtifactChunk,
    ArtifactCorrupt,
    ArtifactInfo,
    ArtifactRef,
    ArtifactRequestInvalid,
    ArtifactStoreFailed,
    artifact_not_found,
    charge_quota,
    check_artifact_id,
    check_media_type,
    check_range,
    check_scope,
    collect_blob,
    new_artifact_id,
    parse_record,
    record_bytes,
)
from openfunctions.core import utc_timestamp
from openfunctions.core.postgres import connection_or, database_error, open_checked

from ._errors import StoreUnavailable
from ._pg import _psycopg, redact_dsn

COMPONENT = "artifacts"

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: index, blobs, ledger
        """CREATE TABLE of_artifact_usage (
            store text COLLATE "C" PRIMARY KEY,
            used_bytes bigint NOT NULL)""",
        """CREATE TABLE of_artifact_blobs (
            store text COLLATE "C" NOT NULL,
            sha256 text COLLATE "C" NOT NULL,
            size bigint NOT NULL,
            content bytea NOT NULL,
            PRIMARY KEY (store, sha256))""",
        "ALTER TABLE of_artifact_blobs ALTER COLUMN content SET STORAGE EXTERNAL",
        """CREATE TABLE of_artifacts (
            artifact_id text COLLATE "C" PRIMARY KEY,
            store text COLLATE "C" NOT NULL,
            sha256 text COLLATE "C" NOT NULL,
            media_type text NOT NULL,
            scope text,
            record text NOT NULL,
            FOREIGN KEY (store, sha256) REFERENCES of_artifact_blobs (store, sha256))""",
        "CREATE UNIQUE INDEX of_artifact_keys ON of_artifacts (store, sha256, media_type, scope) NULLS NOT DISTINCT",
    ),
]


class PgArtifactStore:
    """Artifacts in PostgreSQL under one store name; open with :func:`open_pg_artifact_store`."""

    def __init__(self, dsn: str, name: str, pool: Any, owns_pool: bool, quota_bytes: int) -> None:
        if isinstance(quota_bytes, bool) or not isinstance(quota_bytes, int) or quota_bytes < 0:
            raise ArtifactRequestInvalid(f"quota_bytes must be a non-negative integer, got {quota_bytes!r}")
        self.name = name
        self.pool = pool
        self.quota_bytes = quota_bytes
        self.where = redact_dsn(dsn)
        self._owns_pool = owns_pool
        self._verified: dict[str, str] = {}  # sha256 hex -> the blob row's xmin whose bytes were checked
        _psycopg()  # psycopg missing: refused here, named

    def __repr__(self) -> str:
        return f"PgArtifactStore({self.where!r}, name={self.name!r}, quota_bytes={self.quota_bytes})"

    @asynccontextmanager
    async def _db(self, what: str) -> AsyncIterator[Any]:
        """A pooled connection; a database failure in it is an ``ArtifactStoreFailed`` naming ``what``.

        After a failure the pool drops its dead connections (a restarted server
        breaks them all), so the next call gets a working one.
        """
        def fail(exc: BaseException) -> Exception:
            return database_error(exc, ArtifactStoreFailed, f"{what}: PostgreSQL at {self.where} failed", write=True)

        async with connection_or(self.pool, self.pool.connection(), fail) as conn:
            yield conn

    # -- put ----------------------------------------------------------------------------
    async def put(self, data: Any, *, media_type: str = DEFAULT_MEDIA_TYPE, scope: str | None = None) -> ArtifactRef:
        """Store ``data`` (bytes-like, or an iterable / async iterable of chunks, or a binary file); its ref."""
        media_type = check_media_type(media_type)
        scope = check_scope(scope)
        blob = await collect_blob(data, self.quota_bytes)  # hashed in a worker thread; past the quota: refused
        async with self._db("storing an artifact (it may or may not have been stored)") as conn, conn.transaction():
            return await self._commit(conn, blob.content, blob.hexdigest, media_type, scope)

    async def _commit(self, conn: Any, content: bytes, digest: str, media_type: str, scope: str | None) -> ArtifactRef:
        """In the caller's transaction: reuse, or charge the ledger and insert the blob (if new) and the index row."""
        size = len(content)
        await conn.execute("INSERT INTO of_artifact_usage (store, used_bytes) VALUES (%s, 0) "
                           "ON CONFLICT (store) DO NOTHING", (self.name,))
        cur = await conn.execute("SELECT used_bytes FROM of_artifact_usage WHERE store = %s FOR UPDATE",
                                 (self.name,))
        used = int((await cur.fetchone())[0])
        cur = await conn.execute(
            "SELECT a.artifact_id, a.record FROM of_artifacts a WHERE a.store = %s AND a.sha256 = %s "
            "AND a.media_type = %s AND a.scope IS NOT DISTINCT FROM %s", (self.name, digest, media_type, scope))
        row = await cur.fetchone()
        cur = await conn.execute("SELECT encode(sha256(content), 'hex') FROM of_artifact_blobs "
                                 "WHERE store = %s AND sha256 = %s", (self.name, digest))
        blob = await cur.fetchone()
        if blob is not None and blob[0] != digest:  # the stored bytes went bad: this fresh copy heals them
            await conn.execute("UPDATE of_artifact_blobs SET content = %s WHERE store = %s AND sha256 = %s",
                               (content, self.name, digest))
        if row is not None:
            return parse_record(row[0], row[1].encode("utf-8")).ref
        if blob is None:
            charged = charge_quota(self.quota_bytes, used, size)  # past the quota: nothing is kept
            await conn.execute("INSERT INTO of_artifact_blobs (store, sha256, size, content) VALUES (%s, %s, %s, %s)",
                               (self.name, digest, size, content))
            await conn.execute("UPDATE of_artifact_usage SET used_bytes = %s WHERE store = %s", (charged, self.name))
        info = ArtifactInfo(id=new_artifact_id(), sha256="sha256:" + digest, size=size, media_type=media_type,
                            scope=scope, created_at=utc_timestamp())
        await conn.execute(
            "INSERT INTO of_artifacts (artifact_id, store, sha256, media_type, scope, record) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (info.id, self.name, digest, media_type, scope, record_bytes(info).decode("utf-8")))
        return info.ref

    # -- reading ------------------------------------------------------------------------
    async def stat(self, artifact_id: Any) -> ArtifactInfo:
        """The index record (checked as a file store checks its index file); ``ArtifactNotFound`` otherwise."""
        artifact_id = check_artifact_id(artifact_id)
        async with self._db(f"reading artifact {artifact_id}") as conn:
            cur = await conn.execute("SELECT record FROM of_artifacts WHERE artifact_id = %s AND store = %s",
                                     (artifact_id, self.name))
            row = await cur.fetchone()
        if row is None:
            raise artifact_not_found(artifact_id)  # the one not-found error, as for a malformed id
        return parse_record(artifact_id, row[0].encode("utf-8"))

    async def read(self, artifact_id: Any, offset: int = 0, length: int = MAX_READ_BYTES) -> ArtifactChunk:
        """At most 16 KiB at ``offset``, after checking the blob's SHA-256 (``ArtifactCorrupt``: no byte returned)."""
        info = await self.stat(artifact_id)
        offset, length = check_range(offset, length, info.size)
        hexdigest = info.sha256[7:]
        async with self._db(f"reading artifact {info.id}") as conn:
            cur = await conn.execute(
                "SELECT xmin::text, size, substring(content FROM %s FOR %s), CASE WHEN xmin::text = %s THEN NULL "
                "ELSE encode(sha256(content), 'hex') END FROM of_artifact_blobs WHERE store = %s AND sha256 = %s",
                (offset + 1, length, self._verified.get(hexdigest, ""), self.name, hexdigest))
            row = await cur.fetchone()
        if row is None:
            raise ArtifactCorrupt(f"artifact {info.id}: its blob {info.sha256} is missing")
        xmin, size, data, computed = row
        if computed is not None:
            if computed != hexdigest or size != info.size:
                self._verified.pop(hexdigest, None)
                raise ArtifactCorrupt(f"artifact {info.id}: stored bytes do not match digest {info.sha256}; "
                                      "no data returned", details={"sha256": info.sha256})
            self._verified[hexdigest] = xmin
        data = bytes(data or b"")
        if len(data) != length:
            raise ArtifactCorrupt(f"artifact {info.id}: its blob is shorter than its record says; no data returned")
        return ArtifactChunk(artifact_id=info.id, data=data, offset=offset, length=length, total_size=info.size,
                             sha256=info.sha256, eof=offset + length >= info.size, media_type=info.media_type)

    async def read_all(self, artifact_id: Any) -> bytes:
        """The whole content, verified (for trusted in-process callers; models use ``read``)."""
        info = await self.stat(artifact_id)
        async with self._db(f"reading artifact {info.id}") as conn:
            cur = await conn.execute("SELECT content FROM of_artifact_blobs WHERE store = %s AND sha256 = %s",
                                     (self.name, info.sha256[7:]))
            row = await cur.fetchone()
        data = bytes(row[0]) if row is not None else b""
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())  # off the event loop, as put
        if row is None or digest != info.sha256[7:] or len(data) != info.size:
            raise ArtifactCorrupt(f"artifact {info.id}: stored bytes do not match digest {info.sha256}")
        return data

    async def usage(self) -> dict[str, int]:
        async with self._db("reading the artifact quota") as conn:
            cur = await conn.execute("SELECT used_bytes FROM of_artifact_usage WHERE store = %s", (self.name,))
            row = await cur.fetchone()
        return {"used_bytes": int(row[0]) if row else 0, "quota_bytes": self.quota_bytes}

    def close(self) -> None:
        """Nothing to release unless the store opened its own pool (then use :meth:`aclose`)."""

    async def aclose(self) -> None:
        if self._owns_pool:
            await self.pool.close()


async def open_pg_artifact_store(dsn: str, name: str = "default", *, quota_bytes: int = DEFAULT_QUOTA_BYTES,
                                 pool: Any = None, max_connections: int = 4, timeout: float = 10.0) -> PgArtifactStore:
    """The artifact store ``name`` at ``dsn``; refuses an ``artifacts`` schema other than this code's."""
    return await open_checked(dsn, COMPONENT, lambda p, owns: PgArtifactStore(dsn, name, p, owns, quota_bytes),
                              pool=pool, max_connections=max_connections, timeout=timeout,
                              close=PgArtifactStore.aclose, unavailable=StoreUnavailable)


__all__ = ["MIGRATIONS", "PgArtifactStore", "open_pg_artifact_store"]
