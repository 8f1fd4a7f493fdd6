"""Conversation and fact memory on any :class:`~openfunctions.store.Store`.

Key layout in the store (values are JSON; ``<n>`` is zero-padded to 12 digits
so that key order is message order)::

    threads/<thread_id>                 {"created_at", "updated_at", "count"}
    msgs/<thread_id>/<n>                {"role", "content", "at", "meta"}        n = 1, 2, ...
    fact/<fact_id>                      {"text", "source", "tags", "at", "vec"?, "embedder"?}

A message is appended in one store transaction (the thread's counter and
the message together), so concurrent appenders never share a number and a
crash never leaves a gap. Fact ids are ``f_<16 hex: time in ns><8 hex random>``,
so listing ``fact/`` is oldest-first. ``vec`` (present when an embedder is
configured) is the fact's unit vector, rounded to 6 decimals, and
``embedder`` names the embedder that made it. Search by meaning embeds the
query once per embedder found among the facts when it can build that one
(the configured embedder, or any ``lexical-v<n>-<d>``: facts saved before
``lexical`` meant v2 stay searchable by meaning); a fact embedded by another
embedder is found by text search only.

Search by text scores each fact by the query words it contains (each word
weighted by how rare it is among the facts scanned) and scans at most
``max_scan`` facts, newest first. Search by meaning ranks by cosine
similarity of the embeddings. Both are exact scans: memory holds thousands
of facts, not millions (for that, use RAG).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from openfunctions.core import utc_timestamp
from openfunctions.store import Conflict, LexicalEmbedder, Store

from ._errors import FactNotFound, InvalidMemoryInput, MemoryNotOpen

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
FACT_ID_RE = re.compile(r"^f_[0-9a-f]{24}$")
ROLES = ("user", "assistant", "system", "tool")
MAX_MESSAGE_BYTES = 32 * 1024
MAX_FACT_BYTES = 8 * 1024
MAX_PAGE = 100
REPLY_BUDGET_BYTES = 256 * 1024
_WORD = re.compile(r"\w+", re.UNICODE)

SearchMode = Literal["auto", "text", "meaning"]


@dataclass(frozen=True)
class ThreadMessage:
    thread_id: str
    n: int
    role: str
    content: str
    at: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "n": self.n, "role": self.role, "content": self.content,
                "at": self.at, "meta": self.meta}


@dataclass(frozen=True)
class ThreadPage:
    thread_id: str
    messages: list[ThreadMessage]  # newest first
    next_before: int | None  # pass as ``before`` for the next (older) page; None: no more
    total: int

    def to_dict(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "messages": [m.to_dict() for m in self.messages],
                "next_before": self.next_before, "total": self.total}


@dataclass(frozen=True)
class Fact:
    id: str
    text: str
    source: str | None
    tags: list[str]
    at: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "source": self.source, "tags": self.tags, "saved_at": self.at}


@dataclass(frozen=True)
class FactHit:
    fact: Fact
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.fact.to_dict(), "score": round(self.score, 6)}


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        shown = repr(value)[:80]
        raise InvalidMemoryInput(
            f"{what} {shown} is invalid: use 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"
        )
    return value


def _check_text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidMemoryInput(f"{what} must be a non-empty string")
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidMemoryInput(f"{what} contains a lone surrogate (not valid UTF-8)") from None
    if n > limit:
        raise InvalidMemoryInput(f"{what} is {n} bytes; the limit is {limit} (nothing was saved)",
                                 details={"bytes": n, "limit": limit})
    return value


def _page(limit: Any) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidMemoryInput(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Memory:
    """Threads of messages and saved facts, kept in one store.

    ``embedder`` (optional; see ``openfunctions.store.create_embedder``)
    enables search by meaning. ``Memory(None)`` is a memory whose store is
    attached later with :meth:`attach` (a server opens it when it starts).
    """

    def __init__(self, store: Store | None, *, embedder: Any = None, max_scan: int = 10_000) -> None:
        self.store = store
        self.embedder = embedder
        self.max_scan = max_scan
        self.unavailable: str | None = None  # why the store could not be opened (served under 'all')

    def attach(self, store: Store) -> None:
        self.store = store

    def _s(self) -> Store:
        if self.store is None:
            raise MemoryNotOpen(f"memory is not available: {self.unavailable}" if self.unavailable
                                else "memory is not open yet (its store has not been attached)")
        return self.store

    async def aclose(self) -> None:
        if self.store is not None:
            await self.store.aclose()

    # -- conversations ----------------------------------------------------------
    async def append_message(self, thread_id: str, role: str, content: str, *,
                             meta: dict[str, Any] | None = None) -> ThreadMessage:
        """Append to a thread (created on first use). Atomic with the thread's counter."""
        _check_id(thread_id, "thread_id")
        if role not in ROLES:
            raise InvalidMemoryInput(f"role {role!r} is invalid: use one of {', '.join(ROLES)}")
        _check_text(content, "content", MAX_MESSAGE_BYTES)
        meta = dict(meta or {})
        store = self._s()
        head_key = f"threads/{thread_id}"
        for _ in range(100):
            try:
                async with store.transaction() as tx:
                    head = await tx.get(head_key)
                    now = utc_timestamp()
                    info: dict[str, Any] = dict(head.value) if head is not None else {"created_at": now, "count": 0}
                    n = int(info["count"]) + 1
                    info.update(count=n, updated_at=now)
                    await tx.put(head_key, info)
                    await tx.put(f"msgs/{thread_id}/{n:012d}", {"role": role, "content": content, "at": now, "meta": meta})
                return ThreadMessage(thread_id, n, role, content, now, meta)
            except Conflict:
                continue  # another appender took this number: read the counter again
        raise Conflict(f"thread {thread_id!r}: gave up appending after 100 conflicting attempts")

    async def get_thread(self, thread_id: str, *, limit: int = 20, before: int | None = None,
                         budget_bytes: int = REPLY_BUDGET_BYTES) -> ThreadPage:
        """Newest-first page of at most ``limit`` messages (older than ``before``), within ``budget_bytes``."""
        _check_id(thread_id, "thread_id")
        _page(limit)
        if before is not None and (not isinstance(before, int) or isinstance(before, bool) or before < 1):
            raise InvalidMemoryInput(f"before must be a message number >= 1, got {before!r}")
        store = self._s()
        head = await store.get(f"threads/{thread_id}")
        total = int(head.value["count"]) if head is not None else 0
        prefix = f"msgs/{thread_id}/"
        after = f"{prefix}{before:012d}" if before is not None else None
        entries = await store.list(prefix, after=after, limit=limit, reverse=True)
        out: list[ThreadMessage] = []
        used = 0
        for e in entries:
            meta = e.value.get("meta")
            size = len(e.value.get("content", "")) + 200 + (len(json.dumps(meta, ensure_ascii=False)) if meta else 0)
            if out and used + size > budget_bytes:
                break
            used += size
            n = int(e.key[len(prefix):])
            out.append(ThreadMessage(thread_id, n, e.value["role"], e.value["content"], e.value["at"], e.value.get("meta") or {}))
        oldest = out[-1].n if out else None
        more = oldest is not None and oldest > 1
        return ThreadPage(thread_id, out, oldest if more else None, total)

    async def list_threads(self, *, limit: int = 50, after: str | None = None) -> list[dict[str, Any]]:
        _page(limit)
        if after is not None:
            _check_id(after, "after")
        entries = await self._s().list("threads/", after=f"threads/{after}" if after else None, limit=limit)
        return [{"thread_id": e.key[len("threads/"):], **e.value} for e in entries]

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread and its messages; returns how many messages were deleted."""
        _check_id(thread_id, "thread_id")
        store = self._s()
        deleted = 0
        prefix = f"msgs/{thread_id}/"
        while True:
            page = await store.list(prefix, limit=500)
            if not page:
                break
            for e in page:
                deleted += await store.delete(e.key)
        await store.delete(f"threads/{thread_id}")
        return deleted

    # -- facts --------------------------------------------------------------------
    async def save_fact(self, text: str, *, source: str | None = None, tags: list[str] | None = None) -> Fact:
        _check_text(text, "text", MAX_FACT_BYTES)
        if source is not None:
            _check_text(source, "source", 1024)
        tags = list(tags or [])
        if len(tags) > 20 or not all(isinstance(t, str) and 0 < len(t) <= 64 for t in tags):
            raise InvalidMemoryInput("tags must be at most 20 strings of 1-64 characters")
        fid = f"f_{time.time_ns():016x}{os.urandom(4).hex()}"
        now = utc_timestamp()
        value: dict[str, Any] = {"text": text, "source": source, "tags": tags, "at": now}
        if self.embedder is not None:
            vec = (await anyio.to_thread.run_sync(self.embedder.embed, [text]))[0]
            value["vec"] = [round(float(x), 6) for x in vec]
            value["embedder"] = self.embedder.name
        await self._s().put(f"fact/{fid}", value)
        return Fact(fid, text, source, tags, now)

    async def get_fact(self, fact_id: str) -> Fact:
        e = await self._s().get(self._fact_key(fact_id))
        if e is None:
            raise FactNotFound(f"no fact with id {fact_id!r}")
        return self._fact(e.key, e.value)

    async def forget(self, fact_id: str) -> bool:
        """Delete a fact; False if there was none with that id."""
        return await self._s().delete(self._fact_key(fact_id))

    async def list_facts(self, *, limit: int = 50, after: str | None = None, newest_first: bool = True) -> list[Fact]:
        _page(limit)
        cursor = self._fact_key(after) if after is not None else None
        entries = await self._s().list("fact/", after=cursor, limit=limit, reverse=newest_first)
        return [self._fact(e.key, e.value) for e in entries]

    async def search(self, query: str, *, limit: int = 10, mode: SearchMode = "auto") -> tuple[str, list[FactHit]]:
        """Facts best matching ``query``; returns the mode used and the hits (best first)."""
        _check_text(query, "query", 4096)
        _page(limit)
        if mode not in ("auto", "text", "meaning"):
            raise InvalidMemoryInput(f"mode must be 'auto', 'text' or 'meaning', got {mode!r}")
        if mode == "meaning" and self.embedder is None:
            raise InvalidMemoryInput("search by meaning needs an embedder; this memory has none (use mode 'text')")
        used = "meaning" if (mode == "meaning" or (mode == "auto" and self.embedder is not None)) else "text"
        facts = await self._scan()
        scored: list[tuple[float, str, dict[str, Any]]]
        if used == "meaning":
            names = {v.get("embedder") for _, v in facts if v.get("vec")}
            qvs = await anyio.to_thread.run_sync(self._query_vectors, query, names)
            scored = []
            for k, v in facts:
                qv = qvs.get(v.get("embedder"))
                if v.get("vec") and qv is not None:
                    scored.append((sum(a * b for a, b in zip(qv, v["vec"], strict=False)), k, v))
        else:
            scored = self._text_scores(query, facts)
        scored = [s for s in scored if s[0] > 0]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return used, [FactHit(self._fact(k, v), float(score)) for score, k, v in scored[:limit]]

    def _query_vectors(self, query: str, names: set[Any]) -> dict[Any, list[float] | None]:
        """The query's vector under each embedder in ``names`` this memory can build (else None)."""
        out: dict[Any, list[float] | None] = {self.embedder.name: self.embedder.embed([query])[0]}
        for name in names - out.keys():
            other = LexicalEmbedder.from_name(name)
            out[name] = other.embed([query])[0] if other is not None else None
        return out

    async def _scan(self) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        after = None
        while len(out) < self.max_scan:
            page = await self._s().list("fact/", after=after, limit=min(1000, self.max_scan - len(out)), reverse=True)
            if not page:
                break
            out.extend((e.key, e.value) for e in page)
            after = page[-1].key
        return out

    @staticmethod
    def _text_scores(query: str, facts: list[tuple[str, dict[str, Any]]]) -> list[tuple[float, str, dict[str, Any]]]:
        q = set(_words(query))
        if not q:
            return []
        docs = [(k, v, Counter(_words(v["text"] + " " + " ".join(v.get("tags") or [])))) for k, v in facts]
        df = Counter(w for _, _, c in docs for w in q if w in c)
        n = len(docs)
        out = []
        for k, v, c in docs:
            score = sum((1 + math.log(c[w])) * math.log(1 + n / df[w]) for w in q if w in c)
            if score > 0:
                out.append((score, k, v))
        return out

    @staticmethod
    def _fact_key(fact_id: Any) -> str:
        if not isinstance(fact_id, str) or not FACT_ID_RE.match(fact_id):
            raise InvalidMemoryInput(f"fact id {repr(fact_id)[:80]} is invalid: fact ids look like f_<24 hex digits>")
        return f"fact/{fact_id}"

    @staticmethod
    def _fact(key: str, v: dict[str, Any]) -> Fact:
        return Fact(key[len("fact/"):], v["text"], v.get("source"), list(v.get("tags") or []), v["at"])


async def create_memory(store: Store, *, embedder: Any = None) -> Memory:
    """A :class:`Memory` over ``store`` (``embedder``: an object or a name for ``create_embedder``)."""
    if isinstance(embedder, str):
        from openfunctions.store import create_embedder

        embedder = await anyio.to_thread.run_sync(create_embedder, embedder)
    return Memory(store, embedder=embedder)


__all__ = ["Fact", "FactHit", "Memory", "ThreadMessage", "ThreadPage", "create_memory"]
