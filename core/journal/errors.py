"""Journal errors. The common ones live in ``openfunctions.core.errors`` (the
executor and other packages catch them); this module adds only what is
journal-specific and re-exports the rest for one-stop imports."""

from __future__ import annotations

from ..errors import JournalCorrupt, JournalError, JournalFailed, JournalLocked, JournalUnsafe


class JournalMismatch(JournalError):
    """The file is a valid journal, but of another kind or owner than requested."""

    code = "journal_mismatch"


class JournalClosed(JournalError):
    code = "journal_closed"


__all__ = [
    "JournalClosed",
    "JournalCorrupt",
    "JournalError",
    "JournalFailed",
    "JournalLocked",
    "JournalMismatch",
    "JournalUnsafe",
]
