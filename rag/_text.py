"""Full-text ranking for hybrid search: BM25 over chunk texts (embedded index) and rank fusion.

Hybrid search (the default, ``Rag(search_mode="hybrid")``) asks two rankers for their best
``depth`` chunks each and fuses the two lists by reciprocal rank fusion (RRF)::

    fused(chunk) = sum over the lists the chunk is in of weight / (RRF_K + rank)      (rank from 1)

RRF needs no score calibration (a cosine and a BM25 score are not comparable; ranks are), and
``RRF_K`` = 60 is the constant of Cormack, Clarke and Büttcher (SIGIR 2009), which damps the
difference between rank 1 and rank 5 so that a chunk ranked well by both beats one ranked first
by one only. The text list's weight is 1, the vector list's is ``vector_weight``: 1 for a
model embedder (MiniLM, an API), :data:`LEXICAL_VECTOR_WEIGHT` = 0.5 for the lexical one, whose
vectors are a noisier copy of what the text ranking already sees (shared words, without their
rarity). Measured on bench/bench_rag_eval.py's 74 questions with the lexical embedder, twice
as the docs changed, recall@5 for vector weights 1 / 0.75 / 0.5 / 0.3 / 0 was 0.568 / 0.568 /
0.608 / 0.608 / 0.622, then 0.554 / 0.568 / 0.595 / 0.581 / 0.635: 0.5 beat 1 on each half of
the set alone, both times. The text ranking alone (weight 0) was best both times, by 1 and 3
questions of 74: ``search_mode="text"`` is there for a lexical index; hybrid stays the default
because with a model embedder fusion is clearly best (MiniLM + BM25 0.757, BM25 alone 0.635). The rankers:

- vector: cosine similarity of the embeddings (what ``search_mode="vector"`` returns alone);
- text: on the embedded index, Okapi BM25 (``k1`` = 1.2, ``b`` = 0.75) over :func:`terms`;
  on pgvector, PostgreSQL full-text search (``to_tsvector('english', text)``, ``ts_rank``
  normalised by document length, the query's words OR-ed; rag/_index.py).

Why text ranking at all: the default lexical embedder hashes words into 512 buckets with no
notion of how rare a word is, so a question's "how", "does" and "the" weigh as much as the word
that matters; BM25's inverse document frequency is exactly that notion, and a real model
(MiniLM) misses exact identifiers (a flag, an error code) that BM25 finds. Measured on this
project's own documentation: bench/bench_rag_eval.py, docs/PERFORMANCE.md (rag-eval).

:func:`terms` (embedded BM25 only): lower-cased ``\\w+`` words, a short English stop-word list
removed, one suffix stripped ("rotates", "rotated", "rotating", "rotate" -> "rotat"; "queries"
-> "query"), so that a question's word form need not match the text's. Deterministic, no
dependency; not a real stemmer.

The BM25 postings are not stored: they are computed from the chunk texts when the index opens
(an index made before hybrid search needs nothing migrated) and rebuilt, like the vector
matrix, on the first search after a write. Term ids are CRC-32 hashes of the terms (no
vocabulary to keep; two terms share an id with probability ~n/2^32).
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

try:
    import numpy as np
except ImportError:  # pragma: no cover - the 'rag' extra brings numpy
    np = None  # type: ignore[assignment]

SEARCH_MODES = ("hybrid", "vector", "text")
DEFAULT_SEARCH_MODE = "hybrid"
RRF_K = 60
LEXICAL_VECTOR_WEIGHT = 0.5
BM25_K1 = 1.2
BM25_B = 0.75

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("""
a about above after again all also am an and any are as at be because been before being below between both but by
can could did do does doing done down during each few for from further had has have having he her here hers him
his how i if in into is it its itself just me more most my no nor not now of off on once only or other our ours
out over own same she should so some such than that the their theirs them then there these they this those
through to too under until up very was we were what when where which while who whom why will with would you your
yours yourself
""".split())
_SUFFIXES = ("ies", "ing", "ed", "es", "s", "e")


def _stem(w: str) -> str:
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            if suf == "ies":
                return w[:-3] + "y"
            if suf == "s" and w.endswith("ss"):
                return w
            return w[:-len(suf)]
    return w


def terms(text: str) -> list[str]:
    """The words BM25 counts (see the module docstring)."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP]


def term_ids(text: str) -> tuple[Any, Any, int]:
    """(unique term ids, their counts, number of terms) of one text: numpy uint32/float32 arrays,
    or lists without numpy."""
    ids = [zlib.crc32(t.encode("utf-8", "surrogatepass")) for t in terms(text)]
    if np is None:
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
        return list(counts), [float(c) for c in counts.values()], len(ids)
    if not ids:
        return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.float32), 0
    u, c = np.unique(np.asarray(ids, dtype=np.uint32), return_counts=True)
    return u, c.astype(np.float32), len(ids)


class Bm25:
    """BM25 over rows 0..n-1, built in one pass from each row's :func:`term_ids` (CSR by term id)."""

    def __init__(self, rows: list[tuple[Any, Any, int]]) -> None:
        self.n = len(rows)
        total = sum(r[2] for r in rows)
        self.avgdl = total / self.n if self.n and total else 1.0
        if np is None:  # pure Python: a dict of postings, same scores
            self._post: dict[int, list[tuple[int, float]]] = {}
            for row, (ids, tfs, length) in enumerate(rows):
                norm = BM25_K1 * (1 - BM25_B + BM25_B * length / self.avgdl)
                for i, tf in zip(ids, tfs, strict=True):
                    self._post.setdefault(i, []).append((row, tf * (BM25_K1 + 1) / (tf + norm)))
            return
        lengths = np.asarray([r[2] for r in rows], dtype=np.float32)
        counts = [len(r[0]) for r in rows]
        if sum(counts):
            ids = np.concatenate([r[0] for r in rows])
            tfs = np.concatenate([r[1] for r in rows])
            row_of = np.repeat(np.arange(self.n, dtype=np.int32), counts)
            order = np.argsort(ids, kind="stable")
            self._ids, self._rows = ids[order], row_of[order]
            # BM25's tf part depends only on the row: fold it in once, at build time
            norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[row_of] / self.avgdl)
            self._w = ((tfs * (BM25_K1 + 1)) / (tfs + norm))[order].astype(np.float32)
        else:
            self._ids = np.zeros(0, dtype=np.uint32)
            self._rows = np.zeros(0, dtype=np.int32)
            self._w = np.zeros(0, dtype=np.float32)

    def _idf(self, df: int) -> float:
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def top(self, query: str, depth: int) -> list[tuple[int, float]]:
        """The ``depth`` best rows for ``query`` with their BM25 scores (rows sharing no term: none)."""
        q, _, _ = term_ids(query)
        if self.n == 0 or len(q) == 0:
            return []
        if np is None:
            acc: dict[int, float] = {}
            for i in q:
                post = self._post.get(i, [])
                idf = self._idf(len(post)) if post else 0.0
                for row, w in post:
                    acc[row] = acc.get(row, 0.0) + w * idf
            return sorted(((r, s) for r, s in acc.items() if s > 0), key=lambda x: (-x[1], x[0]))[:depth]
        scores = np.zeros(self.n, dtype=np.float32)
        lo = np.searchsorted(self._ids, q, side="left")
        hi = np.searchsorted(self._ids, q, side="right")
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            df = b - a
            if df == 0:
                continue
            idf = self._idf(df)
            scores[self._rows[a:b]] += self._w[a:b] * idf  # a row appears once per term: no duplicates
        hit = np.flatnonzero(scores > 0)
        if len(hit) == 0:
            return []
        depth = min(depth, len(hit))
        best = hit[np.argpartition(-scores[hit], depth - 1)[:depth]]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best]


def vector_weight_for(embedder: Any) -> float:
    """The vector list's RRF weight for ``embedder``: :data:`LEXICAL_VECTOR_WEIGHT` for a lexical
    one, 1 for a model (see the module docstring)."""
    return LEXICAL_VECTOR_WEIGHT if str(getattr(embedder, "name", "")).startswith("lexical-") else 1.0


def rrf(vector: list[tuple[Any, float]], text: list[tuple[Any, float]], k: int,
        vector_weight: float = 1.0) -> list[tuple[Any, float, Any, Any]]:
    """Fuse two best-first lists of (key, score): the ``k`` best (key, fused, vector score, text
    score); the vector list's terms are multiplied by ``vector_weight``."""
    fused: dict[Any, list[Any]] = {}
    for rank, (key, s) in enumerate(vector, 1):
        fused.setdefault(key, [0.0, None, None])
        fused[key][0] += vector_weight / (RRF_K + rank)
        fused[key][1] = s
    for rank, (key, s) in enumerate(text, 1):
        fused.setdefault(key, [0.0, None, None])
        fused[key][0] += 1.0 / (RRF_K + rank)
        fused[key][2] = s
    # ties (same fused score) keep the vector list's order, then the text list's: deterministic
    order = sorted(fused.items(), key=lambda kv: -kv[1][0])
    return [(key, v[0], v[1], v[2]) for key, v in order[:k]]


def tsquery_words(query: str, limit: int = 32) -> str:
    """The query's words OR-ed for ``to_tsquery`` (letters and digits only: no tsquery operator
    can get through), or '' when it has none."""
    seen: list[str] = []
    for w in re.findall(r"[^\W_]+", query.lower()):
        if w not in seen:
            seen.append(w)
        if len(seen) >= limit:
            break
    return " | ".join(seen)


def check_mode(mode: Any) -> str:
    if mode not in SEARCH_MODES:
        from ._errors import InvalidRagInput

        raise InvalidRagInput(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {str(mode)[:40]!r}")
    return str(mode)


__all__ = ["DEFAULT_SEARCH_MODE", "LEXICAL_VECTOR_WEIGHT", "RRF_K", "SEARCH_MODES", "Bm25", "check_mode", "rrf", "term_ids", "terms",
           "tsquery_words", "vector_weight_for"]
