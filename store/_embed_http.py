"""Provider embedding APIs as embedders: the OpenAI-compatible ``/v1/embeddings`` wire format.

Request (``POST {base_url}/embeddings``, ``Authorization: Bearer <key>``)::

    {"model": "<model>", "input": ["text", ...], "encoding_format": "float"}

Reply: ``{"data": [{"index": i, "embedding": [float, ...]}, ...], "model": ..., "usage": ...}``.
OpenAI, Azure OpenAI's v1 surface, OpenRouter, Together, Mistral, vLLM, Ollama
(``/v1``), LM Studio and llama.cpp's server all speak it. Vectors are put in
``index`` order, checked (finite numbers, one dimension) and L2-normalized
(not every server normalizes).

The embedder protocol is synchronous (memory and RAG call ``embed`` in a
worker thread), so this uses httpx's sync client. Retries follow the provider
adapters' rules (openfunctions.adapters): 429, 500, 502, 503, 504 and 529 and
a connection that fails before a reply are retried up to ``max_attempts``
with exponential backoff and jitter, or after the ``retry-after`` /
``retry-after-ms`` the server asks for (one longer than ``max_retry_after`` is
not waited for). The adapters' retry loop is not exported for reuse (and is
async), so the few lines are repeated here; the error names and codes are
this package's: :class:`EmbedderFailed` (``embedder_failed``) with the
provider's own message.

``dimension``: give it when you know it (the index records it before the first
call); otherwise one request embeds a probe text at construction to learn it.
The embedder's ``name`` is ``openai:<model>`` (what an index records: another
model, or another provider's vectors, are refused at open).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from openfunctions.core import ConfigurationError

from ._errors import StoreError

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENFUNCTIONS_EMBEDDINGS_URL"
KEY_ENVS = ("OPENFUNCTIONS_EMBEDDINGS_KEY", "OPENAI_API_KEY")
KNOWN_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


class EmbedderFailed(StoreError):
    """The embedding API refused or failed the request (after retries where a retry could help)."""

    code = "embedder_failed"


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint (see the module docstring)."""

    def __init__(self, model: str, *, api_key: str | None = None, base_url: str | None = None,
                 dimension: int | None = None, batch_size: int = 256, timeout: float = 60.0,
                 max_attempts: int = 4, max_retry_after: float = 60.0, client: Any = None) -> None:
        try:
            import httpx
        except ImportError:
            raise ConfigurationError(
                "the OpenAI-compatible embedder needs httpx: pip install 'openfunctions-mcp[adapters]'") from None
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("the OpenAI-compatible embedder needs a model name (openai:<model>)")
        if not isinstance(batch_size, int) or not 1 <= batch_size <= 2048:
            raise ConfigurationError(f"batch_size must be 1..2048 (the API's limit), got {batch_size!r}")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), None)
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.max_retry_after = max_retry_after
        self._httpx = httpx
        self._client = client or httpx.Client(timeout=timeout)
        #: The wait between attempts (replaceable to observe the waits in tests).
        self.sleep: Callable[[float], None] = time.sleep
        if dimension is None:
            dimension = KNOWN_DIMENSIONS.get(model) if self.base_url == DEFAULT_BASE_URL else None
        if dimension is None:
            dimension = len(self._request(["dimension probe"])[0])
        if not isinstance(dimension, int) or isinstance(dimension, bool) or not 1 <= dimension <= 16_000:
            raise ConfigurationError(f"embedder dimension must be an integer 1..16000, got {dimension!r}")
        self.dimension = dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            for vec in self._request(list(texts[i:i + self.batch_size])):
                if len(vec) != self.dimension:
                    raise EmbedderFailed(
                        f"{self.name} at {self.base_url} returned a vector of {len(vec)} dimensions; this embedder "
                        f"has {self.dimension}", details={"got": len(vec), "dimension": self.dimension})
                out.append(vec)
        return out

    def close(self) -> None:
        self._client.close()

    # -- one request, with retries -----------------------------------------------
    def _request(self, texts: list[str]) -> list[list[float]]:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._client.post(f"{self.base_url}/embeddings", json=body, headers=headers)
            except self._httpx.TimeoutException as exc:
                raise EmbedderFailed(f"{self.name} at {self.base_url} did not answer in time ({type(exc).__name__})",
                                     details={"url": self.base_url}) from None
            except self._httpx.TransportError as exc:
                if attempt >= self.max_attempts:
                    raise EmbedderFailed(f"{self.name}: cannot reach {self.base_url} ({type(exc).__name__}: {exc})",
                                         details={"url": self.base_url}) from None
                self.sleep(_backoff(attempt))
                continue
            if resp.status_code == 200:
                return self._parse(resp, len(texts))
            wait = _retry_after(resp.headers)
            if resp.status_code not in RETRY_STATUSES or attempt >= self.max_attempts or (
                    wait is not None and wait > self.max_retry_after):
                raise EmbedderFailed(
                    f"{self.name} at {self.base_url} answered HTTP {resp.status_code}: {_provider_message(resp)}"
                    + (f" (asked to wait {wait:.0f}s, more than max_retry_after)" if wait and wait > self.max_retry_after else ""),
                    details={"status": resp.status_code, "url": self.base_url, "attempts": attempt})
            self.sleep(wait if wait is not None else _backoff(attempt))

    def _parse(self, resp: Any, n: int) -> list[list[float]]:
        try:
            data = resp.json()["data"]
            items = sorted(data, key=lambda d: d["index"])
            vecs = [[float(x) for x in d["embedding"]] for d in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderFailed(f"{self.name} at {self.base_url} sent a reply without the wire format's "
                                 f"data[].embedding ({type(exc).__name__}: {exc})") from None
        if len(vecs) != n:
            raise EmbedderFailed(f"{self.name} at {self.base_url} returned {len(vecs)} vectors for {n} texts")
        out = []
        for v in vecs:
            norm = math.sqrt(sum(x * x for x in v))
            if not math.isfinite(norm) or not v:
                raise EmbedderFailed(f"{self.name} at {self.base_url} returned an empty or non-finite vector")
            out.append([x / norm for x in v] if norm else v)
        return out


def _backoff(attempt: int) -> float:
    return min(8.0, 0.5 * 2.0 ** (attempt - 1)) * (0.5 + random.random() / 2)


def _retry_after(headers: Any) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is not None:
            try:
                return max(0.0, float(raw) / scale)
            except ValueError:
                return None  # an HTTP date: fall back to our own backoff
    return None


def _provider_message(resp: Any) -> str:
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:500]
    except Exception:
        pass
    return resp.text[:200] or "(no body)"


__all__ = ["EmbedderFailed", "OpenAIEmbedder"]
