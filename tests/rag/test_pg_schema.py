"""The pgvector index on core.postgres's plumbing: the ``rag`` schema component, its error mapping, its pool.

Everything here runs against the real PostgreSQL of the test session (tests/_pg.py), most of it in a private
database of its own (``db migrate`` and ``pg_stat_activity`` see the whole database).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from openfunctions.core.postgres import COMPONENTS, migrate_components, migrations_of
from openfunctions.rag import Chunker, VectorExtensionMissing, open_rag
from openfunctions.rag import _rag as rag_module
from openfunctions.rag._pg_schema import MIGRATIONS
from openfunctions.store import LexicalEmbedder, StoreUnavailable
from tests._pg import unique_name
from tests.store._journal_backends import private_database

pytestmark = pytest.mark.anyio

DOCS = {
    "keys.md": "Rotate the signing keys every ninety days. The old key stays valid for one week after rotation.",
    "backup.md": "Backups run nightly at two. A restore is tested every month on a scratch machine.",
    "onboarding.md": "New engineers get a laptop, a badge and a mentor. The mentor reviews their first change.",
}

# The previous release's tables, statement for statement as its rag/_index.py ran them at open (with the
# ``vector`` extension created first and ``of_schema`` managed by core.postgres). Kept verbatim: a database
# written by that release must open with this code.
PREVIOUS_RELEASE = (
    "CREATE TABLE IF NOT EXISTS of_schema (component text PRIMARY KEY, version integer NOT NULL, "
    "migrated_at timestamptz NOT NULL DEFAULT now())",
    """CREATE TABLE IF NOT EXISTS of_rag_indexes (
                name text PRIMARY KEY, embedder text NOT NULL, dimension integer NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE IF NOT EXISTS of_rag_docs (
                index_name text NOT NULL, doc_id text COLLATE "C" NOT NULL, digest text NOT NULL, chunker text NOT NULL,
                embedder text NOT NULL, source text, title text, chunks integer NOT NULL, bytes integer NOT NULL,
                updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (index_name, doc_id))""",
)


def _previous_release_chunk_table(name: str, dim: int) -> list[str]:
    t = f"of_rag_chunks_{name}"
    return [
        f"CREATE TABLE IF NOT EXISTS {t} (doc_id text NOT NULL, n integer NOT NULL, text text NOT NULL, "
        f"embedding vector({dim}) NOT NULL, PRIMARY KEY (doc_id, n))",
        f"ALTER TABLE {t} ALTER COLUMN embedding SET STORAGE MAIN",
        f"CREATE INDEX IF NOT EXISTS {t}_hnsw ON {t} USING hnsw (embedding vector_cosine_ops)",
        f"ALTER TABLE {t} ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED",
        f"CREATE INDEX IF NOT EXISTS {t}_fts ON {t} USING gin (tsv)",
    ]


def _vec(v: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def _write_like_the_previous_release(dsn: str, name: str, *, version_row: bool) -> None:
    """An index with DOCS in it, the tables and rows exactly as the previous release wrote them."""
    import hashlib

    emb, chunker = LexicalEmbedder(), Chunker()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for sql in PREVIOUS_RELEASE:
            conn.execute(sql)
        if version_row:  # what the previous release's open left in of_schema
            conn.execute("INSERT INTO of_schema (component, version) VALUES ('rag', 1) ON CONFLICT DO NOTHING")
        conn.execute("INSERT INTO of_rag_indexes (name, embedder, dimension) VALUES (%s, %s, %s)",
                     (name, emb.name, emb.dimension))
        for sql in _previous_release_chunk_table(name, emb.dimension):
            conn.execute(sql)
        for doc_id, text in DOCS.items():
            chunks = chunker.split(text)
            for n, (chunk, v) in enumerate(zip(chunks, emb.embed(chunks), strict=True)):
                conn.execute(f"INSERT INTO of_rag_chunks_{name} (doc_id, n, text, embedding) VALUES (%s, %s, %s, %s)",
                             (doc_id, n, chunk, _vec(v)))
            data = text.encode()
            conn.execute(
                "INSERT INTO of_rag_docs (index_name, doc_id, digest, chunker, embedder, source, title, chunks, bytes) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (name, doc_id, "sha256:" + hashlib.sha256(data).hexdigest(), chunker.spec, emb.name, f"docs/{doc_id}",
                 None, len(chunks), len(data)))


def _exact_ranking(dsn: str, name: str, query: str) -> list[str]:
    """The chunk ids by cosine distance to ``query``, read straight from the table (no code of the index)."""
    (q,) = LexicalEmbedder().embed([query])
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT doc_id, n FROM of_rag_chunks_{name} ORDER BY embedding <=> %s::vector, doc_id, n",
                            (_vec(q),)).fetchall()
    return [f"{d}#{n:06d}" for d, n in rows]


def _version(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT version FROM of_schema WHERE component = 'rag'").fetchone()
    return row[0] if row else None


@pytest.mark.parametrize("upgrade", ["opened", "db-migrate-without-version-row"])
async def test_an_index_written_by_the_previous_release_opens_and_answers_the_same(pg_dsn, upgrade) -> None:
    """"opened": the previous release's database (``of_schema`` rag = 1), opened by this code; the other: the same
    tables with no version row, brought up by ``db migrate`` (version 1 accepts tables that exist)."""
    name = unique_name("u").lower()
    question = "how often are the signing keys rotated?"
    with private_database(pg_dsn) as db:
        _write_like_the_previous_release(db, name, version_row=upgrade == "opened")
        expected = _exact_ranking(db, name, question)
        if upgrade != "opened":
            assert (await migrate_components(db))["rag"] == (0, len(MIGRATIONS))
        rag = await open_rag(url=db, name=name)
        try:
            assert _version(db) == len(MIGRATIONS)
            got = await rag.search(question, k=len(expected), mode="vector", exact=True)
            assert [h["chunk_id"] for h in got] == expected
            assert got[0]["doc_id"] == "keys.md" and got[0]["source"] == "docs/keys.md"
            assert [h["doc_id"] for h in await rag.search("restore scratch machine", k=1, mode="text")] == ["backup.md"]
            # the documents' rows are read as they were written: re-ingesting one unchanged is a no-op
            assert (await rag.ingest("keys.md", DOCS["keys.md"], source="docs/keys.md")).status == "unchanged"
            assert (await rag.get_chunk("onboarding.md#000000"))["text"] == DOCS["onboarding.md"]
        finally:
            await rag.aclose()


async def test_rag_is_a_registered_component_that_db_migrate_creates_and_db_status_lists(pg_dsn) -> None:
    assert [c for c in COMPONENTS if c.name == "rag"][0].at_open  # an index still migrates when it opens
    assert migrations_of("rag") == MIGRATIONS
    with private_database(pg_dsn) as db:
        done = await migrate_components(db)
        assert done["rag"] == (0, len(MIGRATIONS))
        with psycopg.connect(db, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass('of_rag_indexes') IS NOT NULL, to_regclass('of_rag_docs') "
                                 "IS NOT NULL, EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')").fetchone()
        assert found == (True, True, True)  # a superuser migrated: the extension came with it
        env = {k: v for k, v in os.environ.items() if k != "OPENFUNCTIONS_DATABASE_URL"}
        status = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "openfunctions.servers", "db", "status", "--database", db],
            capture_output=True, text=True, timeout=120, env=env)
        assert f"rag schema version {len(MIGRATIONS)}, this code needs {len(MIGRATIONS)} (current)" in status.stdout, (
            status.stdout + status.stderr)
        rag = await open_rag(url=db, name="after_migrate")
        try:
            assert (await rag.ingest("a", "alpha beta gamma")).status == "added"
        finally:
            await rag.aclose()


async def test_a_database_error_reads_as_every_backend_s(pg_dsn) -> None:
    """A real server error (the chunk table dropped under an open index) is core.postgres's mapping:
    ``StoreUnavailable`` naming the index, what it was doing and the database, ``certainty`` and its kind."""
    name = unique_name("e").lower()
    rag = await open_rag(url=pg_dsn, name=name)
    try:
        await rag.ingest("a", "alpha beta gamma")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE of_rag_chunks_{name}")
        with pytest.raises(StoreUnavailable) as read:
            await rag.search("alpha", mode="vector")
        assert read.value.message.startswith(f"RAG index {name!r}: searching in PostgreSQL at ")
        assert "failed (UndefinedTable: relation " in read.value.message and "nothing was written" in read.value.message
        assert read.value.details == {"index": name, "certainty": "known", "database_error": "rejected"}
        with pytest.raises(StoreUnavailable) as write:
            await rag.ingest("b", "delta epsilon")
        assert write.value.certainty == "known" and write.value.details["database_error"] == "rejected"
        assert write.value.message.startswith(f"RAG index {name!r}: writing a document in PostgreSQL at ")
        with pytest.raises(StoreUnavailable, match="counting chunks"):  # once a raw psycopg error
            await rag.stats()
        with pytest.raises(StoreUnavailable, match="reading a chunk"):
            await rag.get_chunk("a#000000")
    finally:
        await rag.aclose()


async def test_lost_connections_fail_one_call_then_the_pool_checks_the_rest(pg_dsn) -> None:
    """Every pooled connection killed (as a PostgreSQL restart does): the first call fails named, a write's outcome
    ``unknown``; that failure has the pool check its idle connections, so the calls after it all get live ones."""
    with private_database(pg_dsn) as db:
        rag = await open_rag(url=db, name="lost")
        try:
            await rag.ingest("a", "alpha beta gamma")
            pool = rag.index.pool
            async with pool.connection(), pool.connection(), pool.connection():
                pass  # three connections held at once: the pool has (at least) three, idle now
            with psycopg.connect(db, autocommit=True) as conn:
                killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                      "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
                assert killed >= 3, killed
                for _ in range(200):  # until the server has ended them (the signal is asynchronous)
                    others = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                          "AND pid <> pg_backend_pid()").fetchone()[0]
                    if others == 0:
                        break
                    await asyncio.sleep(0.05)
            with pytest.raises(StoreUnavailable) as lost:
                await rag.delete_document("a")  # a write, first thing on a dead connection
            assert lost.value.certainty == "unknown" and lost.value.details["database_error"] == "unavailable"
            assert "the write may or may not have committed; the next call reconnects" in lost.value.message
            hits = await asyncio.gather(*(rag.search("alpha") for _ in range(4)), return_exceptions=True)
            assert all(isinstance(h, list) for h in hits), hits
            assert (await rag.ingest("b", "delta epsilon")).status == "added"
        finally:
            await rag.aclose()


def _as_role(dsn: str, role: str) -> str:
    parts = conninfo_to_dict(dsn)
    parts["user"] = role
    parts.pop("password", None)
    return make_conninfo(**parts)


async def test_a_role_that_may_not_create_the_vector_extension_is_told_the_statement(pg_dsn) -> None:
    role = unique_name("role")
    with private_database(pg_dsn) as db:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
            database = conninfo_to_dict(db)["dbname"]
            with pytest.raises(VectorExtensionMissing) as missing:
                await open_rag(url=_as_role(db, role), name="r")
            assert missing.value.code == "rag_vector_extension_missing"
            assert "CREATE EXTENSION vector;" in missing.value.message and repr(database) in missing.value.message
            assert "may not create it" in missing.value.message
            with psycopg.connect(db, autocommit=True) as conn:  # what the message says a superuser runs
                conn.execute("CREATE EXTENSION vector")
            rag = await open_rag(url=_as_role(db, role), name="r")
            try:
                assert (await rag.ingest("a", "alpha beta")).status == "added"
            finally:
                await rag.aclose()
        finally:
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(f'DROP OWNED BY "{role}"')
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(f'DROP ROLE "{role}"')


@dataclass(frozen=True)
class _Watched(Chunker):
    """The real chunker, noting the thread that split each text."""

    threads: list[int] = field(default_factory=list)

    def split(self, text: str) -> list[str]:
        self.threads.append(threading.get_ident())
        return super().split(text)


@pytest.mark.parametrize("many", [False, True])
async def test_large_documents_are_hashed_and_chunked_off_the_event_loop(tmp_path, monkeypatch, many) -> None:
    loop_thread = threading.get_ident()
    hashed: list[int] = []
    real_digest = rag_module._digest

    def watched_digest(data: bytes) -> str:
        hashed.append(threading.get_ident())
        return real_digest(data)

    monkeypatch.setattr(rag_module, "_digest", watched_digest)
    chunker = _Watched()
    rag = await open_rag(data_dir=tmp_path, chunker=chunker)
    big = "A sentence about keys and backups. " * (rag_module.OFF_LOOP_BYTES // 20)
    try:
        for text, off in (("a small document", False), (big, True)):
            hashed.clear()
            chunker.threads.clear()
            if many:
                (res,) = await rag.ingest_many([{"doc_id": f"d{off}", "text": text}])
                assert not isinstance(res, Exception)
            else:
                res = await rag.ingest(f"d{off}", text)
            assert res.digest == real_digest(text.encode())
            assert hashed and chunker.threads
            assert all((t != loop_thread) is off for t in hashed + chunker.threads), (off, hashed, chunker.threads)
    finally:
        await rag.aclose()


async def test_db_verify_audits_each_index_and_names_what_is_damaged(pg_dsn) -> None:
    from openfunctions.rag._pg_schema import verify_pg_rag_indexes
    from openfunctions.store.db_cli import verify_database

    with private_database(pg_dsn) as db:
        assert verify_pg_rag_indexes(db) == []  # no RAG tables yet: nothing to audit
        await migrate_components(db)  # db verify reads every component (the journals' tables first)
        rag = await open_rag(url=db, name="audited")
        try:
            await rag.ingest_many([{"doc_id": d, "text": t} for d, t in DOCS.items()])
        finally:
            await rag.aclose()
        ((subject, problems, checked),) = verify_pg_rag_indexes(db)
        assert subject == "rag index audited" and problems == [] and checked.startswith("3 documents, 3 chunks of 512")
        assert await asyncio.to_thread(verify_database, db) == 0
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DELETE FROM of_rag_chunks_audited WHERE doc_id = 'keys.md'")
            conn.execute("INSERT INTO of_rag_chunks_audited (doc_id, n, text, embedding) "
                         "SELECT 'stray.md', n, text, embedding FROM of_rag_chunks_audited WHERE doc_id = 'backup.md'")
        ((_, problems, _),) = verify_pg_rag_indexes(db)
        assert problems == ["document 'keys.md' records 1 chunks; the table holds 0",
                            "chunks of 'stray.md', a document the index does not list"]
        assert await asyncio.to_thread(verify_database, db) == 1
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DROP TABLE of_rag_chunks_audited")
        ((_, problems, _),) = verify_pg_rag_indexes(db)
        assert problems == ["its chunk table of_rag_chunks_audited (or its embedding column) is missing"]


async def test_a_rag_schema_newer_than_this_code_is_refused_at_open(pg_dsn) -> None:
    from openfunctions.core.postgres import SchemaTooNew

    with private_database(pg_dsn) as db:
        await migrate_components(db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("UPDATE of_schema SET version = %s WHERE component = 'rag'", (len(MIGRATIONS) + 1,))
        with pytest.raises(SchemaTooNew, match=f"'rag' schema is version {len(MIGRATIONS) + 1}"):
            await open_rag(url=db, name="newer")
        with psycopg.connect(db, autocommit=True) as conn:  # refused before anything of the index was written
            assert conn.execute("SELECT count(*) FROM of_rag_indexes").fetchone()[0] == 0
