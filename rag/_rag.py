"""Retrieval over ingested documents: chunk, embed, index, search.

A document is identified by its ``doc_id`` (1-512 UTF-8 bytes, no ``#``,
no control characters) and described by the SHA-256 of its text, the
chunker's spec and the embedder's name. Ingesting a document whose three
are unchanged is a no-op (``status: "unchanged"``, nothing embedded,
nothing written); a changed one replaces its chunks in one transaction
(``"replaced"``). A chunk's id is ``<doc_id>#<n>`` (n zero-padded to 6).

Limits, checked before anything is written: ``max_document_bytes``
(default 5 MiB of UTF-8) per document, queries up to 4,096 bytes, at most
50 results per search.

Hashing and chunking a document are CPU work proportional to its size (a
5 MiB document: ~3 ms of SHA-256 and ~300 ms of sentence splitting, measured
on the 2-core development machine): past :data:`OFF_LOOP_BYTES` (together,
for ``ingest_many``) they run in a worker thread, so one large ingest does
not stall every other call the event loop serves (bench/bench_rag_loop.py:
the longest stall 521 ms inline, 130 ms so; the chunker, Python, still
shares the GIL).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from openfunctions.core import OpenFunctionsError
from openfunctions.store import Embedder, LexicalEmbedder, create_embedder, open_store

from ._chunk import Chunker
from ._errors import ChunkNotFound, DocumentTooLarge, InvalidRagInput, RagNotOpen
from ._index import BulkLoadable, PgVectorIndex, RagIndex, StoreIndex
from ._text import DEFAULT_SEARCH_MODE, check_mode, vector_weight_for

DEFAULT_MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
MAX_RESULTS = 50
EMBED_BATCH = 64
OFF_LOOP_BYTES = 64 * 1024  # documents (together) past this are hashed and chunked in a worker thread
_BAD_DOC_CHARS = re.compile(r"[#\x00-\x1f\x7f]")
CHUNK_ID_RE = re.compile(r"^(?P<doc>[^#\x00-\x1f\x7f]{1,512})#(?P<n>\d{6})$")

Progress = Callable[[int, int], Awaitable[None] | None]


@dataclass(frozen=True)
class IngestResult:
    doc_id: str
    status: str  # "added" | "replaced" | "unchanged"
    chunks: int
    digest: str

    def to_dict(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "status": self.status, "chunks": self.chunks, "digest": self.digest}


def check_doc_id(doc_id: Any) -> str:
    if not isinstance(doc_id, str) or not doc_id or doc_id != doc_id.strip():
        raise InvalidRagInput(f"doc_id {repr(doc_id)[:80]} is invalid: a non-empty string without leading/trailing spaces")
    if _BAD_DOC_CHARS.search(doc_id):
        raise InvalidRagInput(f"doc_id {doc_id[:80]!r} is invalid: it must not contain '#' or control characters")
    try:
        n = len(doc_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRagInput("doc_id contains a lone surrogate (not valid UTF-8)") from None
    if n > 512:
        raise InvalidRagInput(f"doc_id is {n} bytes; the limit is 512")
    return doc_id


class _Checked(NamedTuple):
    """A document that passed :meth:`Rag._check_doc`."""

    doc_id: str
    text: str
    source: str | None
    title: str | None
    data: bytes  # text as UTF-8
    digest: str  # "sha256:<hex>" of data


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _off_loop(work: Callable[[], Any], size: int) -> Any:
    """``work()``, in a worker thread when ``size`` bytes are past :data:`OFF_LOOP_BYTES` (hashlib and the
    chunker's regular expressions let other threads run meanwhile)."""
    return await anyio.to_thread.run_sync(work) if size > OFF_LOOP_BYTES else work()


def _short_text(what: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) > 1024):
        raise InvalidRagInput(f"{what} must be a string of at most 1024 characters")
    return value


def parse_chunk_id(chunk_id: Any) -> tuple[str, int]:
    m = CHUNK_ID_RE.match(chunk_id) if isinstance(chunk_id, str) else None
    if m is None:
        raise InvalidRagInput(f"chunk id {repr(chunk_id)[:80]} is invalid: chunk ids look like <doc_id>#000000")
    return m.group("doc"), int(m.group("n"))


class Rag:
    """Ingest and search documents over one index (embedded or pgvector)."""

    def __init__(self, index: RagIndex | None, embedder: Embedder | None, *, chunker: Chunker | None = None,
                 max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES, search_mode: str = DEFAULT_SEARCH_MODE) -> None:
        # index and embedder are None together in a served profile's Rag until its index opens (rag/_profile.py)
        self.search_mode = check_mode(search_mode)
        self.index = index
        self.embedder = embedder
        self.chunker = chunker or Chunker()
        self.max_document_bytes = max_document_bytes
        self.unavailable: str | None = None  # why the index could not be opened (served under 'all')

    @property
    def vector_weight(self) -> float:
        """Hybrid's RRF weight of the vector list (rag/_text.py): follows the embedder, which a profile sets late."""
        return vector_weight_for(self.embedder)

    def _idx(self) -> RagIndex:
        if self.index is None:
            raise RagNotOpen(f"the RAG index is not available: {self.unavailable}" if self.unavailable
                             else "the RAG index is not open yet")
        return self.index

    def _emb(self) -> Embedder:
        if self.embedder is None:
            self._idx()  # the same error, saying why
            raise RagNotOpen("the RAG index has no embedder yet")
        return self.embedder

    async def _embed(self, texts: list[str], progress: Progress | None = None) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), EMBED_BATCH):
            out.extend(await anyio.to_thread.run_sync(self._emb().embed, texts[i:i + EMBED_BATCH]))
            if progress is not None:
                r = progress(min(i + EMBED_BATCH, len(texts)), len(texts))
                if r is not None:
                    await r
        return out

    def _check_doc(self, doc_id: Any, text: Any, source: Any, title: Any) -> _Checked:
        """Validate one document: its fields and its UTF-8 bytes (``digest`` left empty: :meth:`_digested`)."""
        doc_id = check_doc_id(doc_id)
        if not isinstance(text, str):
            raise InvalidRagInput("text must be a string")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRagInput(f"document {doc_id!r} contains a lone surrogate (not valid UTF-8)") from None
        if len(data) > self.max_document_bytes:
            raise DocumentTooLarge(
                f"document {doc_id!r} is {len(data)} bytes; the limit is {self.max_document_bytes} (nothing was written)",
                details={"bytes": len(data), "limit": self.max_document_bytes})
        return _Checked(doc_id, text, _short_text("source", source), _short_text("title", title), data, "")

    async def _digested(self, docs: list[_Checked]) -> list[_Checked]:
        """``docs`` with their digests (off the event loop when large: :func:`_off_loop`)."""
        digests = await _off_loop(lambda: [_digest(d.data) for d in docs], sum(len(d.data) for d in docs))
        return [d._replace(digest=h) for d, h in zip(docs, digests, strict=True)]

    async def _split(self, texts: list[str], size: int) -> list[list[str]]:
        """Each text's chunks (off the event loop when ``size``, their bytes together, is large)."""
        return list(await _off_loop(lambda: [self.chunker.split(t) for t in texts], size))

    def _unchanged(self, old: dict[str, Any], doc: _Checked) -> bool:
        return (old["digest"] == doc.digest and old["chunker"] == self.chunker.spec and old["embedder"] == self._emb().name
                and old.get("source") == doc.source and old.get("title") == doc.title)

    async def ingest(self, doc_id: str, text: str, *, source: str | None = None, title: str | None = None,
                     progress: Progress | None = None) -> IngestResult:
        """Chunk, embed and index ``text`` as ``doc_id``; a no-op if nothing changed."""
        (doc,) = await self._digested([self._check_doc(doc_id, text, source, title)])
        data, digest = doc.data, doc.digest
        index = self._idx()
        old = await index.get_doc(doc_id)
        if old is not None and self._unchanged(old, doc):
            return IngestResult(doc_id, "unchanged", old["chunks"], digest)
        (chunks,) = await self._split([text], len(data))
        if not chunks:
            raise InvalidRagInput(f"document {doc_id!r} has no text to index")
        vectors = await self._embed(chunks, progress)
        info = {"digest": digest, "chunker": self.chunker.spec, "embedder": self._emb().name, "source": source,
                "title": title, "chunks": len(chunks), "bytes": len(data)}
        await index.replace_doc(doc_id, info, chunks, vectors)
        return IngestResult(doc_id, "replaced" if old is not None else "added", len(chunks), digest)

    async def ingest_many(self, docs: Iterable[Mapping[str, Any]], *, batch_chunks: int = 1024,
                          progress: Progress | None = None) -> list[IngestResult | OpenFunctionsError]:
        """Ingest many documents (``{"doc_id", "text", "source"?, "title"?}`` each) with few writes.

        Same result per document as :meth:`ingest` (unchanged ones skipped), in the order given;
        a document that is invalid (too large, bad id, no text, a ``doc_id`` given twice) gets
        its error in its place and the others go in. What makes it faster than a loop over
        :meth:`ingest`: documents are embedded in batches that span documents, and written
        ``batch_chunks`` chunks at a time (one store transaction, or one PostgreSQL transaction
        with one ``COPY``) while the next batch is being embedded. Each batch is atomic; a crash
        mid-way leaves earlier batches in and later ones out (ingesting again is a no-op for
        those in). ``progress(done, total)`` counts chunks written. For a first load into
        pgvector, wrap it in :meth:`bulk_load`.
        """
        if not isinstance(batch_chunks, int) or batch_chunks < 1:
            raise InvalidRagInput("batch_chunks must be a positive integer")
        index = self._idx()
        items = list(docs)
        results: list[IngestResult | OpenFunctionsError | None] = [None] * len(items)
        checked: list[tuple[int, _Checked]] = []
        seen: set[str] = set()
        for i, d in enumerate(items):
            try:
                if not isinstance(d, Mapping):
                    raise InvalidRagInput("each document is a mapping with doc_id and text")
                doc = self._check_doc(d.get("doc_id"), d.get("text"), d.get("source"), d.get("title"))
                if doc.doc_id in seen:
                    raise InvalidRagInput(f"document {doc.doc_id!r} is given twice in one batch")
                seen.add(doc.doc_id)
                checked.append((i, doc))
            except OpenFunctionsError as exc:
                results[i] = exc
        checked = list(zip([i for i, _ in checked], await self._digested([doc for _, doc in checked]), strict=True))
        olds = await index.get_docs([doc.doc_id for _, doc in checked])
        changed: list[tuple[int, _Checked]] = []
        for i, doc in checked:
            old = olds.get(doc.doc_id)
            if old is not None and self._unchanged(old, doc):
                results[i] = IngestResult(doc.doc_id, "unchanged", old["chunks"], doc.digest)
            else:
                changed.append((i, doc))
        split = await self._split([doc.text for _, doc in changed], sum(len(doc.data) for _, doc in changed))
        todo: list[dict[str, Any]] = []
        for (i, doc), chunks in zip(changed, split, strict=True):
            old = olds.get(doc.doc_id)
            if not chunks:
                results[i] = InvalidRagInput(f"document {doc.doc_id!r} has no text to index")
                continue
            todo.append({"i": i, "doc_id": doc.doc_id, "chunks": chunks, "old_chunks": old["chunks"] if old else 0,
                         "status": "replaced" if old is not None else "added",
                         "info": {"digest": doc.digest, "chunker": self.chunker.spec, "embedder": self._emb().name,
                                  "source": doc.source, "title": doc.title, "chunks": len(chunks),
                                  "bytes": len(doc.data)}})
        batches: list[list[dict[str, Any]]] = []
        size = 0
        for t in todo:
            if not batches or size + len(t["chunks"]) > batch_chunks:
                batches.append([])
                size = 0
            batches[-1].append(t)
            size += len(t["chunks"])
        total = sum(len(t["chunks"]) for t in todo)
        done = 0
        # two stages: the embedder (a worker thread) works on batch n+1 while batch n is written
        send, receive = anyio.create_memory_object_stream[list[dict[str, Any]]](1)
        failed: list[BaseException] = []

        async def embed_all() -> None:
            async with send:
                try:
                    for batch in batches:
                        vectors = await self._embed([c for t in batch for c in t["chunks"]])
                        at = 0
                        for t in batch:
                            t["vectors"] = vectors[at:at + len(t["chunks"])]
                            at += len(t["chunks"])
                        await send.send(batch)
                except Exception as exc:  # raised below as itself, not wrapped in an exception group
                    failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(embed_all)
            async with receive:
                async for batch in receive:
                    await index.replace_docs(batch)
                    for t in batch:
                        results[t["i"]] = IngestResult(t["doc_id"], t["status"], len(t["chunks"]), t["info"]["digest"])
                        done += len(t["chunks"])
                    if progress is not None:
                        r = progress(done, total)
                        if r is not None:
                            await r
        if failed:
            raise failed[0]
        return [r for r in results if r is not None]

    @asynccontextmanager
    async def bulk_load(self, **hnsw: Any) -> AsyncIterator[None]:
        """A first load into pgvector: its search indexes (HNSW and the full-text GIN) are dropped
        on entry and built once on exit, even after an error (``hnsw``: :meth:`PgVectorIndex.build_hnsw`'s
        parameters). Maintaining an HNSW graph row by row is what made loads slow (docs/PERFORMANCE.md);
        searches meanwhile are exact scans. On the embedded index it does nothing (its search
        structures are rebuilt in memory on the first search after a write)."""
        index = self._idx()
        if not isinstance(index, BulkLoadable):
            yield
            return
        await index.drop_search_indexes()
        try:
            yield
        finally:
            await index.build_search_indexes(**hnsw)

    async def search(self, query: str, *, k: int = 5, exact: bool = False, mode: str | None = None) -> list[dict[str, Any]]:
        """The ``k`` chunks that best match ``query``, best first.

        ``mode`` (default: the Rag's ``search_mode``, itself ``"hybrid"`` by default):
        ``"hybrid"`` fuses the embedding ranking with full-text ranking (BM25 on the embedded
        index, PostgreSQL full-text on pgvector) by reciprocal rank fusion (the vector list
        weighted by ``self.vector_weight``: 0.5 for the lexical embedder, 1 for a model; rag/_text.py):
        ``score`` is the fused score (at most 2/61), ``vector_score`` the cosine and ``text_score`` the text rank, each
        None where that ranker did not list the chunk; ``"vector"``: cosine only (``score`` is
        the cosine); ``"text"``: full-text only. ``exact`` turns pgvector's HNSW off for the
        vector part (a brute-force scan)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidRagInput("query must be a non-empty string")
        if len(query.encode("utf-8", "surrogatepass")) > 4096:
            raise InvalidRagInput("query is over 4096 bytes")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_RESULTS:
            raise InvalidRagInput(f"k must be an integer from 1 to {MAX_RESULTS}, got {k!r}")
        mode = check_mode(self.search_mode if mode is None else mode)
        index = self._idx()
        if mode == "text":
            return await index.search(None, k, exact=exact, text=query)
        (vec,) = await anyio.to_thread.run_sync(self._emb().embed, [query])
        return await index.search(vec, k, exact=exact, text=query if mode == "hybrid" else None,
                                  vector_weight=self.vector_weight)

    async def get_chunk(self, chunk_id: str) -> dict[str, Any]:
        doc_id, n = parse_chunk_id(chunk_id)
        got = await self._idx().get_chunk(doc_id, n)
        if got is None:
            raise ChunkNotFound(f"no chunk {chunk_id!r}")
        return got

    async def delete_document(self, doc_id: str) -> bool:
        return await self._idx().delete_doc(check_doc_id(doc_id))

    async def list_documents(self, *, limit: int = 50, after: str | None = None) -> list[dict[str, Any]]:
        if not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidRagInput("limit must be an integer from 1 to 1000")
        return await self._idx().list_docs(limit, check_doc_id(after) if after is not None else None)

    async def stats(self) -> dict[str, Any]:
        return {**await self._idx().stats(), "embedder": self._emb().name, "chunker": self.chunker.spec,
                "search_mode": self.search_mode}

    async def aclose(self) -> None:
        if self.index is not None:
            await self.index.aclose()


async def open_rag(*, url: str | None = None, data_dir: str | os.PathLike[str] | None = None, name: str = "rag",
                   embedder: Any = None, chunker: Chunker | None = None,
                   max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES, search_mode: str = DEFAULT_SEARCH_MODE) -> Rag:
    """Open the RAG index ``name``: pgvector for a ``postgresql://`` ``url``, else the embedded
    index in ``<data_dir>/store/<name>/`` (``data_dir`` defaults to ``<cwd>/.data``).

    ``embedder``: an object or a name (``"lexical"``, ``"minilm"``, ...; see
    ``openfunctions.store.create_embedder``). Not given (None): an existing index opens with the
    lexical embedder it was built with (an index built by ``lexical-v1-256`` before v2 became the
    default keeps working), a new one gets ``"lexical"``. Raises IndexMismatch when the index was
    built by another embedder than the one given. ``search_mode``: ``"hybrid"`` (default),
    ``"vector"`` or ``"text"`` (see :meth:`Rag.search`).
    """
    check_mode(search_mode)
    if url:
        index: RagIndex = await PgVectorIndex.connect(url, name)
    else:
        index = StoreIndex(await open_store(name, data_dir=data_dir))
    try:
        if embedder is None:
            embedder = LexicalEmbedder.from_name(await index.recorded_embedder() or "")
        emb = await anyio.to_thread.run_sync(create_embedder, embedder)
        await index.open(emb)
    except BaseException:
        await index.aclose()
        raise
    return Rag(index, emb, chunker=chunker, max_document_bytes=max_document_bytes, search_mode=search_mode)


TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text", ".csv", ".json", ".html", ".htm", ".py", ".toml", ".yaml", ".yml")


@dataclass
class CollectedFiles:
    """What :func:`collect_files` found: the files to ingest and the symbolic links it did not follow."""

    files: list[Path]
    skipped_links: list[Path]


def collect_files(paths: list[str | os.PathLike[str]], *, follow_links: bool = False) -> CollectedFiles:
    """Files to ingest: each file named, and text files (by suffix) under each directory, sorted.

    A directory is walked without leaving it: a symbolic link found inside it (to a file or a
    directory, wherever it points) is not followed but listed in ``skipped_links``, so a link
    planted in a shared folder cannot pull, say, ``~/.ssh/id_rsa`` or a credentials file into an
    index that ``rag_search`` serves. ``follow_links=True`` (CLI ``--follow-links``) follows them,
    also out of the directory, visiting each real directory once (a link cycle ends). A path named
    explicitly is taken as given, link or not: the caller chose it. Hidden files and directories
    (a name starting with ``.``) are skipped either way.
    """
    out: list[Path] = []
    skipped: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found: list[Path] = []
            seen: set[tuple[int, int]] = set()
            for root, dirs, names in os.walk(p, followlinks=follow_links):
                st = os.stat(root)
                if (st.st_dev, st.st_ino) in seen:  # a link back up the tree (only with follow_links)
                    dirs[:] = []
                    continue
                seen.add((st.st_dev, st.st_ino))
                base = Path(root)
                keep = []
                for d in sorted(dirs):
                    if d.startswith("."):
                        continue
                    if (base / d).is_symlink() and not follow_links:
                        skipped.append(base / d)
                        continue
                    keep.append(d)
                dirs[:] = keep
                for name in names:
                    f = base / name
                    if name.startswith(".") or f.suffix.lower() not in TEXT_SUFFIXES:
                        continue
                    if f.is_symlink() and not follow_links:
                        skipped.append(f)
                        continue
                    if f.is_file():
                        found.append(f)
            out.extend(sorted(found))
        elif p.is_file():
            out.append(p)
        else:
            raise InvalidRagInput(f"{str(p)!r} is not a file or directory")
    return CollectedFiles(out, sorted(skipped))


def doc_id_for(path: Path) -> str:
    """A file's document id: its path relative to the cwd when inside it, else absolute."""
    p = path.resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


__all__ = ["DEFAULT_MAX_DOCUMENT_BYTES", "CollectedFiles", "IngestResult", "Rag", "check_doc_id", "collect_files", "doc_id_for",
           "open_rag", "parse_chunk_id"]
