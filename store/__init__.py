"""openfunctions.store: one async key-value interface, two backends, and embedders.

- :func:`open_local_store` (local: a journal in ``<data_dir>/store/<name>/``,
  crash-safe, one owning process) and :func:`open_pg_store` (PostgreSQL
  through a psycopg 3 pool; schema created and migrated by the store).
- :func:`open_store` picks one from a URL (``postgresql://...``) or a data dir.
- Embedders (:class:`LexicalEmbedder`, the dependency-free default;
  :class:`MiniLMEmbedder`, a real local model; :class:`OpenAIEmbedder`, a
  provider's OpenAI-compatible embeddings API) for memory and RAG.

Usage::

    store = await open_local_store("notes")                 # <cwd>/.data/store/notes/
    e = await store.put("a", {"n": 1})                  # durable when it returns
    await store.compare_and_set("a", e.version, {"n": 2})
    async with store.transaction() as tx:
        await tx.put("b", 1); await tx.delete("a")
    page = await store.list("prefix/", limit=50)
    await store.aclose()

See docs/STATE.md.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from openfunctions.core.deprecation import old_names

from ._api import DEFAULT_MAX_VALUE_BYTES, MAX_KEY_BYTES, Entry, Store, Transaction
from ._embed import Embedder, LexicalEmbedder, MiniLMEmbedder, create_embedder
from ._embed_http import EmbedderFailed, OpenAIEmbedder
from ._errors import (
    Conflict,
    InvalidKey,
    InvalidValue,
    SchemaTooNew,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFailed,
    StoreLocked,
    StoreUnavailable,
    StoreUnsafe,
    ValueTooLarge,
)
from ._local import LocalStore, default_data_dir, open_local_store
from ._migrations import SchemaOutOfDate
from ._migrations import migrate as migrate_database
from ._pg import PgStore, apply_migrations, database_sweep_interval, open_pg_store, open_pool, redact_dsn
from ._pg_artifacts import PgArtifactStore, open_pg_artifact_store
from ._pg_journal import (
    DuplicateReceipt,
    JournalUnavailable,
    PgExecutionJournal,
    open_pg_journal,
    settled_pg_receipts,
    verify_pg_journal,
)
from ._pg_keylocks import PgKeyLocks
from ._tools import guard, obj, state_tool


def is_database_url(url: Any) -> bool:
    return isinstance(url, str) and url.split(":", 1)[0] in ("postgresql", "postgres")


async def open_store(name: str, *, url: str | None = None, data_dir: str | os.PathLike[str] | None = None,
                     max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> Store:
    """``open_pg_store(name, url)`` for a ``postgresql://`` URL, else ``open_local_store(name, data_dir)``."""
    if url:
        if not is_database_url(url):
            raise StoreUnsafe(f"--store expects a postgresql:// URL, got {redact_dsn(url)!r}")
        return await open_pg_store(name, url, max_value_bytes=max_value_bytes)
    return await open_local_store(name, data_dir, max_value_bytes=max_value_bytes)


__all__ = [
    "Conflict", "DEFAULT_MAX_VALUE_BYTES", "Embedder", "EmbedderFailed", "Entry", "InvalidKey", "InvalidValue", "LexicalEmbedder",
    "LocalStore", "MAX_KEY_BYTES", "MiniLMEmbedder", "OpenAIEmbedder", "PgStore", "SchemaTooNew", "Store", "StoreClosed",
    "StoreCorrupt", "StoreError", "StoreFailed", "StoreLocked", "StoreUnavailable", "StoreUnsafe", "Transaction",
    "ValueTooLarge", "apply_migrations", "create_embedder", "open_pg_store", "open_local_store", "default_data_dir",
    "guard", "is_database_url",
    "DuplicateReceipt", "JournalUnavailable", "PgExecutionJournal", "PgKeyLocks", "SchemaOutOfDate", "migrate_database", "open_pg_journal",
    "verify_pg_journal", "settled_pg_receipts",
    "PgArtifactStore",
    "open_pg_artifact_store", "database_sweep_interval", "obj", "open_pool", "open_store", "redact_dsn", "state_tool",
]


# Old names of renamed functions, kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"create_store": "open_local_store", "create_pg_store": "open_pg_store"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)
