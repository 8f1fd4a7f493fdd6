"""Test-only crash window for the MCP end-to-end crash test (on PYTHONPATH of that server only).

With ``OPENFUNCTIONS_TEST_PAUSE_AFTER_WRITE=<marker file>``, the work
profile's ``write_file`` step does its real atomic write, appends ``ran`` to
the marker file, then hangs: the test SIGKILLs the server in the window
between the effect and the controller's outcome record.
"""

import os

_mark = os.environ.get("OPENFUNCTIONS_TEST_PAUSE_AFTER_WRITE")
if _mark:
    import time

    from openfunctions.work import steps as _steps

    _real = _steps.write_atomically

    def write_atomically(real, data):  # runs in a worker thread
        _real(real, data)
        with open(_mark, "a") as f:
            f.write("ran\n")
        time.sleep(3600)

    _steps.write_atomically = write_atomically
