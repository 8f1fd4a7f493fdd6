"""openfunctions.artifacts: immutable artifacts with opaque ids, verified bounded reads, a quota,
and the projection that keeps large tool replies inside a model's output budget.
"""

from ._checks import charge_quota, check_media_type, check_range, check_scope
from ._ids import ARTIFACT_ID_PATTERN, check_artifact_id, find_artifact_ids, is_artifact_id, new_artifact_id
from ._ids import not_found as artifact_not_found
from ._projection import DEFAULT_BUDGET, default_summary, project_reply, reply_sizes
from ._protocol import ArtifactStoreProtocol
from ._records import parse_record, record_bytes
from ._refs import ArtifactChunk, ArtifactInfo, ArtifactRef
from ._store import DEFAULT_MEDIA_TYPE, DEFAULT_QUOTA_BYTES, MAX_READ_BYTES, ArtifactStore
from ._tool import READ_INPUT_SCHEMA, READ_OUTPUT_SCHEMA, create_artifact_read_tool
from ._writer import collect_blob
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
    # The rules every backend applies the same way (the PostgreSQL one in openfunctions.store uses them):
    # argument checks, ids, the quota charge, the index record's bytes (with its check), and put()'s data
    # taken in (the one dispatch, the cap, the hash in a worker thread).
    "artifact_not_found",
    "charge_quota",
    "check_artifact_id",
    "check_media_type",
    "check_range",
    "check_scope",
    "collect_blob",
    "new_artifact_id",
    "parse_record",
    "record_bytes",
]
