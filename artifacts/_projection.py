"""Reply projection: keep a tool reply inside a model's output budget.

A model reads a reply twice over: as ``structuredContent`` (we measure its
canonical UTF-8 JSON) and as the text block MCP hosts show, which is
``json.dumps(payload, indent=2, ensure_ascii=False)`` (``openfunctions.core.pretty_json``).
If either form is larger than the budget (32 KiB by default),
:func:`project_reply` returns instead

* the caller's summary of the payload (``summarize(payload)``: identity,
  state, evidence summaries), and
* ``artifactProjection``: ``{"available": true, "artifact_id", "sha256",
  "size", "media_type": "application/json"}`` naming an immutable artifact
  that holds the payload's full canonical JSON. The same payload in the same
  scope yields the same artifact (content reuse in the store), also after a
  restart.

If the artifact cannot be stored (quota exhausted, disk full) the reply says
``artifactProjection: {"available": false, "reason": ...}``; the summary is
still there, so the operation's own success and certainty fields stay
truthful. The projected reply is itself guaranteed to fit the budget: when
the summary alone is too large it is shortened (long strings cut, long lists
cut, then non-essential keys dropped) and the reply carries
``summaryTruncated: true``. Top-level scalars of the summary (booleans,
numbers, null, strings up to 256 characters: ids, states, ``ok``,
``certainty``) and the keys named in ``keep`` are the last to go.

Hosts with an output schema for such replies must allow the two extra
top-level keys ``artifactProjection`` and ``summaryTruncated``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio.to_thread

from openfunctions.core import canonical_bytes, canonical_json, pretty_json

from ._protocol import ArtifactStoreProtocol
from .errors import ArtifactError, ArtifactQuotaExceeded

DEFAULT_BUDGET = 32 * 1024
MIN_BUDGET = 1024
PROJECTION_MEDIA_TYPE = "application/json"
_SHORT_STRING = 256
_REASON_CHARS = 400
# (max string characters, max list items) tried in turn while shortening a summary.
_SHRINK_LEVELS = ((2048, 64), (512, 16), (128, 4), (32, 1), (8, 0))

Summarizer = Callable[[Any], dict[str, Any]]
_Payload = TypeVar("_Payload")


def reply_sizes(payload: Any) -> tuple[int, int]:
    """``(canonical UTF-8 JSON bytes, pretty text bytes)`` of a reply."""
    return len(canonical_bytes(payload)), len(pretty_json(payload).encode("utf-8"))


def fits(payload: Any, budget: int) -> bool:
    """Whether both forms of ``payload`` are within ``budget`` bytes (``payload`` must be JSON)."""
    # Key order does not change a length, so the compact form needs no
    # sorting; and the pretty form is never shorter than the compact one, so
    # it is only built for candidates that could fit.
    compact = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if len(compact.encode("utf-8")) > budget:
        return False
    return len(pretty_json(payload).encode("utf-8")) <= budget


async def project_reply(
    payload: _Payload,
    *,
    store: ArtifactStoreProtocol,
    scope: str | None,
    budget: int = DEFAULT_BUDGET,
    summarize: Summarizer | None = None,
    keep: Iterable[str] = (),
    read_tool: str | None = None,
) -> _Payload | dict[str, Any]:
    """Return ``payload`` if it fits ``budget``; else a bounded summary plus ``artifactProjection``.

    ``summarize(payload)`` must return a JSON object (without the payload's
    bulk); by default the payload's top-level scalars are kept. ``read_tool``
    (e.g. ``"of_work_artifact_read"``) is named in the projection so the model
    knows how to read the artifact. Serialization and the store write run in
    worker threads: a multi-megabyte reply does not stall the event loop.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET:
        raise ValueError(f"budget must be an integer >= {MIN_BUDGET} bytes, got {budget!r}")
    full = await anyio.to_thread.run_sync(_full_if_too_big, payload, budget)
    if full is None:
        return payload
    summary = summarize(payload) if summarize is not None else default_summary(payload)
    if not isinstance(summary, dict):
        raise TypeError(f"summarize() must return a dict, got {type(summary).__name__}")
    projection: dict[str, Any]
    try:
        ref = await store.put(full, media_type=PROJECTION_MEDIA_TYPE, scope=scope)
    except ArtifactQuotaExceeded as exc:
        projection = {"available": False, "reason": _clip(f"artifact quota exhausted: {exc.message}")}
    except (ArtifactError, OSError) as exc:
        message = exc.message if isinstance(exc, ArtifactError) else f"{type(exc).__name__}: {exc}"
        projection = {"available": False, "reason": _clip(f"artifact store unavailable: {message}")}
    else:
        projection = {
            "available": True,
            "artifact_id": ref.id,
            "sha256": ref.sha256,
            "size": ref.size,
            "media_type": ref.media_type,
        }
        if read_tool:
            projection["read_with"] = read_tool
    return await anyio.to_thread.run_sync(_bounded, summary, projection, budget, frozenset(keep))


def default_summary(payload: Any) -> dict[str, Any]:
    """The payload's top-level scalars (ids, states, flags); everything bulky is left to the artifact."""
    if not isinstance(payload, dict):
        return {}
    return {k: v for k, v in payload.items() if _is_small_scalar(v)}


def _full_if_too_big(payload: Any, budget: int) -> bytes | None:
    full = canonical_bytes(payload)  # validates: NaN, cycles, bytes raise NonJsonValue here
    if len(full) > budget or len(pretty_json(payload).encode("utf-8")) > budget:
        return full
    return None


def _bounded(summary: dict[str, Any], projection: dict[str, Any], budget: int, keep: frozenset[str]) -> dict[str, Any]:
    # The summary is the caller's object: work on a private JSON copy.
    summary = json.loads(canonical_json(summary))
    summary.pop("artifactProjection", None)
    summary.pop("summaryTruncated", None)
    reply = {**summary, "artifactProjection": projection}
    if fits(reply, budget):
        return reply
    protected = keep | {k for k, v in summary.items() if _is_small_scalar(v)}
    for max_chars, max_items in _SHRINK_LEVELS:
        shrunk = {k: (v if k in protected else _shrink(v, max_chars, max_items)) for k, v in summary.items()}
        reply = {**shrunk, "artifactProjection": projection, "summaryTruncated": True}
        if fits(reply, budget):
            return reply
    # Still too large: keep only the protected keys, as many as fit (a binary
    # search over a prefix), with the keys named in ``keep`` first in line.
    # Named keys survive in the shape of the last-but-one level (one item, 32 characters).
    tight = _SHRINK_LEVELS[-2]
    items = [(k, v if _is_small_scalar(v) else _shrink(v, *tight)) for k, v in summary.items() if k in keep]
    items += [(k, v) for k, v in summary.items() if k in protected and k not in keep]

    def with_first(n: int) -> dict[str, Any]:
        return {**dict(items[:n]), "artifactProjection": projection, "summaryTruncated": True}

    lo, hi = 0, len(items)  # with_first(lo) fits (MIN_BUDGET leaves room for a bare projection)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(with_first(mid), budget):
            lo = mid
        else:
            hi = mid - 1
    return with_first(lo)


def _shrink(value: Any, max_chars: int, max_items: int) -> Any:
    if isinstance(value, str):
        if len(value) <= max_chars + 40:  # the marker would cost more than it saves
            return value
        return value[:max_chars] + f"…[{len(value) - max_chars} more characters]"
    if isinstance(value, list):
        return [_shrink(v, max_chars, max_items) for v in value[:max_items]]
    if isinstance(value, dict):
        return {k: _shrink(v, max_chars, max_items) for k, v in value.items()}
    return value


def _is_small_scalar(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and len(value) <= _SHORT_STRING


def _clip(text: str) -> str:
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


__all__ = ["project_reply", "default_summary", "reply_sizes", "fits", "DEFAULT_BUDGET", "MIN_BUDGET", "PROJECTION_MEDIA_TYPE"]
