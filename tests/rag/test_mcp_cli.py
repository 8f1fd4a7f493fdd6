"""RAG through its outer surfaces: `serve --profile rag` with the SDK client over stdio, and the `rag` CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from tests.interop._serve import cli_command, stdio_params

pytestmark = pytest.mark.slow
RECEIPT_KEY = "dev.openfunctions/receipt"


def _write_corpus(root: Path) -> Path:
    docs = root / "corpus"
    (docs / "sub").mkdir(parents=True)
    (docs / "volcanoes.md").write_text("Basalt lava flows far because it is runny. Obsidian is volcanic glass.\n")
    (docs / "sub" / "bees.txt").write_text("Honey bees dance to show where the flowers are. The queen lays eggs.\n")
    (docs / "sub" / "skip.bin").write_bytes(b"\x00\x01")
    (docs / ".hidden.md").write_text("never ingested")
    return docs


def _rag(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*cli_command(), "rag", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_rag_cli_ingests_with_progress_then_searches(tmp_path):
    docs = _write_corpus(tmp_path)
    data = tmp_path / "data"
    first = _rag("ingest", str(docs), "--data-dir", str(data), "--progress", "always", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "ingest [" in first.stderr and "2/2 files" in first.stderr
    assert "2 added" in first.stderr
    again = _rag("ingest", str(docs), "--data-dir", str(data), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    statuses = {json.loads(line)["doc_id"]: json.loads(line)["status"] for line in again.stdout.splitlines()}
    assert statuses == {"corpus/volcanoes.md": "unchanged", "corpus/sub/bees.txt": "unchanged"}
    found = _rag("search", "where are the flowers bees", "-k", "1", "--data-dir", str(data), "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    hit = json.loads(found.stdout)["results"][0]
    assert hit["doc_id"] == "corpus/sub/bees.txt" and "dance" in hit["text"]
    human = _rag("search", "volcanic glass", "--data-dir", str(data), cwd=tmp_path)
    assert "corpus/volcanoes.md#000000" in human.stdout
    missing = _rag("ingest", str(tmp_path / "nope"), "--data-dir", str(data), cwd=tmp_path)
    assert missing.returncode == 2 and "not a file or directory" in missing.stderr
    wrong = _rag("search", "x", "--data-dir", str(data), "--embedder", "lexical:64", cwd=tmp_path)
    assert wrong.returncode == 2 and "lexical-v2-512" in wrong.stderr and "lexical-v2-64" in wrong.stderr


def test_rag_help_lists_commands():
    out = subprocess.run([*cli_command(), "rag", "ingest", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--progress" in out.stdout and "--store" in out.stdout


async def _mcp_session(params) -> None:
    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"rag_ingest", "rag_search", "rag_get_chunk"} <= set(tools)
        assert tools["rag_delete_document"].annotations.destructive_hint is True
        added = await client.call_tool("rag_ingest", {"doc_id": "notes/tides", "source": "notes/tides.md",
                                                      "text": "Spring tides happen at new and full moon. "
                                                              "Neap tides are weaker."})
        assert not added.is_error, added.content
        assert added.structured_content["status"] in ("added", "unchanged")
        assert added.meta[RECEIPT_KEY]["outcome"] == "succeeded"
        found = await client.call_tool("rag_search", {"query": "when are spring tides", "k": 3})
        hit = next(h for h in found.structured_content["results"] if h["doc_id"] == "notes/tides")
        chunk = await client.call_tool("rag_get_chunk", {"chunk_id": hit["chunk_id"]})
        assert chunk.structured_content["source"] == "notes/tides.md"
        bad = await client.call_tool("rag_get_chunk", {"chunk_id": "../../../etc/passwd#000000"})
        assert bad.is_error


@pytest.mark.anyio
async def test_rag_profile_over_stdio(tmp_path):
    await _mcp_session(stdio_params("rag", tmp_path))
    assert (tmp_path / "store" / "rag" / "store.journal").exists()


@pytest.mark.anyio
async def test_rag_profile_on_pgvector(tmp_path, pg_dsn):
    await _mcp_session(stdio_params("rag", tmp_path, "--store", pg_dsn))
    assert not (tmp_path / "store" / "rag").exists()
