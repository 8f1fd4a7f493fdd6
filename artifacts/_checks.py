"""Argument checks for the store's public methods: each names what was wrong."""

from __future__ import annotations

import re
from typing import Any

from .errors import ArtifactQuotaExceeded, ArtifactRequestInvalid

MAX_READ_BYTES = 16 * 1024
MAX_SCOPE_CHARS = 1024
_TOKEN = r"[A-Za-z0-9!#$&^_.+\-]+"
_MEDIA_TYPE_RE = re.compile(rf"{_TOKEN}/{_TOKEN}(?:\s*;\s*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\\r\n]*\"))*")


def check_media_type(media_type: Any) -> str:
    if not isinstance(media_type, str) or len(media_type) > 255 or not _MEDIA_TYPE_RE.fullmatch(media_type):
        shown = media_type if not isinstance(media_type, str) else media_type[:80]
        raise ArtifactRequestInvalid(f"media_type must be 'type/subtype' (at most 255 characters), got {shown!r}")
    return media_type


def check_scope(scope: Any) -> str | None:
    if scope is None:
        return None
    if not isinstance(scope, str) or not (0 < len(scope) <= MAX_SCOPE_CHARS):
        raise ArtifactRequestInvalid(f"scope must be None or a string of 1-{MAX_SCOPE_CHARS} characters")
    try:
        scope.encode("utf-8")
    except UnicodeEncodeError:
        raise ArtifactRequestInvalid("scope must be valid Unicode (no lone surrogates)") from None
    return scope


def check_range(offset: Any, length: Any, size: int) -> tuple[int, int]:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ArtifactRequestInvalid(f"offset must be an integer >= 0, got {offset!r}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ArtifactRequestInvalid(f"length must be an integer >= 1, got {length!r}")
    if offset > size:
        raise ArtifactRequestInvalid(f"offset {offset} is past the end of the artifact ({size} bytes)")
    return offset, min(length, MAX_READ_BYTES, size - offset)


def quota_error(quota: int, used: int, size: int) -> ArtifactQuotaExceeded:
    return ArtifactQuotaExceeded(
        f"storing {size} bytes would exceed the artifact quota ({used} of {quota} bytes used); nothing was stored",
        details={"quota_bytes": quota, "used_bytes": used, "size": size},
    )


def charge_quota(quota: int, used: int, size: int) -> int:
    """The ledger after storing ``size`` new bytes on ``used``; :class:`ArtifactQuotaExceeded` if past ``quota``.

    Every backend calls it under its own lock (the file store's ``flock``, the
    database's row lock on the ledger), before anything of the new blob is kept.
    """
    if used + size > quota:
        raise quota_error(quota, used, size)
    return used + size


__all__ = ["charge_quota", "check_media_type", "check_scope", "check_range", "quota_error", "MAX_READ_BYTES",
           "MAX_SCOPE_CHARS"]
