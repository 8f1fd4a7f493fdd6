"""Retrieval quality on real text: recall@5 and MRR over questions about this project's own docs.

Labelled set: tests/rag/data/docs_qa.jsonl, one JSON object a line::

    {"id": "q001", "question": "...", "answers": [{"doc": "docs/SERVERS.md", "text": "..."}, ...]}

Each question was written as a user would ask it (its wording is not the doc's), each answer
is a passage quoted verbatim from the doc that answers it (a question may have several, in
different places). Corpus: every docs/*.md except docs/PERFORMANCE.md (benches rewrite it, so
the corpus would change from run to run), ingested with the default chunker (180 words,
overlap 30), document id = the path. A retrieved chunk is *relevant* when it is from an answer's
doc and contains the answer passage (whitespace-normalized) — or, for a passage of 10+ words
cut by a chunk boundary, its first or last 60 % of words.

- recall@5: the share of questions with a relevant chunk among the first 5;
- MRR: the mean of 1 / rank of the first relevant chunk (0 when none is in the top 50).

Configurations, all on the embedded index, same corpus, same run: ``lexical`` (the lexical
embedder, vector ranking only: what search was before hybrid), ``text`` (BM25 alone),
``hybrid`` (lexical vectors + BM25 fused by RRF: the default), ``minilm`` (all-MiniLM-L6-v2,
vector only) and ``minilm+hybrid`` (MiniLM vectors + BM25). ``--pg`` adds ``hybrid`` on pgvector
(PostgreSQL full-text instead of BM25). A question whose answer passage is no longer in the
docs (they were edited) is left out and counted in the note.

Usage: python bench/bench_rag_eval.py [--no-minilm] [--pg] [--dsn URL] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _report import table, write_section  # noqa: E402

from openfunctions.rag import open_rag  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QA_FILE = ROOT / "tests" / "rag" / "data" / "docs_qa.jsonl"
DEPTH = 50


def _norm(s: str) -> str:
    return " ".join(s.split())


def load_questions(path: Path = QA_FILE) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def corpus_docs(root: Path = ROOT) -> dict[str, str]:
    """doc id (``docs/NAME.md``) -> text, for every docs/*.md but PERFORMANCE.md."""
    return {f"docs/{p.name}": p.read_text(encoding="utf-8") for p in sorted((root / "docs").glob("*.md"))
            if p.name != "PERFORMANCE.md"}


def relevant(hit: dict, answers: list[dict]) -> bool:
    text = _norm(hit["text"])
    for a in answers:
        if hit["doc_id"] != a["doc"]:
            continue
        passage = _norm(a["text"])
        if passage in text:
            return True
        words = passage.split()
        if len(words) >= 10:
            part = math.ceil(0.6 * len(words))
            if " ".join(words[:part]) in text or " ".join(words[-part:]) in text:
                return True
    return False


def answerable(questions: list[dict], docs: dict[str, str]) -> tuple[list[dict], list[str]]:
    """The questions whose answer passages are (still) in the corpus, and the ids of the others."""
    normed = {d: _norm(t) for d, t in docs.items()}
    ok, gone = [], []
    for q in questions:
        if all(a["doc"] in normed and _norm(a["text"]) in normed[a["doc"]] for a in q["answers"]):
            ok.append(q)
        else:
            gone.append(q["id"])
    return ok, gone


async def evaluate(rag, questions: list[dict], mode: str) -> dict:
    ranks = []
    lat = []
    for q in questions:
        t = time.perf_counter()
        hits = await rag.search(q["question"], k=DEPTH, mode=mode)
        lat.append(time.perf_counter() - t)
        rank = next((i for i, h in enumerate(hits, 1) if relevant(h, q["answers"])), None)
        ranks.append(rank)
    n = len(questions)
    return {"recall@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
            "recall@1": sum(1 for r in ranks if r == 1) / n,
            "mrr": sum(1 / r for r in ranks if r is not None) / n,
            "ms": sorted(lat)[len(lat) // 2] * 1000, "ranks": ranks}


async def run_config(docs: dict[str, str], questions: list[dict], *, embedder, mode: str, url: str | None = None):
    tmp = tempfile.mkdtemp(prefix="ofbench-rageval-")
    name = f"ev{uuid.uuid4().hex[:8]}" if url else "rag"
    try:
        rag = await open_rag(data_dir=tmp, url=url, name=name, embedder=embedder)
        try:
            t = time.perf_counter()
            res = await rag.ingest_many([{"doc_id": d, "text": t_} for d, t_ in docs.items()])
            ingest_s = time.perf_counter() - t
            chunks = sum(r.chunks for r in res)
            out = await evaluate(rag, questions, mode)
            out.update(chunks=chunks, ingest_s=ingest_s)
            return out
        finally:
            await rag.aclose()
            if url:
                import psycopg

                with psycopg.connect(url, autocommit=True) as c:
                    c.execute(f"DROP TABLE IF EXISTS of_rag_chunks_{name}")
                    c.execute("DELETE FROM of_rag_docs WHERE index_name = %s", (name,))
                    c.execute("DELETE FROM of_rag_indexes WHERE name = %s", (name,))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-minilm", action="store_true", help="skip the MiniLM rows (no torch needed)")
    ap.add_argument("--pg", action="store_true", help="also hybrid on pgvector (PostgreSQL full-text)")
    ap.add_argument("--dsn")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--show-misses", action="store_true", help="print the questions a configuration missed")
    args = ap.parse_args()
    docs = corpus_docs()
    questions, gone = answerable(load_questions(), docs)
    configs = [("lexical (vector only; the old default)", "lexical", "vector", None),
               ("BM25 text only", "lexical", "text", None),
               ("**hybrid: lexical + BM25, RRF (the default)**", "lexical", "hybrid", None)]
    notes = []
    if not args.no_minilm:
        try:
            from openfunctions.store import MiniLMEmbedder

            minilm = MiniLMEmbedder()
            configs += [("MiniLM (vector only)", minilm, "vector", None),
                        ("MiniLM + BM25, RRF", minilm, "hybrid", None)]
        except Exception as exc:  # noqa: BLE001 - reported in the table's note
            notes.append(f"MiniLM not measured: {exc}.")
    rows = []
    results = {}
    pg_ctx = None
    if args.pg:
        from bench_store import pg_server

        pg_ctx = pg_server(args.dsn)
        dsn = pg_ctx.__enter__()
        configs.append(("hybrid on pgvector: lexical + PostgreSQL full-text, RRF", "lexical", "hybrid", dsn))
    try:
        for label, emb, mode, url in configs:
            r = await run_config(docs, questions, embedder=emb, mode=mode, url=url)
            results[label] = r
            rows.append([label, f"{r['recall@5']:.3f}", f"{r['mrr']:.3f}", f"{r['recall@1']:.3f}", f"{r['ms']:.1f}",
                         f"{r['chunks'] / r['ingest_s']:,.0f}"])
            if args.show_misses:
                for q, rank in zip(questions, r["ranks"], strict=True):
                    if rank is None or rank > 5:
                        print(f"  {label}: {q['id']} rank {rank}: {q['question']}", file=sys.stderr)
    finally:
        if pg_ctx is not None:
            pg_ctx.__exit__(None, None, None)
    n_chunks = next(iter(results.values()))["chunks"]
    body = table(["configuration", "recall@5", "MRR", "recall@1", "median query ms", "ingest chunks/s"], rows)
    body += (f"\n\n{len(questions)} questions (tests/rag/data/docs_qa.jsonl) over {len(docs)} docs/*.md files "
             f"(PERFORMANCE.md excluded), {n_chunks} chunks, embedded index unless named; MRR counts the first "
             f"relevant chunk in the top {DEPTH}. "
             + (f"{len(gone)} question(s) left out because the docs no longer hold their answer: {', '.join(gone)}. "
                if gone else "") + " ".join(notes))
    print(body)
    if not args.no_write:
        write_section("rag-eval", "RAG: retrieval quality on this project's docs (bench/bench_rag_eval.py)", body,
                      "python bench/bench_rag_eval.py" + (" --pg" if args.pg else "")
                      + (" --no-minilm" if args.no_minilm else ""))


if __name__ == "__main__":
    asyncio.run(main())
