"""The store's error hierarchy; every error has a stable ``code``.

``certainty`` says whether a failed write may have happened: ``"known"``
(nothing was written: bad input, a lost compare-and-set) or ``"unknown"``
(the database went away or the disk failed mid-write; read the key again
before retrying). Tool handlers pass it on as ``ToolError(effect_happened=...)``.
"""

from __future__ import annotations

from typing import Literal

from openfunctions.core.errors import PersistenceError
from openfunctions.core.postgres import SchemaTooNew  # every component's refusal of a newer schema, one class

Certainty = Literal["known", "unknown"]


class StoreError(PersistenceError):
    code = "store_error"


class InvalidKey(StoreError):
    """A key that is not a non-empty string of at most ``MAX_KEY_BYTES`` UTF-8 bytes without NUL."""

    code = "store_invalid_key"


class InvalidValue(StoreError):
    """A value with no JSON form (NaN, bytes, an object, a lone surrogate)."""

    code = "store_invalid_value"


class ValueTooLarge(StoreError):
    """A value over the store's ``max_value_bytes`` (refused before anything is written)."""

    code = "store_value_too_large"


class Conflict(StoreError):
    """A compare-and-set or transaction lost: the key's version was not the expected one."""

    code = "store_conflict"


class StoreLocked(StoreError):
    """Another process holds the local store (one writer process per store directory)."""

    code = "store_locked"


class StoreCorrupt(StoreError):
    """The local store's files are damaged in a way recovery must not guess about."""

    code = "store_corrupt"


class StoreUnsafe(StoreError):
    """The store's directory or files are a symlink, have a group/other mode or a foreign owner."""

    code = "store_unsafe"


class StoreUnavailable(StoreError):
    """The database cannot be reached (or went away mid-call). The next call reconnects."""

    code = "store_unavailable"


class StoreFailed(StoreError):
    """A write or fsync failed; the local store refuses further calls until reopened (fail-stop)."""

    code = "store_failed"
    certainty: Certainty = "unknown"


class StoreClosed(StoreError):
    code = "store_closed"


__all__ = [
    "Certainty", "Conflict", "InvalidKey", "InvalidValue", "SchemaTooNew", "StoreClosed", "StoreCorrupt",
    "StoreError", "StoreFailed", "StoreLocked", "StoreUnavailable", "StoreUnsafe", "ValueTooLarge",
]
