"""The interface the read tool and the reply projection need from a store.

:class:`~openfunctions.artifacts.ArtifactStore` (files in one directory) is
the embedded implementation. A backend on a shared engine (PostgreSQL large
objects, an object store) that serves several server replicas implements
these four methods with the same meaning -- immutable artifacts, opaque ids,
verified bounded reads, a quota that concurrent writers cannot overshoot --
and plugs into ``create_artifact_read_tool`` and ``project_reply`` unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._refs import ArtifactChunk, ArtifactInfo, ArtifactRef


@runtime_checkable
class ArtifactStoreProtocol(Protocol):
    async def put(self, data: Any, *, media_type: str = ..., scope: str | None = ...) -> ArtifactRef:
        """Store immutable content; reuse the artifact for the same (content, scope, media type)."""
        ...

    async def stat(self, artifact_id: Any) -> ArtifactInfo:
        """The index record; ``ArtifactNotFound`` for any unknown or malformed id."""
        ...

    async def read(self, artifact_id: Any, offset: int = 0, length: int = ...) -> ArtifactChunk:
        """At most 16 KiB at ``offset``, returned only after the content's digest was verified."""
        ...

    async def usage(self) -> dict[str, int]:
        """``{"used_bytes", "quota_bytes"}``."""
        ...


__all__ = ["ArtifactStoreProtocol"]
