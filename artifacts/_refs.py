"""The public value types of the artifact store: references, index records, chunks."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ArtifactRef:
    """What ``put`` returns: enough to cite and read an artifact."""

    id: str
    sha256: str
    size: int
    media_type: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ArtifactInfo(ArtifactRef):
    """An artifact's full index record (``stat``)."""

    scope: str | None
    created_at: str

    @property
    def ref(self) -> ArtifactRef:
        return ArtifactRef(self.id, self.sha256, self.size, self.media_type)


@dataclass(frozen=True)
class ArtifactChunk:
    """One verified, bounded read. ``eof`` is true when the chunk reaches the end."""

    artifact_id: str
    data: bytes
    offset: int
    length: int
    total_size: int
    sha256: str
    eof: bool
    media_type: str


__all__ = ["ArtifactRef", "ArtifactInfo", "ArtifactChunk"]
