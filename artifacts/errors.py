"""Errors of the artifact store.

Every error has a stable ``code`` (clients and journals store it; never
renamed). ``ArtifactNotFound`` deliberately says nothing about *why* an id
did not resolve: a malformed id, an unknown id and an id the caller may not
see must be indistinguishable.
"""

from __future__ import annotations

from openfunctions.core.errors import InvalidParams, OpenFunctionsError, UnsafePath


class ArtifactError(OpenFunctionsError):
    """Root of the artifact store's errors."""

    code = "artifact_error"


class ArtifactNotFound(ArtifactError):
    """No artifact with that id (or the id is malformed, or the caller may not see it)."""

    code = "artifact_not_found"


class ArtifactCorrupt(ArtifactError):
    """The stored bytes (or their index record) do not match what was written; nothing is returned."""

    code = "artifact_corrupt"


class ArtifactQuotaExceeded(ArtifactError):
    """Storing the data would take the store past its quota; nothing was stored."""

    code = "artifact_quota_exceeded"


class ArtifactRequestInvalid(ArtifactError, InvalidParams):
    """A caller's argument is wrong (negative offset, bad media type, data of the wrong type)."""

    code = "artifact_request_invalid"


class ArtifactStoreFailed(ArtifactError):
    """The filesystem refused an operation (disk full, I/O error, permission); ``details['errno']`` names it."""

    code = "artifact_store_failed"


class ArtifactStoreUnsafe(ArtifactError, UnsafePath):
    """The store directory is a symlink, not a directory, or has an unsafe format/version."""

    code = "artifact_store_unsafe"


__all__ = [
    "ArtifactError",
    "ArtifactNotFound",
    "ArtifactCorrupt",
    "ArtifactQuotaExceeded",
    "ArtifactRequestInvalid",
    "ArtifactStoreFailed",
    "ArtifactStoreUnsafe",
]
