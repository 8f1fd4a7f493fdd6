"""openfunctions.artifacts: immutable artifacts with opaque ids, verified bounded reads, a quota,
and the projection that keeps large tool replies inside a model's output budget.
"""

from ._ids import ARTIFACT_ID_PATTERN, find_artifact_ids, is_artifact_id
from ._projection import DEFAULT_BUDGET, default_summary, project_reply, reply_sizes
from ._protocol import ArtifactStoreProtocol
from ._refs import ArtifactChunk, ArtifactInfo, ArtifactRef
from ._store import DEFAULT_MEDIA_TYPE, DEFAULT_QUOTA_BYTES, MAX_READ_BYTES, ArtifactStore
from ._tool import READ_INPUT_SCHEMA, READ_OUTPUT_SCHEMA, create_artifact_read_tool
from .errors import (
    ArtifactCorrupt,
    ArtifactError,
    ArtifactNotFound,
    ArtifactQuotaExceeded,
    ArtifactRequestInvalid,
    ArtifactStoreFailed,
    ArtifactStoreUnsafe,
)

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
    "READ_INPUT_SCHEMA",
    "READ_OUTPUT_SCHEMA",
    "create_artifact_read_tool",
    "default_summary",
    "find_artifact_ids",
    "is_artifact_id",
    "project_reply",
    "reply_sizes",
]
