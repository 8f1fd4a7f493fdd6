"""A read of a key whose write has just finished (its done-callback not yet run) returns, not spins.

The old ``LocalStore.get`` looped ``while key in _pending: await task``; awaiting a finished task
does not yield to the event loop, so the callback that clears ``_pending`` never ran and the loop
spun forever (found by hybrid search reading chunks while an ingest's write settled). The check
runs in a subprocess with a timeout, since a spinning loop cannot be interrupted from inside.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import asyncio, sys, tempfile
    from openfunctions.store import open_local_store

    async def main():
        store = await open_local_store("s", tempfile.mkdtemp())
        await store.put("k", {"v": 1})
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        store._pending["k"] = done  # what get() sees between a write's end and its done-callback
        store._hot = {}  # as while a write is in flight: no hot-path hit
        entry = await store.get("k")
        print("value", entry.value["v"])
        store._pending.clear()
        await store.aclose()

    asyncio.run(main())
""")


def test_get_of_a_just_finished_write_returns():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "value 1"
