"""A journal's fail-stop reaches its appenders even when the ``journal_failed`` log line cannot be written.

The appenders' ``JournalFailed`` is the report; the log line is a courtesy. A logger whose stream was
closed under it (structlog's ``PrintLogger`` raises ``ValueError`` on a closed file: a CLI that configured
logging onto a stream someone later closed) used to raise out of the failure path before the appenders
were woken, so they waited forever: on the loop the flush callback died, on the thread the writer did.
"""

from __future__ import annotations

import asyncio
import errno

import anyio
import pytest
import structlog

from openfunctions.core.errors import JournalFailed
from openfunctions.core.journal import JournalLog
from openfunctions.core.journal._fsutil import FileOps

pytestmark = pytest.mark.anyio


class FailingSync(FileOps):
    armed = False

    def sync(self, fd: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, "Input/output error")
        super().sync(fd)


@pytest.fixture
def logging_onto_a_closed_stream(tmp_path):
    """structlog configured to print onto a file that is then closed (restored afterwards)."""
    saved = structlog.get_config()
    stream = (tmp_path / "log.txt").open("w")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=stream), cache_logger_on_first_use=False)
    stream.close()
    with pytest.raises(ValueError):  # the premise: this logger raises when it writes
        structlog.get_logger("probe").error("probe")
    yield
    structlog.configure(**saved)


@pytest.mark.parametrize("on_loop", [True, False], ids=["loop-flush", "writer-thread"])
async def test_a_failed_sync_fails_its_appenders_even_when_the_failure_cannot_be_logged(
    tmp_path, logging_onto_a_closed_stream, on_loop
):
    ops = FailingSync()
    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=ops)
    log.sync_on_loop = on_loop
    await log.append("t", {"i": 0})
    ops.armed = True
    with anyio.fail_after(10):  # before the fix: no answer ever came
        results = await asyncio.gather(*(log.append("t", {"i": i}) for i in range(1, 4)), return_exceptions=True)
    assert len(results) == 3 and all(isinstance(r, JournalFailed) for r in results), results
    assert log.failed
    with pytest.raises(JournalFailed):  # fail-stop holds
        await log.append("t", {"i": 9})
    await log.close()

