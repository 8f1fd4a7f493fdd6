"""RAG runs on both indexes: ``rag_backend`` is parametrized (embedded store index, real pgvector)."""

from __future__ import annotations

import pytest

from tests._pg import pg_dsn, unique_name  # noqa: F401  (pg_dsn is a fixture)


@pytest.fixture(params=["embedded", "pgvector"])
def rag_where(request, tmp_path):
    """kwargs for open_rag: the same index on every call within a test."""
    if request.param == "embedded":
        return {"data_dir": tmp_path / "data", "name": "rag"}
    return {"url": request.getfixturevalue("pg_dsn"), "name": unique_name("r").lower()}
