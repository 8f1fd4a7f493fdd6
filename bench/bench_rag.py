"""RAG: ingest throughput, search latency and recall@10 on 100,000 chunks, against exact search.

Corpus: synthetic documents (seeded): sentences of words drawn from a
Zipf-distributed 20,000-word vocabulary, chunked by the default chunker
(180 words, overlap 30) into ``--chunks`` chunks, embedded by the default
lexical embedder (256 dimensions). Queries: 8-word phrases cut from random
chunks, plus a few random words.

- ingest: documents through ``Rag.ingest`` (chunk, embed, one transaction
  per document), chunks per second, embedded index and pgvector (HNSW kept
  up to date on every insert).
- search on pgvector: HNSW (``hnsw.ef_search`` = 100, the default here) vs
  exact (index scans off: a sequential scan computing every distance) in the
  same database: median latency, speed ratio, recall@10 = |HNSW top 10 ∩
  exact top 10| / 10, averaged over the queries.
- search on the embedded index: exact by construction (recall 1.0); its
  latency against a pure-Python loop over the same vectors (for 2,000
  vectors, scaled) shows what numpy buys.

Usage: python bench/bench_rag.py [--chunks 100000] [--queries 200] [--dsn URL] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from _report import median, table, write_section  # noqa: E402
from bench_store import pg_server  # noqa: E402

from openfunctions.rag import Chunker, open_rag  # noqa: E402


def corpus(n_chunks: int, seed: int = 7) -> list[tuple[str, str]]:
    """Documents of ~10 chunks each, whose total chunk count is about ``n_chunks``."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1.0 / (i + 1) ** 1.05 for i in range(len(vocab))]
    words_per_doc = 10 * 150 + 30  # 10 chunks of 180 words with overlap 30
    docs = []
    for d in range(max(1, n_chunks // 10)):
        words = rng.choices(vocab, weights, k=words_per_doc)
        sentences = [" ".join(words[i:i + 15]) + "." for i in range(0, len(words), 15)]
        docs.append((f"doc{d:06d}", " ".join(sentences)))
    return docs


def queries(docs: list[tuple[str, str]], n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choice(docs)[1].replace(".", "").split()
        i = rng.randrange(0, len(words) - 8)
        out.append(" ".join(words[i:i + 8]) + " " + " ".join(rng.choice(words) for _ in range(2)))
    return out


async def ingest_all(rag, docs, label: str) -> float:
    t = time.perf_counter()
    chunks = 0
    last = t
    for i, (doc_id, text) in enumerate(docs):
        chunks += (await rag.ingest(doc_id, text)).chunks
        if time.perf_counter() - last > 10:
            last = time.perf_counter()
            print(f"  {label}: {i + 1}/{len(docs)} documents, {chunks} chunks, "
                  f"{chunks / (last - t):,.0f} chunks/s", file=sys.stderr)
    return chunks / (time.perf_counter() - t), chunks


async def timed(fn, qs):
    lat, results = [], []
    for q in qs:
        t = time.perf_counter()
        results.append(await fn(q))
        lat.append((time.perf_counter() - t) * 1000)
    return lat, results


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dsn")
    ap.add_argument("--ef-search", type=int, nargs="+", default=[40, 100, 200, 400])
    ap.add_argument("--maintained-docs", type=int, default=100,
                    help="documents ingested with the HNSW index in place (its insert rate), before the bulk load")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--skip-embedded", action="store_true", help="measure pgvector only")
    args = ap.parse_args()
    docs = corpus(args.chunks)
    qs = queries(docs, args.queries)
    rows = []
    notes = []
    tmp = tempfile.mkdtemp(prefix="ofbench-rag-")
    try:
        # -- embedded ---------------------------------------------------------------
        rag = await open_rag(data_dir=tmp, chunker=Chunker())
        if args.skip_embedded:
            docs_embedded: list = []
        else:
            docs_embedded = docs
        if docs_embedded:
            await embedded_part(rag, docs_embedded, qs, rows)
        await rag.aclose()
        # -- pgvector ---------------------------------------------------------------
        await pgvector_part(args, docs, qs, rows, notes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish(args, docs, rows, notes)


async def embedded_part(rag, docs, qs, rows) -> None:
    if True:
        rate, n_chunks = await ingest_all(rag, docs, "embedded")
        rows.append(["ingest, embedded index (local store)", f"{rate:,.0f} chunks/s", f"{n_chunks:,} chunks"])
        lat, _ = await timed(lambda q: rag.search(q, k=10, mode="vector"), qs)
        rows.append(["search, embedded (exact, numpy)", f"{median(lat):.1f} ms", "recall@10 = 1.0 (exact)"])
        # what numpy buys: the same exact scan as a pure-Python loop, over 2,000 vectors, scaled
        index = rag.index
        sample = list(index._rows.values())[:2000]
        qv = rag.embedder.embed([qs[0]])[0]
        t = time.perf_counter()
        sorted((sum(a * b for a, b in zip(qv, v, strict=False)), i) for i, v in enumerate(sample))
        py_ms = (time.perf_counter() - t) * 1000 * n_chunks / len(sample)
        rows.append(["  peer: pure-Python exact scan (scaled)", f"{py_ms:,.0f} ms", f"{py_ms / median(lat):.0f}x slower"])


async def pgvector_part(args, docs, qs, rows, notes) -> None:
    if True:
        with pg_server(args.dsn) as dsn:
            name = f"b{uuid.uuid4().hex[:8]}"
            rag = await open_rag(url=dsn, name=name, chunker=Chunker())
            few = docs[:args.maintained_docs]
            rate, n_pg = await ingest_all(rag, few, "pgvector, HNSW maintained")
            rows.append(["ingest, pgvector (HNSW maintained per insert)", f"{rate:,.0f} chunks/s", f"first {n_pg:,} chunks"])
            await rag.index.drop_hnsw()
            rate, n_bulk = await ingest_all(rag, docs[len(few):], "pgvector, bulk")
            rows.append(["ingest, pgvector bulk (HNSW dropped)", f"{rate:,.0f} chunks/s", f"next {n_bulk:,} chunks"])
            t = time.perf_counter()
            await rag.index.build_hnsw()
            build = time.perf_counter() - t
            rows.append(["  then build_hnsw() over all chunks", f"{build:,.0f} s",
                         f"{(n_pg + n_bulk) / build:,.0f} chunks/s"])
            for _ in range(3):  # warm the caches for both plans
                await rag.search(qs[0], k=10, mode="vector")
                await rag.search(qs[0], k=10, exact=True, mode="vector")
            el, eres = await timed(lambda q: rag.search(q, k=10, exact=True, mode="vector"), qs)
            rows.append(["  peer: pgvector exact (sequential scan)", f"{median(el):.1f} ms", "recall@10 = 1.0 (exact)"])
            for ef in args.ef_search:
                rag.index.ef_search = ef
                hl, hres = await timed(lambda q: rag.search(q, k=10, mode="vector"), qs)
                recall = sum(len({h["chunk_id"] for h in a} & {h["chunk_id"] for h in b}) / max(1, len(b))
                             for a, b in zip(hres, eres, strict=False)) / len(qs)
                # ann-benchmarks' definition: a result counts if it is as close as the 10th exact
                # neighbour (+1e-3): chunks tied with the true neighbours are not misses
                ties = sum(sum(1 for h in a if h["score"] >= b[-1]["score"] - 1e-3) / max(1, len(b))
                           for a, b in zip(hres, eres, strict=False) if b) / len(qs)
                rows.append([f"search, pgvector HNSW (ef_search {ef})", f"{median(hl):.1f} ms",
                             f"recall@10 = {recall:.3f} (ties counted: {ties:.3f}), "
                             f"{median(el) / median(hl):.1f}x faster than exact"])
                notes.append(f"ef_search {ef}: recall@10 {recall:.3f} ({ties:.3f} with ties) at "
                             f"{median(el) / median(hl):.1f}x the exact speed.")
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"DROP TABLE IF EXISTS of_rag_chunks_{name}")
                c.execute("DELETE FROM of_rag_docs WHERE index_name = %s", (name,))
                c.execute("DELETE FROM of_rag_indexes WHERE name = %s", (name,))
            await rag.aclose()


def finish(args, docs, rows, notes) -> None:
    if True:
        pass
    body = table(["what", "median / rate", "note"], rows)
    body += (f"\n\n{args.queries} queries, k = 10, the lexical embedder (256 dimensions), {len(docs):,} synthetic "
             "documents (Zipf words). Latencies are per query, end to end through `Rag.search` (embedding the "
             "query included). Target on pgvector: recall@10 >= 0.95 at >= 10x the exact search's speed. "
             + " ".join(notes))
    print(body)
    if not args.no_write:
        write_section("rag", "RAG: ingest, search latency and recall@10 (bench/bench_rag.py)", body,
                      f"python bench/bench_rag.py --chunks {args.chunks}")


if __name__ == "__main__":
    asyncio.run(main())
