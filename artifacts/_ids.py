"""Artifact ids: opaque, random, and checked before they go anywhere near a path.

An id is ``art_`` followed by 32 lowercase hex characters (128 bits from
the OS CSPRNG, the same shape as :func:`openfunctions.core.new_id`). Ids are never derived from caller
input. A caller's string becomes part of a file name only after it matched
:data:`ID_RE` exactly, so path separators, ``..``, NUL, URL-encoding,
whitespace, Unicode look-alikes and absurd lengths all fail *before* any
filesystem call, with the same :class:`ArtifactNotFound` an unknown id gets.
"""

from __future__ import annotations

import os
import re
from typing import Any, TypeGuard

from .errors import ArtifactNotFound

PREFIX = "art"
ARTIFACT_ID_PATTERN = r"art_[0-9a-f]{32}"
ID_RE = re.compile(ARTIFACT_ID_PATTERN)
ID_LENGTH = 36
# For scanning text: an id not glued to more id-like characters on either side.
_FIND_RE = re.compile(r"(?<![0-9A-Za-z_])" + ARTIFACT_ID_PATTERN + r"(?![0-9A-Za-z_])")


def new_artifact_id() -> str:
    return PREFIX + "_" + os.urandom(16).hex()


def is_artifact_id(value: object) -> TypeGuard[str]:
    # Length first: fullmatch on a megabyte string is cheap, but an exact
    # length test is cheaper and documents the bound.
    return isinstance(value, str) and len(value) == ID_LENGTH and ID_RE.fullmatch(value) is not None


def find_artifact_ids(text: str) -> list[str]:
    """Every well-formed artifact id mentioned in ``text`` (in order, without duplicates)."""
    return list(dict.fromkeys(_FIND_RE.findall(text)))


def check_artifact_id(value: Any) -> str:
    """Return ``value`` if it is a well-formed id; else raise ArtifactNotFound (echoing a bounded repr)."""
    if is_artifact_id(value):
        return value
    raise not_found(value)


def not_found(value: Any) -> ArtifactNotFound:
    shown = value if isinstance(value, str) else repr(value)
    shown = shown if len(shown) <= 64 else shown[:61] + "..."
    # repr() escapes NUL and control characters so the message stays one clean line.
    return ArtifactNotFound(f"no artifact with id {shown!r}", details={"artifact_id": shown})


__all__ = ["ARTIFACT_ID_PATTERN", "find_artifact_ids", "ID_RE", "ID_LENGTH", "PREFIX", "new_artifact_id", "is_artifact_id", "check_artifact_id", "not_found"]
