"""Schema component ``"rag"``: the pgvector RAG indexes in PostgreSQL (every table's DDL is here, once).

Two kinds of tables, read and written by ``rag/_index.py`` (:class:`PgVectorIndex`).

**Shared tables, versioned.** ``MIGRATIONS[i]`` brings the component from
version ``i`` to ``i + 1`` in ``of_schema``; **append, never edit** a released
entry. Applied by ``openfunctions-mcp db migrate`` (registered in
``core/postgres.py``'s ``COMPONENTS``) and, as every release did, by an index
when it opens (``at_open``), so ``rag ingest --store postgresql://...`` works on
a new database without a separate step; ``db status`` lists the component and
``db verify`` audits each index (:func:`verify_pg_rag_indexes`).

Version 1 (its statements keep ``IF NOT EXISTS``: that is how the release that
introduced them wrote them, and a database where they already exist must
migrate, not fail)::

    of_rag_indexes(name text PRIMARY KEY,         -- the index name (INDEX_NAME_RE)
                   embedder text, dimension int,  -- recorded at creation; another embedder is refused
                   created_at timestamptz)
    of_rag_docs(index_name text, doc_id text COLLATE "C",
                digest text,                      -- "sha256:<hex>" of the document's UTF-8 text
                chunker text, embedder text,      -- what made its chunks (unchanged: not re-embedded)
                source text, title text, chunks int, bytes int, updated_at timestamptz,
                PRIMARY KEY (index_name, doc_id))

Version 2: the ``vector`` extension, created where the server has pgvector
and the migrating role may create it (a superuser running ``db migrate``);
otherwise the step changes nothing (``db migrate`` must work on a server
that has no pgvector: most deployments never use RAG), and opening an
index names the missing extension and the statement that creates it
(:func:`require_vector`). Nothing in the shared tables needs it.

**Chunk tables, one per index, not versioned.** A ``vector(d)`` column holds
one dimension and ``d`` is the index's embedder's, known only when the index
first opens: the tables cannot be made by a migration. :class:`ChunkTable`
holds their DDL; opening an index creates its table when missing and brings
an older one up to date (each step checks the catalog first, so opening twice
changes nothing)::

    of_rag_chunks_<name>(doc_id text, n int, text text, embedding vector(d),
                         tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
                         PRIMARY KEY (doc_id, n))
        + HNSW index of_rag_chunks_<name>_hnsw USING hnsw (embedding vector_cosine_ops)
        + GIN index of_rag_chunks_<name>_fts USING gin (tsv)    -- hybrid search's full-text ranking

- ``tsv`` and its index are added when a table made before hybrid search is
  opened (``ALTER TABLE ... ADD COLUMN ... STORED`` rewrites the table under an
  exclusive lock, once).
- ``embedding`` is stored ``MAIN``, set when the table is created (why: the
  module docstring of ``rag/_index.py``); an older table keeps its setting.
- The HNSW and GIN indexes are dropped and rebuilt around a bulk load
  (``Rag.bulk_load``).

Table and index names are built from the index name, which
``INDEX_NAME_RE`` (``[a-z][a-z0-9_]{0,39}``) restricts before any SQL is made,
and always passed as identifiers; every value is a parameter or a literal
composed by psycopg.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ._errors import VectorExtensionMissing

COMPONENT = "rag"
TEXT_SEARCH_CONFIG = "english"  # pgvector's full-text ranking: PostgreSQL's english stemmer and stop words
INDEX_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: the indexes and their documents
        """CREATE TABLE IF NOT EXISTS of_rag_indexes (
                name text PRIMARY KEY, embedder text NOT NULL, dimension integer NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now())""",
        """CREATE TABLE IF NOT EXISTS of_rag_docs (
                index_name text NOT NULL, doc_id text COLLATE "C" NOT NULL, digest text NOT NULL, chunker text NOT NULL,
                embedder text NOT NULL, source text, title text, chunks integer NOT NULL, bytes integer NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (index_name, doc_id))""",
    ),
    (  # 2: the vector extension, where the server has it and this role may create it
        """DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
                CREATE EXTENSION IF NOT EXISTS vector;
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;  -- a role that may not: opening an index names the statement a superuser runs
        END $$""",
    ),
]


async def require_vector(conn: Any, where: str) -> None:
    """Make sure the ``vector`` extension exists in the database: create it if this role may, else
    :class:`VectorExtensionMissing` naming what is missing and the statement that fixes it."""
    import psycopg

    cur = await conn.execute(
        "SELECT current_database(), (SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
        "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')")
    database, version, available = await cur.fetchone()
    if version is not None:
        return
    details = {"database": database, "extension": "vector"}
    if not available:
        raise VectorExtensionMissing(
            f"the PostgreSQL server at {where} has no pgvector installed (no 'vector' extension is available): "
            "install pgvector on the database server (e.g. the postgresql-<version>-pgvector package), then a "
            f"superuser runs `CREATE EXTENSION vector;` in the database {database!r}", details=details)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege as exc:  # pgvector is not a trusted extension
        raise VectorExtensionMissing(
            f"the database {database!r} at {where} has no 'vector' extension and this role may not create it "
            f"({str(exc).strip().splitlines()[0]}): a superuser runs `CREATE EXTENSION vector;` in that database "
            "once", details=details) from None


class ChunkTable:
    """The DDL of one index's chunk table and its two search indexes (see the module docstring)."""

    def __init__(self, name: str) -> None:
        if not INDEX_NAME_RE.match(name):
            raise ValueError(f"index name {name!r} is not a valid RAG index name")  # checked earlier, with its code
        from psycopg import sql

        self.sql = sql
        self.name = f"of_rag_chunks_{name}"
        self.table = sql.Identifier(self.name)
        self.hnsw = sql.Identifier(f"{self.name}_hnsw")
        self.fts = sql.Identifier(f"{self.name}_fts")

    async def ensure(self, conn: Any, dimension: int) -> None:
        """Create the table and its search indexes where missing; bring an older table up to date."""
        sql = self.sql
        cur = await conn.execute("SELECT to_regclass(%s) IS NULL", (self.name,))
        created = (await cur.fetchone())[0]
        await conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (doc_id text NOT NULL, n integer NOT NULL, text text NOT NULL, "
            "embedding vector({}) NOT NULL, PRIMARY KEY (doc_id, n))").format(self.table, sql.Literal(dimension)))
        if created:  # vectors inline (rag/_index.py's docstring); an older table keeps its setting
            await conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE MAIN").format(self.table))
        await conn.execute(self.create_hnsw())
        cur = await conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'tsv' AND NOT attisdropped",
            (self.name,))
        if await cur.fetchone() is None:  # a table made before hybrid search
            await conn.execute(sql.SQL(
                "ALTER TABLE {} ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector({}, text)) STORED").format(
                    self.table, sql.Literal(TEXT_SEARCH_CONFIG)))
        await conn.execute(self.create_fts())

    def create_hnsw(self, m: int | None = None, ef_construction: int | None = None) -> Any:
        """``CREATE INDEX IF NOT EXISTS`` of the HNSW index (pgvector's build parameters when given)."""
        sql = self.sql
        stmt = sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
            self.hnsw, self.table)
        if m is None or ef_construction is None:
            return stmt
        return sql.SQL("{} WITH (m = {}, ef_construction = {})").format(
            stmt, sql.Literal(m), sql.Literal(ef_construction))

    def create_fts(self) -> Any:
        return self.sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gin (tsv)").format(self.fts, self.table)

    def drop_hnsw(self) -> Any:
        return self.sql.SQL("DROP INDEX IF EXISTS {}").format(self.hnsw)

    def drop_fts(self) -> Any:
        return self.sql.SQL("DROP INDEX IF EXISTS {}").format(self.fts)


MAX_PROBLEMS = 20  # per index: a damaged index is named, not listed row by row


def verify_pg_rag_indexes(dsn: str) -> list[tuple[str, list[str], str]]:
    """``db verify``'s audit of the rag component (its entry in ``core.postgres.COMPONENTS``), one entry per index:
    its chunk table exists with the recorded dimension, each document's chunks are rows ``0 .. chunks - 1``, and
    no chunk row lacks its document. Reads only (no lock, nothing written)."""
    from openfunctions.core.postgres import load_psycopg

    psycopg, _ = load_psycopg()
    out: list[tuple[str, list[str], str]] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        if not conn.execute("SELECT to_regclass('of_rag_indexes') IS NOT NULL").fetchone()[0]:
            return []
        for name, dimension in conn.execute("SELECT name, dimension FROM of_rag_indexes ORDER BY name").fetchall():
            if not INDEX_NAME_RE.match(name):
                out.append((f"rag index {name!r}", ["its name is not a valid index name"], ""))
                continue
            out.append((f"rag index {name}", *_audit(conn, ChunkTable(name), name, dimension)))
    return out


def _audit(conn: Any, table: ChunkTable, name: str, dimension: int) -> tuple[list[str], str]:
    """(problems, what was checked) of one index (see :func:`verify_pg_rag_indexes`)."""
    sql = table.sql
    (found,) = conn.execute(  # pgvector keeps a vector column's dimension as its type modifier
        "SELECT (SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding' "
        "AND NOT attisdropped)", (table.name,)).fetchone()
    if found is None:
        return [f"its chunk table {table.name} (or its embedding column) is missing"], ""
    problems = [] if found == dimension else [
        f"its chunk table holds vectors of {found} dimensions; the index records {dimension}"]
    for doc_id, chunks, rows, first, last in conn.execute(sql.SQL(
            "SELECT d.doc_id, d.chunks, count(c.n), min(c.n), max(c.n) FROM of_rag_docs d LEFT JOIN {} c "
            "ON c.doc_id = d.doc_id WHERE d.index_name = %s GROUP BY d.doc_id, d.chunks "
            "HAVING count(c.n) <> d.chunks OR min(c.n) <> 0 OR max(c.n) <> d.chunks - 1 "
            "ORDER BY d.doc_id LIMIT %s").format(table.table), (name, MAX_PROBLEMS)).fetchall():
        problems.append(f"document {doc_id!r} records {chunks} chunks; the table holds {rows}"
                        + (f" (n {first} to {last})" if rows else ""))
    for (doc_id,) in conn.execute(sql.SQL(
            "SELECT DISTINCT c.doc_id FROM {} c WHERE NOT EXISTS (SELECT 1 FROM of_rag_docs d "
            "WHERE d.index_name = %s AND d.doc_id = c.doc_id) ORDER BY c.doc_id LIMIT %s").format(table.table),
            (name, MAX_PROBLEMS)).fetchall():
        problems.append(f"chunks of {doc_id!r}, a document the index does not list")
    docs, rows = conn.execute(sql.SQL(
        "SELECT (SELECT count(*) FROM of_rag_docs WHERE index_name = %s), (SELECT count(*) FROM {})").format(
            table.table), (name,)).fetchone()
    return problems, (f"{docs} documents, {rows} chunks of {dimension} dimensions; every document's chunks "
                      "present, none without its document")


__all__ = ["COMPONENT", "INDEX_NAME_RE", "MIGRATIONS", "TEXT_SEARCH_CONFIG", "ChunkTable", "require_vector",
           "verify_pg_rag_indexes"]
