"""Tools the replica tests serve (``--module replica_tools:registry``): an effectful call, a keyed write."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from openfunctions.core import ToolRegistry, define_tool


async def _bump(params, ctx):
    await asyncio.sleep(0.005)  # a little work in flight, so a SIGKILL finds calls mid-handler
    return {"n": params.get("n", 0)}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs. A SIGKILLed holder its parent has not reaped yet is a zombie: dead (its database
    session, and so its key lock, ended with it), though ``kill(pid, 0)`` still finds it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: count it alive (the stricter reading)


async def _keyed(params, ctx):
    """Hold ``key`` until the test creates ``<dir>/release-<tag>``; mark ``<dir>/overlap`` if another live process
    held it on entry (``<dir>/<key>.holder`` names the holder's pid; a dead holder's file is taken over)."""
    d, key, tag = Path(params["dir"]), params["key"], params["tag"]
    holder = d / f"{key}.holder"
    try:
        fd = os.open(holder, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        other = int(holder.read_text() or 0)
        if _alive(other):
            (d / "overlap").write_text(f"{tag} entered while pid {other} held {key}")
        # else: its holder was killed mid-call
        fd = os.open(holder, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    (d / f"entered-{tag}").write_text(str(os.getpid()))
    for _ in range(12_000):
        if (d / f"release-{tag}").exists():
            break
        await asyncio.sleep(0.01)
    holder.unlink(missing_ok=True)
    return {"tag": tag}


registry = ToolRegistry([
    define_tool(name="bump", description="an effectful call (no declared effect: its start is journaled)",
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}}, handler=_bump),
    define_tool(name="keyed", description="a write keyed by /key: one at a time per key, across replicas",
                input_schema={"type": "object", "properties": {"key": {"type": "string"}, "dir": {"type": "string"},
                                                               "tag": {"type": "string"}}},
                capability={"effect": "write", "conflict_keys": ["/key"]}, handler=_keyed),
])
