"""RAG recall@10 and speed at 100,000 chunks on a corpus with topical structure, in one run.

Why a second RAG benchmark: bench/bench_rag.py's corpus draws every word from
one Zipf vocabulary, so its chunks have no topics: every chunk is about as far
from a query as every other (beyond the first hit the exact top 10 are
near-ties), which is the worst case for any graph index and not what a
document collection looks like. Here the corpus has the structure real text
has (seeded, synthetic, reproducible):

- a vocabulary of 182,000 words (no word in two topics); the 2,000 most common form the background
  (Zipf: the function words every text shares);
- 200 topics of 300 words each, each topic with 10 subtopics of 60 words
  (2,000 subtopics); a word of a document is drawn from the background (35%),
  its topic (35%, Zipf inside the topic) or its subtopic (30%);
- documents of ~10 chunks (the default chunker: 180 words, overlap 30), each
  about one subtopic: 100,000 chunks = ~10,000 documents, ~50 chunks per
  subtopic, ~500 per topic;
- queries of two kinds, each drawn from a random subtopic's distribution, never
  copied from a chunk: ``question`` (12 words: 3 background, 5 topic, 4
  subtopic) and ``passage`` (50 words mixed like a document's: a paragraph
  about the subject, as a "more like this" search or a query rewritten into a
  hypothetical answer sends).

Embedders: ``--embedders`` names them (``create_embedder`` names; default
``lexical``); each gets its own pgvector index in the same database. Vectors are
computed once (through ``embed``) and cached under /tmp by corpus size and
embedder name, so that tuning runs do not re-embed. Each index is loaded through ``PgVectorIndex.replace_doc`` (one
transaction and one COPY per document) with the HNSW index dropped, then
``build_hnsw(m, ef_construction)`` builds it; each ``hnsw.ef_search`` is
measured against pgvector's exact search (index scans off: a sequential scan
computing every distance) in the same database and the same run:
median latency of ``index.search`` (query vector given), speed ratio (the exact
search timed again on ``--paired`` of the queries, each right after its HNSW
search, so both medians come from the same minutes), and
recall@10 = |HNSW top 10 ∩ exact top 10| / 10 averaged over the queries, and
the same counting ties (a result as close as the 10th exact neighbour, within
1e-3, counts: ann-benchmarks' definition). The median gap between the 10th and
11th exact similarity shows how separated the true top 10 is. Retrieval
quality (not recall): the share of the exact top 10 that comes from the
query's own subtopic.

``--embedded`` also measures the embedded exact index (``StoreIndex``, numpy
over a float32 matrix) against sqlite-vec (``vec0`` virtual table, exact KNN)
and a plain numpy matrix product over the same 100,000 vectors.

Usage: python bench/bench_rag_recall.py [--chunks 100000] [--queries 100] [--embedders lexical-v1 lexical-v2]
           [--hnsw 16:64 24:128] [--ef-search 100 200 400 800] [--paired 25] [--embedded] [--dsn URL] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _report import median, table, write_section  # noqa: E402
from bench_rag import timed  # noqa: E402
from bench_store import pg_server  # noqa: E402

from openfunctions.rag import Chunker, PgVectorIndex, create_embedder  # noqa: E402

BACKGROUND, TOPICS, SUBTOPICS, TOPIC_WORDS, SUB_WORDS = 2_000, 200, 10, 300, 60
VOCAB = BACKGROUND + TOPICS * TOPIC_WORDS + TOPICS * SUBTOPICS * SUB_WORDS  # 182,000: no word in two topics
MIX = (0.35, 0.35, 0.30)  # background, topic, subtopic


def _zipf(n: int, s: float = 1.0) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** s
    return w / w.sum()


class Corpus:
    def __init__(self, n_chunks: int, seed: int = 13) -> None:
        rng = np.random.default_rng(seed)
        self.words = np.array([f"w{i}" for i in range(VOCAB)])
        rest = rng.permutation(np.arange(BACKGROUND, VOCAB))
        self.topic_vocab = [rest[t * TOPIC_WORDS:][:TOPIC_WORDS] for t in range(TOPICS)]
        base = TOPICS * TOPIC_WORDS
        self.sub_vocab = [[rest[base + (t * SUBTOPICS + s) * SUB_WORDS:][:SUB_WORDS]
                           for s in range(SUBTOPICS)] for t in range(TOPICS)]
        self.p_bg, self.p_topic, self.p_sub = _zipf(BACKGROUND), _zipf(TOPIC_WORDS), _zipf(SUB_WORDS, 0.8)
        self.rng = rng
        self.docs: list[tuple[str, str, int, int]] = []  # (doc_id, text, topic, subtopic)
        words_per_doc = 10 * 150 + 30
        for d in range(max(1, n_chunks // 10)):
            t, s = int(rng.integers(TOPICS)), int(rng.integers(SUBTOPICS))
            ws = self._draw(t, s, words_per_doc, MIX)
            text = " ".join(" ".join(ws[i:i + 15]) + "." for i in range(0, len(ws), 15))
            self.docs.append((f"doc{d:06d}", text, t, s))

    def _draw(self, t: int, s: int, n: int, mix: tuple[float, float, float]) -> list[str]:
        rng = self.rng
        which = rng.choice(3, size=n, p=mix)
        out = np.empty(n, dtype=np.int64)
        k = [int((which == i).sum()) for i in range(3)]
        out[which == 0] = rng.choice(BACKGROUND, size=k[0], p=self.p_bg)
        out[which == 1] = self.topic_vocab[t][rng.choice(TOPIC_WORDS, size=k[1], p=self.p_topic)]
        out[which == 2] = self.sub_vocab[t][s][rng.choice(SUB_WORDS, size=k[2], p=self.p_sub)]
        return list(self.words[out])

    def queries(self, n: int, kind: str = "question", seed: int = 17) -> list[str]:
        return self.labelled_queries(n, kind, seed)[0]

    def labelled_queries(self, n: int, kind: str = "question", seed: int = 17) -> tuple[list[str], list[tuple[int, int]]]:
        """``question``: 12 words (3 background, 5 topic, 4 subtopic); ``passage``: 50 words drawn
        like a document's (a paragraph about the subject, as when a query is rewritten into a
        hypothetical answer or a "more like this" search)."""
        rng = np.random.default_rng(seed)
        out, labels = [], []
        for _ in range(n):
            _, _, t, s = self.docs[int(rng.integers(len(self.docs)))]
            labels.append((t, s))
            if kind == "passage":
                self.rng, keep = rng, self.rng
                try:
                    out.append(" ".join(self._draw(t, s, 50, MIX)))
                finally:
                    self.rng = keep
                continue
            ws = (list(self.words[rng.choice(BACKGROUND, 3, p=self.p_bg)])
                  + list(self.words[self.topic_vocab[t][rng.choice(TOPIC_WORDS, 5, p=self.p_topic)]])
                  + list(self.words[self.sub_vocab[t][s][rng.choice(SUB_WORDS, 4, p=self.p_sub)]]))
            out.append(" ".join(ws))
        return out, labels

    def label(self, chunk_id: str) -> tuple[int, int]:
        """The (topic, subtopic) of the document a chunk id (``doc<n>#<k>``) belongs to."""
        _, _, t, s = self.docs[int(chunk_id[3:chunk_id.index("#")])]
        return t, s


def precision(results: list[list[str]], labels: list[tuple[int, int]], corpus: Corpus) -> float:
    """Retrieval quality: the share of the results that come from the query's own subtopic (the
    documents a reader would call relevant), averaged over the queries."""
    return sum(sum(corpus.label(c) == lab for c in r) / max(1, len(r))
               for r, lab in zip(results, labels, strict=False)) / len(results)


def chunk_and_embed(corpus: Corpus, embedder: Any, chunker: Chunker) -> tuple[list[list[str]], np.ndarray, float]:
    """Each document's chunks, and all their vectors (cached under /tmp by corpus size and embedder)."""
    chunks = [chunker.split(text) for _, text, _, _ in corpus.docs]
    total = sum(map(len, chunks))
    key = hashlib.sha256(f"topics-v1:{len(corpus.docs)}:{embedder.name}:{chunker.spec}:{total}".encode()).hexdigest()[:16]
    cache = os.path.join(tempfile.gettempdir(), f"of-bench-rag-{key}.npy")
    if os.path.exists(cache):
        return chunks, np.load(cache), 0.0
    t = time.perf_counter()
    flat = [c for cs in chunks for c in cs]
    vecs = []
    for i in range(0, len(flat), 2000):
        vecs.extend(embedder.embed(flat[i:i + 2000]))
        print(f"  embedded {min(i + 2000, len(flat)):,}/{len(flat):,} chunks "
              f"({min(i + 2000, len(flat)) / (time.perf_counter() - t):,.0f}/s)", file=sys.stderr)
    rate = len(flat) / (time.perf_counter() - t)
    arr = np.asarray(vecs, dtype="<f4")
    np.save(cache, arr)
    return chunks, arr, rate


def recall(approx: list[list[str]], exact: list[list[str]]) -> float:
    return sum(len(set(a) & set(e)) / max(1, len(e)) for a, e in zip(approx, exact, strict=False)) / len(exact)


def recall_with_ties(approx: list[list[dict]], exact: list[list[dict]], eps: float = 1e-3) -> float:
    """ann-benchmarks' definition: a result counts when it is as close as the 10th exact neighbour
    (within ``eps``): a chunk tied with the true neighbours is not a miss."""
    return sum(sum(1 for h in a if h["score"] >= e[-1]["score"] - eps) / max(1, len(e))
               for a, e in zip(approx, exact, strict=False) if e) / len(exact)


def gap(exact_scores: np.ndarray) -> float:
    """Median over queries of (10th - 11th exact similarity): how separated the true top 10 is."""
    return float(np.median(exact_scores[:, 9] - exact_scores[:, 10]))


async def pgvector_part(args, dsn, corpus, chunks, vecs, qsets, emb, rows) -> None:
    """One embedder's index: load, exact search (the truth, and retrieval quality), then each HNSW build."""
    qvecs = {kind: qv for kind, (qv, _) in qsets.items()}
    name = f"r{uuid.uuid4().hex[:8]}"
    index = await PgVectorIndex.connect(dsn, name)
    await index.open(emb)
    try:
        await index.drop_hnsw()
        t, pos = time.perf_counter(), 0
        for (doc_id, text, _, _), cs in zip(corpus.docs, chunks, strict=False):
            info = {"digest": "sha256:" + hashlib.sha256(text.encode()).hexdigest(), "chunker": "bench",
                    "embedder": emb.name, "chunks": len(cs), "bytes": len(text)}
            await index.replace_doc(doc_id, info, cs, vecs[pos:pos + len(cs)])
            pos += len(cs)
        load = time.perf_counter() - t
        rows.append([f"**{emb.name}**: load pgvector, HNSW dropped (replace_doc: COPY per document)",
                     f"{pos / load:,.0f} chunks/s", f"{pos:,} chunks in {load:,.0f} s"])
        async with index.pool.connection() as conn:
            await conn.execute("VACUUM ANALYZE {}".format(f"of_rag_chunks_{name}"))
        truth = {}
        for kind, qv in qvecs.items():
            for _ in range(3):
                await index.search(qv[0], 10, exact=True)
            el, eres = await timed(lambda q: index.search(q, 11, exact=True), qv)
            g = gap(np.array([[h["score"] for h in r] for r in eres]))
            eres = [r[:10] for r in eres]
            truth[kind] = (el, eres, [[h["chunk_id"] for h in r] for r in eres])
            quality = precision(truth[kind][2], qsets[kind][1], corpus)
            rows.append([f"peer: pgvector exact, {kind} queries (sequential scan)", f"{median(el):.1f} ms",
                         f"recall@10 = 1.0 by definition; retrieval quality (share of the top 10 from the "
                         f"query's subtopic): {quality:.3f}; median gap between the 10th and 11th exact "
                         f"similarity: {g:.4f}"])
        for spec in args.hnsw:
            m, efc = (int(x) for x in spec.split(":"))
            await index.drop_hnsw()
            t = time.perf_counter()
            await index.build_hnsw(m=m, ef_construction=efc, parallel_workers=args.build_workers)
            build = time.perf_counter() - t
            print(f"built m={m} efc={efc} in {build:.0f} s", file=sys.stderr)
            rows.append([f"build_hnsw(m={m}, ef_construction={efc})", f"{build:,.0f} s",
                         f"{pos / build:,.0f} chunks/s"])
            for ef in args.ef_search:
                index.ef_search = ef
                for kind, qv in qvecs.items():
                    el, eres, exact_ids = truth[kind]
                    for _ in range(3):
                        await index.search(qv[0], 10)
                    hl, hres, el_now = [], [], []
                    for i, q in enumerate(qv):  # the exact peer again, query by query, in the same minutes
                        t = time.perf_counter()
                        hres.append(await index.search(q, 10))
                        hl.append((time.perf_counter() - t) * 1000)
                        if i < args.paired:
                            t = time.perf_counter()
                            await index.search(q, 10, exact=True)
                            el_now.append((time.perf_counter() - t) * 1000)
                    r = recall([[h["chunk_id"] for h in x] for x in hres], exact_ids)
                    rt = recall_with_ties(hres, eres)
                    speed = median(el_now or el) / median(hl)
                    ok = "meets" if r >= 0.95 and speed >= 10 else "misses"
                    rows.append([f"  {emb.name}: HNSW m={m} ef_construction={efc}, ef_search={ef}, {kind}s",
                                 f"{median(hl):.1f} ms",
                                 f"recall@10 = {r:.3f} (ties counted: {rt:.3f}), {speed:.1f}x exact's speed "
                                 f"(exact: {median(el_now or el):.0f} ms in the same minutes) ({ok} the target)"])
                    print(rows[-1], file=sys.stderr)
    finally:
        async with index.pool.connection() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS of_rag_chunks_{name}")
            await conn.execute("DELETE FROM of_rag_docs WHERE index_name = %s", (name,))
            await conn.execute("DELETE FROM of_rag_indexes WHERE name = %s", (name,))
        await index.aclose()


async def embedded_part(args, corpus, chunks, vecs, qvecs, emb, rows) -> None:
    """The embedded exact index vs sqlite-vec vs bare numpy, over the same vectors."""
    from openfunctions.rag import StoreIndex
    from openfunctions.store import open_local_store

    tmp = tempfile.mkdtemp(prefix="ofbench-rag-emb-")
    try:
        store = await open_local_store("rag", tmp)
        index = StoreIndex(store)
        await index.open(emb)
        t, pos = time.perf_counter(), 0
        for (doc_id, text, _, _), cs in zip(corpus.docs, chunks, strict=False):
            info = {"digest": "x", "chunker": "bench", "embedder": emb.name, "chunks": len(cs), "bytes": len(text)}
            await index.replace_doc(doc_id, info, cs, vecs[pos:pos + len(cs)].tolist())
            pos += len(cs)
        load = time.perf_counter() - t
        rows.append(["load embedded index (local store, one journal record per document)", f"{pos / load:,.0f} chunks/s",
                     f"{pos:,} chunks"])
        await index.search(qvecs[0], 10)
        ol, ores = await timed(lambda q: index.search(q, 10), qvecs)
        ours = [[h["chunk_id"] for h in r] for r in ores]
        rows.append(["embedded exact index (StoreIndex.search: numpy + chunk reads)", f"{median(ol):.1f} ms",
                     "exact"])
        ids = [f"{doc_id}#{n:06d}" for (doc_id, *_), cs in zip(corpus.docs, chunks, strict=False) for n in range(len(cs))]
        # bare numpy over the same float32 matrix: the floor for an exact in-memory scan
        mat = np.ascontiguousarray(vecs)
        lat = []
        for q in qvecs:
            t = time.perf_counter()
            s = np.einsum("ij,j->i", mat, np.asarray(q, dtype="<f4"))
            top = np.argpartition(-s, 9)[:10]
            top[np.argsort(-s[top])]
            lat.append((time.perf_counter() - t) * 1000)
        rows.append(["  peer: bare numpy scan of the same matrix (no store reads)", f"{median(lat):.1f} ms", "exact"])
        try:
            import sqlite_vec
        except ImportError as exc:
            rows.append(["  peer: sqlite-vec", "not measured", f"not installed ({exc})"])
            await index.aclose()
            return
        db, how = _sqlite_with_extensions(os.path.join(tmp, "vec.db"))
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        db.enable_load_extension(False)
        db.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{vecs.shape[1]}] distance_metric=cosine)")
        t = time.perf_counter()
        db.execute("BEGIN")
        db.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                       [(i + 1, vecs[i].tobytes()) for i in range(len(vecs))])
        db.execute("COMMIT")
        sv_load = time.perf_counter() - t
        lat, sv = [], []
        for q in qvecs:
            t = time.perf_counter()
            got = list(db.execute("SELECT rowid, distance FROM v WHERE embedding MATCH ? AND k = 10 ORDER BY distance",
                                  (np.asarray(q, dtype="<f4").tobytes(),)))
            lat.append((time.perf_counter() - t) * 1000)
            sv.append([ids[r - 1] for r, _ in got])
        version = next(iter(db.execute("SELECT vec_version()")))[0]
        agree = recall(sv, ours)
        rows.append([f"  peer: sqlite-vec {version} vec0 exact KNN (ids only; through {how})", f"{median(lat):.1f} ms",
                     f"load {len(vecs) / sv_load:,.0f} vectors/s; same top 10 as ours: {agree:.3f}; "
                     f"ours is {median(lat) / median(ol):.2f}x its speed"])
        db.close()
        await index.aclose()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sqlite_with_extensions(path: str):
    """A SQLite connection that can load extensions: the stdlib's when its build allows it (this machine's
    pyenv Python does not), else apsw's (it bundles its own SQLite)."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    if hasattr(conn, "enable_load_extension"):
        return conn, f"sqlite3, SQLite {sqlite3.sqlite_version}"
    conn.close()
    import apsw

    return apsw.Connection(path), f"apsw, SQLite {apsw.sqlite_lib_version()}"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--embedders", nargs="+", default=["lexical"],
                    help="embedder names for create_embedder (lexical, lexical-v1, lexical:512, ...): each gets its own index")
    ap.add_argument("--hnsw", nargs="+", default=["16:64"], help="m:ef_construction pairs to build and measure")
    ap.add_argument("--ef-search", type=int, nargs="+", default=[40, 100, 200])
    ap.add_argument("--paired", type=int, default=25,
                    help="per HNSW row, time exact search again on this many queries, each right after its HNSW search")
    ap.add_argument("--build-workers", type=int, default=None)
    ap.add_argument("--embedded", action="store_true", help="also the embedded index vs sqlite-vec")
    ap.add_argument("--query-kinds", nargs="+", default=["question", "passage"], choices=["question", "passage"])
    ap.add_argument("--skip-pg", action="store_true")
    ap.add_argument("--dsn")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    corpus = Corpus(args.chunks)
    chunker = Chunker()
    print(f"corpus: {len(corpus.docs):,} documents ({time.perf_counter() - t:.0f} s)", file=sys.stderr)
    rows: list[list[str]] = []
    embedders = [create_embedder(spec) for spec in args.embedders]
    with contextlib.ExitStack() as stack:
        dsn = None if args.skip_pg else stack.enter_context(pg_server(args.dsn))
        for emb in embedders:
            chunks, vecs, rate = chunk_and_embed(corpus, emb, chunker)
            qsets = {}
            for kind in args.query_kinds:
                texts, labels = corpus.labelled_queries(args.queries, kind)
                qsets[kind] = (emb.embed(texts), labels)
            if rate:
                rows.append([f"embed with {emb.name} (pure Python)", f"{rate:,.0f} chunks/s", "cached for later runs"])
            if args.embedded:
                await embedded_part(args, corpus, chunks, vecs, qsets[args.query_kinds[0]][0], emb, rows)
            if dsn is not None:
                await pgvector_part(args, dsn, corpus, chunks, vecs, qsets, emb, rows)
    body = table(["what", "median / rate", "note"], rows)
    body += (f"\n\n{args.queries} queries, k = 10, {len(vecs):,} chunks of {len(corpus.docs):,} synthetic documents "
             f"with topics ({TOPICS} topics x {SUBTOPICS} subtopics; see the script's docstring), embedders "
             f"{', '.join(e.name for e in embedders)}. Latency: `index.search` with the query vector given (embedding "
             "a query costs the same for both). Each HNSW row's speed ratio divides the exact search's median, "
             f"timed again on {args.paired} of the queries right after their HNSW searches, by the HNSW median. "
             "Retrieval quality: the share of the exact top 10 that comes from the query's own subtopic. pgvector: "
             "pgserver's PostgreSQL 16 + pgvector 0.6.2 on the shared 2-core machine. "
             "Target: recall@10 >= 0.95 at >= 10x the exact search's speed (each row says whether it meets it).")
    print(body)
    if not args.no_write:
        write_section("rag-recall", "RAG: recall@10 and speed on a topical corpus (bench/bench_rag_recall.py)", body,
                      "python bench/bench_rag_recall.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    asyncio.run(main())
