"""Kill points inside ``FileRecordLog.compact_background``, for a crash test's child process.

``kill_compaction_at(step)`` patches the child so it SIGKILLs itself at ``step``: ``snapshot`` (the snapshot is
durable in ``<path>.compact``, nothing renamed), ``before_rename``, ``after_rename`` and ``before_reopen`` (the new
file is in place, the log not reopened yet). Any other step (``after_switch``) patches nothing: the child kills
itself after the compaction returns. The core stream's and the local store's crash tests share these points so
both prove the same steps.
"""

from __future__ import annotations

import os
import signal
from typing import Any


def die(*_: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_compaction_at(step: str) -> None:
    from openfunctions.core.journal import JournalLog
    from openfunctions.core.records import _file

    real_append_many, real_rename, real_switch = JournalLog.append_many, os.rename, _file._switch

    async def append_many(self: Any, records: Any) -> Any:
        out = await real_append_many(self, records)
        if step == "snapshot" and self.path.name.endswith(".compact"):
            die()
        return out

    def rename(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        if str(src).endswith(".compact") and step == "before_rename":
            die()
        real_rename(src, dst, *a, **k)
        if str(src).endswith(".compact") and step == "after_rename":
            die()

    def switch(tmp: Any, p: Any, segments: Any) -> None:
        real_switch(tmp, p, segments)
        if step == "before_reopen":
            die()

    JournalLog.append_many = append_many  # type: ignore[method-assign]
    _file.os.rename = rename  # type: ignore[assignment]
    _file._switch = switch
