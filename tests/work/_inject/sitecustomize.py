"""Test-only hooks for the MCP end-to-end crash test (on PYTHONPATH of its servers only).

- ``OPENFUNCTIONS_TEST_PAUSE_AFTER_WRITE=<marker>``: the work profile's
  ``write_file`` step does its real atomic write, publishes ``ran`` in the
  marker file (written aside, then renamed, so the test never sees it
  half-written), then hangs: the test SIGKILLs the server in the window
  between the effect and the controller's outcome record.
- ``OPENFUNCTIONS_TEST_COUNT_WRITES=<file>``: every ``write_file`` step of
  this server appends one line to the file and proceeds normally; the
  restarted server runs with it, so a blind re-run would show up there.
- ``OPENFUNCTIONS_TEST_PAUSE_BEFORE_OUTCOME=<marker>``: the controller hangs
  right before it appends an operation's ``outcome`` record (the step ran and
  the executor settled its call: the receipt is durable), after writing
  ``outcome`` to the marker file: the test SIGKILLs the server in the window
  between the settled receipt and the outcome record.
"""

import os

_mark = os.environ.get("OPENFUNCTIONS_TEST_PAUSE_AFTER_WRITE")
_count = os.environ.get("OPENFUNCTIONS_TEST_COUNT_WRITES")
if _mark or _count:
    import time

    from openfunctions.work import _steps

    _real = _steps.write_atomically

    def write_atomically(real, data):  # runs in a worker thread
        _real(real, data)
        if _count:
            with open(_count, "a") as f:
                f.write("ran\n")
        if _mark:
            prior = open(_mark).read() if os.path.exists(_mark) else ""
            with open(_mark + ".tmp", "w") as f:
                f.write(prior + "ran\n")
            os.replace(_mark + ".tmp", _mark)
            time.sleep(3600)

    _steps.write_atomically = write_atomically

_before_outcome = os.environ.get("OPENFUNCTIONS_TEST_PAUSE_BEFORE_OUTCOME")
if _before_outcome:
    import asyncio

    from openfunctions.work import _custody

    _real_append = _custody.Custody.append

    async def append(self, rec):
        if rec[0] == "outcome":
            with open(_before_outcome + ".tmp", "w") as f:
                f.write("outcome\n")
            os.replace(_before_outcome + ".tmp", _before_outcome)
            await asyncio.sleep(3600)
        return await _real_append(self, rec)

    _custody.Custody.append = append
