"""Vector indexes: exact search over a store (embedded default) and pgvector (HNSW, cosine).

Both index chunks of documents and keep, per document, what made its
chunks (content digest, chunker, embedder), so that re-ingesting an
unchanged document is recognised without re-embedding it. Both record the
embedder's name and dimension when the index is created and refuse to open
with another (:class:`IndexMismatch` names both).

Embedded (:class:`StoreIndex`), keys in its store (format 1)::

    meta                     {"format": 1, "embedder": name, "dimension": d}
    doc/<doc_id>             {"digest", "chunker", "embedder", "source", "title", "chunks", "bytes", "at"}
    chunk/<doc_id>#<n:06d>   {"t": chunk text, "v": base64 of d little-endian float32}

A document's chunks and its ``doc/`` entry are written in one store
transaction (on the local store: one journal record). Search is exact:
all vectors sit in one in-memory float32 matrix (rebuilt after writes), one
matrix-vector product per query. Measured in bench/bench_rag.py on the
busy 2-core machine: 8 ms at 3,000 chunks, 86 ms at 100,000 (a pure-Python
scan: ~490x slower) — enough for the embedded default; pgvector is the road
past that. sqlite-vec was not measured against it.

pgvector (:class:`PgVectorIndex`): the tables and their DDL are ``rag/_pg_schema.py``'s
(component ``rag`` in ``of_schema``, registered for ``openfunctions-mcp db migrate``): the shared
``of_rag_indexes`` and ``of_rag_docs``, and one ``of_rag_chunks_<name>`` per index (a vector
column has one dimension), with an HNSW index over cosine distance and a GIN-indexed ``tsv``
column for hybrid search's full-text ranking. Every error the database reports is mapped by
``core.postgres`` (:func:`~openfunctions.core.postgres.database_error`: the same wording,
``certainty`` and ``details["database_error"]`` as every PostgreSQL backend) into
:class:`~openfunctions.store.StoreUnavailable`, and has the pool check its idle connections.

``embedding`` is stored ``MAIN``, not pgvector's default ``EXTERNAL``: a row holding a chunk
of ~1.3 KB and a 512-dimension vector (2 KB) is past PostgreSQL's 2 KB toast threshold, and
``EXTERNAL`` moved the vector out of line (checked on pgvector 0.6.2: 50 such rows took 10 heap
pages with EXTERNAL and 17 with MAIN, one toasted value per row either way), so an exact scan fetched
every vector from the toast table. ``MAIN`` keeps it in the row unless the row exceeds a page;
the text goes out of line instead. Tables made before this change keep their setting.

Search orders by ``embedding <=> query`` (cosine distance) under
``hnsw.ef_search`` (default 400, set per connection; ``index.ef_search``); ``exact=True`` disables
index scans for a brute-force answer (what the benchmark measures recall against). Why 400: at
100,000 chunks with lexical-v2, 12-word questions got recall@10 0.71 at ef_search 100, 0.93 at 400
(10 ms) and 0.97 at 800 (29 ms; the exact scan took ~500 ms): bench/bench_rag_recall.py,
docs/PERFORMANCE.md. Raise it to 800 where short queries must not miss a neighbour.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import weakref
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

import anyio

from openfunctions.core import redact_dsn, utc_timestamp
from openfunctions.core.postgres import apply_migrations, connection_or, database_error, open_pool
from openfunctions.store import Store, StoreUnavailable

from ._errors import IndexMismatch, InvalidRagInput
from ._pg_schema import COMPONENT, INDEX_NAME_RE, MIGRATIONS, TEXT_SEARCH_CONFIG, ChunkTable, require_vector
from ._text import Bm25, rrf, term_ids, tsquery_words

try:
    import numpy as np
except ImportError:  # pragma: no cover - the 'rag' extra brings numpy; without it search is pure Python
    np = None  # type: ignore[assignment]

FORMAT = 1



@runtime_checkable
class BulkLoadable(Protocol):
    """An index whose search structures can be dropped for a load and built once after it (pgvector)."""

    async def drop_search_indexes(self) -> None: ...
    async def build_search_indexes(self, **hnsw: Any) -> None: ...


class RagIndex(Protocol):
    """What :class:`~openfunctions.rag.Rag` needs of an index; :class:`StoreIndex` and :class:`PgVectorIndex` are two."""

    kind: str

    async def recorded_embedder(self) -> str | None: ...
    async def open(self, embedder: Any) -> None: ...
    async def get_doc(self, doc_id: str) -> dict[str, Any] | None: ...
    async def get_docs(self, doc_ids: list[str]) -> dict[str, dict[str, Any]]: ...
    async def replace_docs(self, batch: list[dict[str, Any]]) -> None: ...
    async def replace_doc(self, doc_id: str, info: dict[str, Any], chunks: list[str],
                          vectors: list[list[float]]) -> None: ...
    async def delete_doc(self, doc_id: str) -> bool: ...
    async def search(self, query: list[float] | None, k: int, *, exact: bool = False, text: str | None = None,
                     depth: int = 50, vector_weight: float = 1.0) -> list[dict[str, Any]]: ...
    async def get_chunk(self, doc_id: str, n: int) -> dict[str, Any] | None: ...
    async def list_docs(self, limit: int, after: str | None) -> list[dict[str, Any]]: ...
    async def stats(self) -> dict[str, Any]: ...
    async def aclose(self) -> None: ...

def _pack(vec: list[float]) -> str:
    if np is not None:
        return base64.b64encode(np.asarray(vec, dtype="<f4").tobytes()).decode("ascii")
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")


def _unpack(text: str, dim: int) -> Any:
    raw = base64.b64decode(text)
    if np is not None:
        return np.frombuffer(raw, dtype="<f4")
    return list(struct.unpack(f"<{dim}f", raw))


def _mismatch(where: str, built: str, built_dim: int, embedder: Any) -> IndexMismatch:
    return IndexMismatch(
        f"{where} was built with embedder {built!r} ({built_dim} dimensions); the configured embedder is "
        f"{embedder.name!r} ({embedder.dimension} dimensions). Vectors of two embedders are not comparable: "
        "configure the same embedder, or use a new index name and ingest again",
        details={"index_embedder": built, "index_dimension": built_dim,
                 "embedder": embedder.name, "dimension": embedder.dimension},
    )


class _Searchable:
    """The embedded index's search structures for one version of its rows (never changed once built)."""

    def __init__(self, version: int, ids: list[str], matrix: Any, bm25: Bm25) -> None:
        self.version, self.ids, self.matrix, self.bm25 = version, ids, matrix, bm25

    def top(self, query: list[float], k: int) -> list[tuple[str, float]]:
        if not self.ids:
            return []
        if np is None:
            scored = sorted(((sum(a * b for a, b in zip(query, v, strict=False)), i) for i, v in zip(self.ids, self.matrix,
                                                                                                   strict=True)),
                            reverse=True)
            return [(i, s) for s, i in scored[:k]]
        # einsum, not ``@``: a threaded BLAS gemv was 30x slower on a busy 2-core machine (measured:
        # 10 ms vs 0.3 ms for 2,000 x 256), and a matrix-vector product is memory-bound anyway.
        scores = np.einsum("ij,j->i", self.matrix, np.asarray(query, dtype="<f4"))
        k = min(k, len(self.ids))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.ids[i], float(scores[i])) for i in top]

    def text_top(self, text: str, depth: int) -> list[tuple[str, float]]:
        return [(self.ids[row], score) for row, score in self.bm25.top(text, depth)]


class StoreIndex:
    """Exact cosine search over vectors kept in a :class:`~openfunctions.store.Store`."""

    kind = "embedded"
    THREAD_ABOVE = 20_000  # chunks past which building and ranking leave the event loop for a worker thread

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dimension = 0
        self._rows: dict[str, Any] = {}  # chunk id -> vector
        self._terms: dict[str, Any] = {}  # chunk id -> term_ids(text), for BM25 (rag/_text.py)
        self._version = 0  # bumped by every change of _rows/_terms
        self._state: _Searchable | None = None  # what searches rank over, built from a snapshot

    async def recorded_embedder(self) -> str | None:
        """The name of the embedder this index was built with (None: a new index)."""
        meta = await self.store.get("meta")
        return meta.value.get("embedder") if meta is not None else None

    async def open(self, embedder: Any) -> None:
        meta = await self.store.get("meta")
        if meta is None:
            await self.store.compare_and_set(
                "meta", 0, {"format": FORMAT, "embedder": embedder.name, "dimension": embedder.dimension})
        else:
            m = meta.value
            if m.get("embedder") != embedder.name or m.get("dimension") != embedder.dimension:
                raise _mismatch(f"the RAG index in store {self.store.name!r}", m.get("embedder"), m.get("dimension"), embedder)
        self.dimension = embedder.dimension
        after = None
        while True:
            page = await self.store.list("chunk/", after=after, limit=10_000)
            if not page:
                break
            for e in page:
                cid = e.key[len("chunk/"):]
                self._rows[cid] = _unpack(e.value["v"], self.dimension)
                self._terms[cid] = term_ids(e.value["t"])  # BM25 is computed, not stored: nothing to migrate
            after = page[-1].key
        self._version += 1

    async def get_doc(self, doc_id: str) -> dict[str, Any] | None:
        e = await self.store.get(f"doc/{doc_id}")
        return e.value if e is not None else None

    async def get_docs(self, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
        out = {}
        for d in doc_ids:
            if (got := await self.get_doc(d)) is not None:
                out[d] = got
        return out

    async def replace_docs(self, batch: list[dict[str, Any]]) -> None:
        """Several documents' chunks in one store transaction (``Rag.ingest_many``): each item has
        ``doc_id``, ``info``, ``chunks``, ``vectors`` and ``old_chunks`` (how many it had)."""
        at = utc_timestamp()
        packed = [[_pack(v) for v in t["vectors"]] for t in batch]
        async with self.store.transaction() as tx:
            for t, vecs in zip(batch, packed, strict=True):
                doc_id = t["doc_id"]
                for n in range(len(t["chunks"]), t["old_chunks"]):
                    await tx.delete(f"chunk/{doc_id}#{n:06d}")
                for n, (text, vec) in enumerate(zip(t["chunks"], vecs, strict=True)):
                    await tx.put(f"chunk/{doc_id}#{n:06d}", {"t": text, "v": vec})
                await tx.put(f"doc/{doc_id}", {**t["info"], "at": at})
        for t, vecs in zip(batch, packed, strict=True):
            doc_id = t["doc_id"]
            for n in range(len(t["chunks"]), t["old_chunks"]):
                self._rows.pop(f"{doc_id}#{n:06d}", None)
                self._terms.pop(f"{doc_id}#{n:06d}", None)
            for n, (vec, text) in enumerate(zip(vecs, t["chunks"], strict=True)):
                self._rows[f"{doc_id}#{n:06d}"] = _unpack(vec, self.dimension)
                self._terms[f"{doc_id}#{n:06d}"] = term_ids(text)
        self._version += 1

    async def replace_doc(self, doc_id: str, info: dict[str, Any], chunks: list[str], vectors: list[list[float]]) -> None:
        old = await self.get_doc(doc_id)
        packed = [_pack(v) for v in vectors]
        async with self.store.transaction() as tx:
            for n in range(len(chunks), old["chunks"] if old else 0):
                await tx.delete(f"chunk/{doc_id}#{n:06d}")
            for n, (text, vec) in enumerate(zip(chunks, packed, strict=False)):
                await tx.put(f"chunk/{doc_id}#{n:06d}", {"t": text, "v": vec})
            await tx.put(f"doc/{doc_id}", {**info, "at": utc_timestamp()})
        for n in range(len(chunks), old["chunks"] if old else 0):
            self._rows.pop(f"{doc_id}#{n:06d}", None)
            self._terms.pop(f"{doc_id}#{n:06d}", None)
        for n, (vec, text) in enumerate(zip(packed, chunks, strict=True)):
            self._rows[f"{doc_id}#{n:06d}"] = _unpack(vec, self.dimension)
            self._terms[f"{doc_id}#{n:06d}"] = term_ids(text)
        self._version += 1

    async def delete_doc(self, doc_id: str) -> bool:
        old = await self.get_doc(doc_id)
        if old is None:
            return False
        async with self.store.transaction() as tx:
            for n in range(old["chunks"]):
                await tx.delete(f"chunk/{doc_id}#{n:06d}")
            await tx.delete(f"doc/{doc_id}")
        for n in range(old["chunks"]):
            self._rows.pop(f"{doc_id}#{n:06d}", None)
            self._terms.pop(f"{doc_id}#{n:06d}", None)
        self._version += 1
        return True

    def _snapshot(self) -> tuple[int, list[tuple[str, Any]], list[Any]]:
        """A consistent copy of the rows, taken on the event loop (writes change ``_rows`` and
        ``_terms`` together, between two awaits): the search structures are built from it,
        possibly in a worker thread while writes go on."""
        items = list(self._rows.items())
        return self._version, items, [self._terms[cid] for cid, _ in items]

    def _build(self, snap: tuple[int, list[tuple[str, Any]], list[Any]]) -> _Searchable:
        version, items, terms = snap
        ids = [cid for cid, _ in items]
        if np is not None:
            matrix = np.stack([v for _, v in items]) if items else np.zeros((0, self.dimension), dtype="<f4")
        else:
            matrix = [v for _, v in items]
        return _Searchable(version, ids, matrix, Bm25(terms))

    def _ranked(self, state: _Searchable, query: list[float] | None, text: str | None, k: int, depth: int,
                vector_weight: float = 1.0) -> list[tuple[str, float, Any, Any]]:
        """(chunk id, score, vector score, text score) best first over ``state``; see :meth:`search`."""
        if text is None:
            return [(cid, s, s, None) for cid, s in state.top(query or [], k)]
        if query is None:
            return [(cid, s, None, s) for cid, s in state.text_top(text, k)]
        return rrf(state.top(query, max(depth, k)), state.text_top(text, max(depth, k)), k, vector_weight)

    async def search(self, query: list[float] | None, k: int, *, exact: bool = False, text: str | None = None,
                     depth: int = 50, vector_weight: float = 1.0) -> list[dict[str, Any]]:
        """The ``k`` best chunks: by cosine to ``query`` (``text`` None), by BM25 of ``text``
        (``query`` None), or both fused by RRF from each one's best ``depth`` (rag/_text.py), the
        hit's ``score`` being the fused score and ``vector_score`` / ``text_score`` its parts
        (None where that ranker did not list it). Always exact here.

        The search structures (the vector matrix, the BM25 postings) are rebuilt after writes,
        from a snapshot taken here; past 20,000 chunks the build and the ranking run in a worker
        thread over that immutable snapshot, so a write landing meanwhile cannot tear them (the
        next search sees it)."""
        big = len(self._rows) > self.THREAD_ABOVE
        state = self._state
        if state is None or state.version != self._version:
            snap = self._snapshot()
            state = await anyio.to_thread.run_sync(self._build, snap) if big else self._build(snap)
            if self._state is None or state.version >= self._state.version:
                self._state = state
        if big:
            top = await anyio.to_thread.run_sync(self._ranked, state, query, text, k, depth, vector_weight)
        else:
            top = self._ranked(state, query, text, k, depth, vector_weight)
        out = []
        docs: dict[str, dict[str, Any] | None] = {}
        for cid, score, vs, ts in top:
            e = await self.store.get(f"chunk/{cid}")
            if e is None:
                continue  # deleted meanwhile
            doc_id, n = cid.rsplit("#", 1)
            if doc_id not in docs:
                docs[doc_id] = await self.get_doc(doc_id)
            d = docs[doc_id] or {}
            hit = {"chunk_id": cid, "doc_id": doc_id, "n": int(n), "text": e.value["t"], "score": score,
                   "source": d.get("source"), "title": d.get("title")}
            if text is not None:
                hit["vector_score"], hit["text_score"] = vs, ts
            out.append(hit)
        return out

    async def get_chunk(self, doc_id: str, n: int) -> dict[str, Any] | None:
        e = await self.store.get(f"chunk/{doc_id}#{n:06d}")
        if e is None:
            return None
        d = await self.get_doc(doc_id) or {}
        return {"chunk_id": f"{doc_id}#{n:06d}", "doc_id": doc_id, "n": n, "text": e.value["t"],
                "source": d.get("source"), "title": d.get("title"), "chunks": d.get("chunks")}

    async def list_docs(self, limit: int, after: str | None) -> list[dict[str, Any]]:
        entries = await self.store.list("doc/", after=f"doc/{after}" if after else None, limit=limit)
        return [{"doc_id": e.key[4:], **{k: v for k, v in e.value.items()}} for e in entries]

    async def stats(self) -> dict[str, Any]:
        return {"kind": self.kind, "chunks": len(self._rows), "dimension": self.dimension}

    async def aclose(self) -> None:
        await self.store.aclose()


class PgVectorIndex:
    """pgvector: HNSW over cosine distance, one chunk table per index (tables: ``rag/_pg_schema.py``)."""

    kind = "pgvector"

    def __init__(self, pool: Any, name: str, *, owns_pool: bool, where: str, ef_search: int = 400) -> None:
        if not INDEX_NAME_RE.match(name):
            raise InvalidRagInput(f"index name {name!r} is invalid: use 1-40 of a-z 0-9 _ starting with a letter")
        self.pool = pool
        self.name = name
        self.dimension = 0
        self.ef_search = ef_search
        self._owns = owns_pool
        self._where = where
        from psycopg import sql

        self._sql = sql
        self._chunks = ChunkTable(name)
        self._table = self._chunks.table
        self._ef_set: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # hnsw.ef_search per connection

    @classmethod
    async def connect(cls, dsn: str, name: str, **kw: Any) -> PgVectorIndex:
        """An index over a pool of its own (core.postgres's ``open_pool``; unreachable: :class:`StoreUnavailable`)."""
        if not isinstance(name, str) or not INDEX_NAME_RE.match(name):
            raise InvalidRagInput(f"index name {name!r} is invalid: use 1-40 of a-z 0-9 _ starting with a letter")
        pool = await open_pool(dsn, unavailable=StoreUnavailable)
        return cls(pool, name, owns_pool=True, where=redact_dsn(dsn), **kw)

    def _connection(self, doing: str, *, write: bool) -> AbstractAsyncContextManager[Any]:
        """A pooled connection whose database failure is a :class:`StoreUnavailable` in core.postgres's one
        wording (``certainty`` unknown only for a write that may have committed), after the pool checked its
        idle connections (core.postgres.connection_or)."""
        def fail(exc: BaseException) -> Exception:
            return database_error(exc, StoreUnavailable, f"RAG index {self.name!r}: {doing} in PostgreSQL at "
                                  f"{self._where} failed", write=write, details={"index": self.name})

        return connection_or(self.pool, self.pool.connection(), fail)

    async def recorded_embedder(self) -> str | None:
        """The name of the embedder this index was built with (None: a new index or a new database)."""
        async with self._connection("reading the index's embedder", write=False) as conn:
            cur = await conn.execute("SELECT to_regclass('of_rag_indexes') IS NOT NULL")
            if not (await cur.fetchone())[0]:
                return None
            cur = await conn.execute("SELECT embedder FROM of_rag_indexes WHERE name = %s", (self.name,))
            row = await cur.fetchone()
        return row[0] if row else None

    async def open(self, embedder: Any) -> None:
        """Migrate the component (``at_open``), make sure of the ``vector`` extension, record the embedder
        (refusing another) and create or update this index's chunk table, under a per-index lock."""
        async with self._connection("opening", write=True) as conn:
            await apply_migrations(conn, COMPONENT, MIGRATIONS)
            await require_vector(conn, self._where)
            async with conn.transaction():
                # the key earlier releases took too, so an old and a new process opening one index exclude each other
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('openfunctions.rag.' || %s))", (self.name,))
                await conn.execute(
                    "INSERT INTO of_rag_indexes (name, embedder, dimension) VALUES (%s, %s, %s) "
                    "ON CONFLICT (name) DO NOTHING", (self.name, embedder.name, embedder.dimension))
                cur = await conn.execute("SELECT embedder, dimension FROM of_rag_indexes WHERE name = %s", (self.name,))
                built, dim = await cur.fetchone()
                if built != embedder.name or dim != embedder.dimension:
                    raise _mismatch(f"RAG index {self.name!r} in PostgreSQL", built, dim, embedder)
                await self._chunks.ensure(conn, dim)
        self.dimension = embedder.dimension

    async def drop_search_indexes(self) -> None:
        """Drop the HNSW and full-text indexes before a bulk load (``Rag.bulk_load``)."""
        async with self._connection("dropping the search indexes", write=True) as conn:
            await conn.execute(self._chunks.drop_hnsw())
            await conn.execute(self._chunks.drop_fts())

    async def build_search_indexes(self, **hnsw: Any) -> None:
        """Build the full-text GIN index, then the HNSW one (:meth:`build_hnsw`), where missing."""
        async with self._connection("building the full-text index", write=True) as conn:
            await conn.execute(self._chunks.create_fts())
        await self.build_hnsw(**hnsw)

    async def drop_hnsw(self) -> None:
        """Drop the HNSW index before a bulk load: each insert into an HNSW graph is far slower than
        a plain insert (measured in bench/bench_rag.py). Search is exact until :meth:`build_hnsw`."""
        async with self._connection("dropping the HNSW index", write=True) as conn:
            await conn.execute(self._chunks.drop_hnsw())

    async def build_hnsw(self, *, m: int = 16, ef_construction: int = 64, maintenance_work_mem: str = "1GB",
                         parallel_workers: int | None = None) -> None:
        """(Re)build the HNSW index in one pass (after a bulk load); blocks writes to the index meanwhile.

        ``m`` (links per node, 2..100) and ``ef_construction`` (candidate list while building,
        4..1000, at least ``2 * m``) are pgvector's HNSW build parameters (its defaults: 16, 64);
        larger ones give better recall for a slower build. ``parallel_workers`` sets
        ``max_parallel_maintenance_workers`` for the build (pgvector >= 0.6 builds in parallel).
        An existing HNSW index is kept as it is: :meth:`drop_hnsw` first to rebuild with others.
        """
        if not re.fullmatch(r"\d{1,6}(kB|MB|GB)", maintenance_work_mem):
            raise InvalidRagInput(f"maintenance_work_mem {maintenance_work_mem!r}: use e.g. '512MB' or '1GB'")
        for what, v, lo, hi in (("m", m, 2, 100), ("ef_construction", ef_construction, 4, 1000)):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise InvalidRagInput(f"HNSW {what} must be an integer from {lo} to {hi}, got {v!r}")
        if ef_construction < 2 * m:
            raise InvalidRagInput(f"HNSW ef_construction ({ef_construction}) must be at least 2 * m ({2 * m})")
        sql = self._sql
        async with self._connection("building the HNSW index", write=True) as conn:
            async with conn.transaction():
                await conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(maintenance_work_mem)))
                if parallel_workers is not None:
                    await conn.execute(sql.SQL("SET LOCAL max_parallel_maintenance_workers = {}").format(
                        sql.Literal(max(0, int(parallel_workers)))))
                await conn.execute(self._chunks.create_hnsw(m, ef_construction))

    async def get_doc(self, doc_id: str) -> dict[str, Any] | None:
        async with self._connection("reading a document", write=False) as conn:
            cur = await conn.execute(
                "SELECT digest, chunker, embedder, source, title, chunks, bytes, updated_at FROM of_rag_docs "
                "WHERE index_name = %s AND doc_id = %s", (self.name, doc_id))
            row = await cur.fetchone()
        if row is None:
            return None
        keys = ("digest", "chunker", "embedder", "source", "title", "chunks", "bytes", "at")
        d = dict(zip(keys, row, strict=False))
        d["at"] = d["at"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return d

    async def _copy_rows(self, conn: Any, rows: list[tuple[str, int, str, Any]]) -> None:
        """COPY chunk rows in PostgreSQL's binary format: a vector goes as 4 + 4 * d bytes instead
        of its decimal text, which cost more to format here (json.dumps) and to parse in the
        server than everything else in a row but the full-text column (bench/bench_rag_ingest.py)."""
        async with conn.cursor().copy(self._sql.SQL(
                "COPY {} (doc_id, n, text, embedding) FROM STDIN (FORMAT BINARY)").format(self._table)) as copy:
            buf = [_COPY_HEADER]
            size = 0
            for doc_id, n, text, vec in rows:
                row = _binary_row(doc_id, n, text, vec, self.dimension)
                buf.append(row)
                size += len(row)
                if size > 1 << 20:
                    await copy.write(b"".join(buf))
                    buf, size = [], 0
            buf.append(_COPY_TRAILER)
            await copy.write(b"".join(buf))

    async def get_docs(self, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not doc_ids:
            return {}
        async with self._connection("reading documents", write=False) as conn:
            cur = await conn.execute(
                "SELECT doc_id, digest, chunker, embedder, source, title, chunks, bytes FROM of_rag_docs "
                "WHERE index_name = %s AND doc_id = ANY(%s)", (self.name, doc_ids))
            rows = await cur.fetchall()
        keys = ("digest", "chunker", "embedder", "source", "title", "chunks", "bytes")
        return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in rows}

    async def replace_docs(self, batch: list[dict[str, Any]]) -> None:
        """Several documents in one transaction: one DELETE, one COPY of every chunk row, one
        pipelined upsert of the document rows (``Rag.ingest_many``)."""
        sql = self._sql
        ids = [t["doc_id"] for t in batch]
        async with self._connection("writing documents", write=True) as conn:
            async with conn.transaction():
                await conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s)").format(self._table), (ids,))
                await self._copy_rows(conn, [(t["doc_id"], n, text, vec) for t in batch
                                             for n, (text, vec) in enumerate(zip(t["chunks"], t["vectors"], strict=True))])
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO of_rag_docs (index_name, doc_id, digest, chunker, embedder, source, title, "
                        "chunks, bytes, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now()) "
                        "ON CONFLICT (index_name, doc_id) DO UPDATE SET digest = EXCLUDED.digest, "
                        "chunker = EXCLUDED.chunker, embedder = EXCLUDED.embedder, source = EXCLUDED.source, "
                        "title = EXCLUDED.title, chunks = EXCLUDED.chunks, bytes = EXCLUDED.bytes, updated_at = now()",
                        [(self.name, t["doc_id"], t["info"]["digest"], t["info"]["chunker"], t["info"]["embedder"],
                          t["info"].get("source"), t["info"].get("title"), t["info"]["chunks"], t["info"]["bytes"])
                         for t in batch])

    async def replace_doc(self, doc_id: str, info: dict[str, Any], chunks: list[str], vectors: list[list[float]]) -> None:
        sql = self._sql
        async with self._connection("writing a document", write=True) as conn:
            async with conn.transaction():
                await conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = %s").format(self._table), (doc_id,))
                await self._copy_rows(conn, [(doc_id, n, text, vec)
                                             for n, (text, vec) in enumerate(zip(chunks, vectors, strict=True))])
                await conn.execute(
                    "INSERT INTO of_rag_docs (index_name, doc_id, digest, chunker, embedder, source, title, chunks, "
                    "bytes, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now()) "
                    "ON CONFLICT (index_name, doc_id) DO UPDATE SET digest = EXCLUDED.digest, "
                    "chunker = EXCLUDED.chunker, embedder = EXCLUDED.embedder, source = EXCLUDED.source, "
                    "title = EXCLUDED.title, chunks = EXCLUDED.chunks, bytes = EXCLUDED.bytes, updated_at = now()",
                    (self.name, doc_id, info["digest"], info["chunker"], info["embedder"], info.get("source"),
                     info.get("title"), info["chunks"], info["bytes"]))

    async def delete_doc(self, doc_id: str) -> bool:
        async with self._connection("deleting a document", write=True) as conn:
            async with conn.transaction():
                await conn.execute(self._sql.SQL("DELETE FROM {} WHERE doc_id = %s").format(self._table), (doc_id,))
                cur = await conn.execute("DELETE FROM of_rag_docs WHERE index_name = %s AND doc_id = %s RETURNING 1",
                                         (self.name, doc_id))
                return (await cur.fetchone()) is not None

    async def search(self, query: list[float] | None, k: int, *, exact: bool = False, text: str | None = None,
                     depth: int = 50, vector_weight: float = 1.0) -> list[dict[str, Any]]:
        """The ``k`` nearest chunks by cosine distance (``text`` None), the ``k`` best by
        full-text rank of ``text`` (``query`` None), or both fused by RRF from each one's best
        ``depth`` (rag/_text.py; ``score`` the fused score, ``vector_score`` / ``text_score`` its
        parts).

        HNSW search is one statement: ``hnsw.ef_search`` is set per connection (a session
        setting, sent only when a connection's value differs from the wanted one) instead of
        ``SET LOCAL`` inside a transaction, which cost three more round trips per query
        (measured in bench/bench_rag_recall.py). ``exact=True`` runs in a transaction with index
        scans off: the brute-force answer the benchmark measures recall against.

        Full-text: the query's words OR-ed (``to_tsquery('english', 'w1 | w2 ...')``, letters and
        digits only), matched against the GIN-indexed ``tsv`` column and ranked by ``ts_rank``
        divided by 1 + log(chunk length); PostgreSQL's ranking knows no inverse document
        frequency, so a common word counts as much as a rare one (BM25 on the embedded index does).
        """
        if text is not None:
            return await self._hybrid(query, text, k, exact=exact, depth=depth, vector_weight=vector_weight)
        assert query is not None
        q = _vector_text(query)
        ef = max(self.ef_search, k)
        stmt = self._sql.SQL(
            "SELECT s.doc_id, s.n, s.text, s.score, d.source, d.title FROM ("
            "SELECT doc_id, n, text, embedding <=> %s::vector AS dist, 1 - (embedding <=> %s::vector) AS score "
            "FROM {} ORDER BY embedding <=> %s::vector LIMIT %s) s "
            "LEFT JOIN of_rag_docs d ON d.index_name = %s AND d.doc_id = s.doc_id ORDER BY s.dist").format(self._table)
        params = (q, q, q, k, self.name)
        async with self._connection("searching", write=False) as conn:
            rows = await self._run_search(conn, stmt, params, exact, ef)
        return [{"chunk_id": f"{r[0]}#{r[1]:06d}", "doc_id": r[0], "n": r[1], "text": r[2], "score": float(r[3]),
                 "source": r[4], "title": r[5]} for r in rows]

    async def _run_search(self, conn: Any, stmt: Any, params: tuple[Any, ...], exact: bool, ef: int) -> list[Any]:
        if exact:
            async with conn.transaction():
                await conn.execute("SET LOCAL enable_indexscan = off")
                return list(await (await conn.execute(stmt, params)).fetchall())
        if self._ef_set.get(conn) != ef:
            await conn.execute(self._sql.SQL("SET hnsw.ef_search = {}").format(self._sql.Literal(ef)))
            self._ef_set[conn] = ef
        return list(await (await conn.execute(stmt, params)).fetchall())

    async def _hybrid(self, query: list[float] | None, text: str, k: int, *, exact: bool, depth: int,
                      vector_weight: float) -> list[dict[str, Any]]:
        sql = self._sql
        words = tsquery_words(text)
        n = max(depth, k)
        text_part = sql.SQL(
            "SELECT 't' AS r, doc_id, n, ts_rank(tsv, q, 1)::float8 AS s FROM {}, to_tsquery({}, %s) q "
            "WHERE tsv @@ q ORDER BY s DESC, doc_id, n LIMIT %s").format(self._table, sql.Literal(TEXT_SEARCH_CONFIG))
        params: tuple[Any, ...]
        if query is None:
            stmt, params = text_part, (words, k)
        else:
            q = _vector_text(query)
            vec_part = sql.SQL(
                "SELECT 'v' AS r, doc_id, n, (1 - (embedding <=> %s::vector))::float8 AS s FROM {} "
                "ORDER BY embedding <=> %s::vector LIMIT %s").format(self._table)
            if words:
                stmt = sql.SQL("({}) UNION ALL ({})").format(vec_part, text_part)
                params = (q, q, n, words, n)
            else:
                stmt, params = vec_part, (q, q, n)
        async with self._connection("searching", write=False) as conn:
            if not words and query is None:
                return []
            rows = await self._run_search(conn, stmt, params, exact, max(self.ef_search, n))
            vec = sorted(((r[1], r[2]), r[3]) for r in rows if r[0] == "v")
            vec.sort(key=lambda x: -x[1])  # stable: ties stay in (doc_id, n) order
            txt = [((r[1], r[2]), r[3]) for r in rows if r[0] == "t"]
            txt.sort(key=lambda x: -x[1])
            if query is None:
                ranked = [(key, s, None, s) for key, s in txt[:k]]
            else:
                ranked = rrf(vec, txt, k, vector_weight)
            if not ranked:
                return []
            cur = await conn.execute(sql.SQL(
                "SELECT c.doc_id, c.n, c.text, d.source, d.title FROM {} c "
                "JOIN unnest(%s::text[], %s::int[]) AS w(doc_id, n) ON c.doc_id = w.doc_id AND c.n = w.n "
                "LEFT JOIN of_rag_docs d ON d.index_name = %s AND d.doc_id = c.doc_id").format(self._table),
                ([key[0] for key, *_ in ranked], [key[1] for key, *_ in ranked], self.name))
            found = {(r[0], r[1]): r for r in await cur.fetchall()}
        out = []
        for key, score, vs, ts in ranked:
            r = found.get(key)
            if r is None:
                continue  # deleted between the two statements
            out.append({"chunk_id": f"{r[0]}#{r[1]:06d}", "doc_id": r[0], "n": r[1], "text": r[2], "score": score,
                        "source": r[3], "title": r[4], "vector_score": vs, "text_score": ts})
        return out

    async def get_chunk(self, doc_id: str, n: int) -> dict[str, Any] | None:
        async with self._connection("reading a chunk", write=False) as conn:
            cur = await conn.execute(self._sql.SQL(
                "SELECT c.text, d.source, d.title, d.chunks FROM {} c LEFT JOIN of_rag_docs d "
                "ON d.index_name = %s AND d.doc_id = c.doc_id WHERE c.doc_id = %s AND c.n = %s").format(self._table),
                (self.name, doc_id, n))
            row = await cur.fetchone()
        if row is None:
            return None
        return {"chunk_id": f"{doc_id}#{n:06d}", "doc_id": doc_id, "n": n, "text": row[0], "source": row[1],
                "title": row[2], "chunks": row[3]}

    async def list_docs(self, limit: int, after: str | None) -> list[dict[str, Any]]:
        async with self._connection("listing documents", write=False) as conn:
            cur = await conn.execute(
                "SELECT doc_id, digest, chunker, embedder, source, title, chunks, bytes, updated_at FROM of_rag_docs "
                "WHERE index_name = %s AND doc_id > %s ORDER BY doc_id LIMIT %s",
                (self.name, after or "", limit))
            rows = await cur.fetchall()
        keys = ("doc_id", "digest", "chunker", "embedder", "source", "title", "chunks", "bytes", "at")
        out = []
        for r in rows:
            d = dict(zip(keys, r, strict=False))
            d["at"] = d["at"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            out.append(d)
        return out

    async def stats(self) -> dict[str, Any]:
        async with self._connection("counting chunks", write=False) as conn:
            cur = await conn.execute(self._sql.SQL("SELECT count(*) FROM {}").format(self._table))
            (n,) = await cur.fetchone()
        return {"kind": self.kind, "chunks": n, "dimension": self.dimension}

    async def aclose(self) -> None:
        if self._owns:
            await self.pool.close()


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # signature, flags, no header extension
_COPY_TRAILER = struct.pack(">h", -1)


def _binary_row(doc_id: str, n: int, text: str, vec: Any, dim: int) -> bytes:
    """One row of binary COPY: 4 fields, each length-prefixed; pgvector's binary vector is
    int16 dimension, int16 unused, then big-endian float32s."""
    if np is not None:
        arr = np.asarray(vec, dtype=">f4")
        if arr.shape != (dim,) or not np.isfinite(arr).all():
            raise InvalidRagInput(f"the embedder returned a vector that is not {dim} finite numbers")
        vb = struct.pack(">HH", dim, 0) + arr.tobytes()
    else:
        floats = [float(x) for x in vec]
        if len(floats) != dim or not all(map(math.isfinite, floats)):
            raise InvalidRagInput(f"the embedder returned a vector that is not {dim} finite numbers")
        vb = struct.pack(f">HH{dim}f", dim, 0, *floats)
    db, tb = doc_id.encode("utf-8"), text.encode("utf-8")
    return b"".join((struct.pack(">hi", 4, len(db)), db, struct.pack(">iii", 4, n, len(tb)), tb,
                     struct.pack(">i", len(vb)), vb))


def _vector_text(vec: Any) -> str:
    """pgvector's text form ``[x,y,...]`` (finite floats only; json.dumps refuses NaN)."""
    return json.dumps([float(x) for x in vec], allow_nan=False, separators=(",", ":"))


__all__ = ["INDEX_NAME_RE", "PgVectorIndex", "RagIndex", "StoreIndex"]
