"""openfunctions.artifacts: immutable artifacts with opaque ids, verified bounded reads, a quota,
and the projection that keeps large tool replies inside a model's output budget.
"""

from ._ids import ARTIFACT_ID_PATTERN, find_artifact_ids, is_artifact_id
from .errors import (
    ArtifactCorrupt,
    ArtifactError,
    ArtifactNotFound,
    ArtifactQuotaExceeded,
    ArtifactRequestInvalid,
    ArtifactStoreFailed,
    ArtifactStoreUnsafe,
)
from .projection import DEFAULT_BUDGET, default_summary, project_reply, reply_sizes
from .protocol import ArtifactStoreProtocol
from .refs import ArtifactChunk, ArtifactInfo, ArtifactRef
from .store import DEFAULT_MEDIA_TYPE, DEFAULT_QUOTA_BYTES, MAX_READ_BYTES, ArtifactStore
from .tool import create_artifact_read_tool

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ArtifactChunk",
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactQuotaExceeded",
    "ArtifactRef",
    "ArtifactRequestInvalid",
    "ArtifactStore",
    "ArtifactStoreFailed",
    "ArtifactStoreProtocol",
    "ArtifactStoreUnsafe",
    "DEFAULT_BUDGET",
    "DEFAULT_MEDIA_TYPE",
    "DEFAULT_QUOTA_BYTES",
    "MAX_READ_BYTES",
    "create_artifact_read_tool",
    "default_summary",
    "find_artifact_ids",
    "is_artifact_id",
    "project_reply",
    "reply_sizes",
]
