"""A chat server in its own process for the HTTP-guard tests: ``python guard_chat_server.py DATA_DIR JSON_OPTIONS``.

``JSON_OPTIONS``: ``serve()``'s limits (``header_timeout``, ``body_timeout``, ``max_connections``) plus
``nofile`` (``RLIMIT_NOFILE`` to set first, so a test can run out of file descriptors with small numbers) and
``hog_fds`` (a path: once listening, open ``/dev/null`` until no descriptor is left and hold them until the
path exists, then close them; the port line says ``hogging`` first). Prints ``port N`` when listening.
Logs (JSON lines) go to stderr.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import anyio


async def main(data_dir: str, options: dict) -> None:
    from openfunctions.adapters import ScriptedAdapter
    from openfunctions.chat import open_chat_agent
    from openfunctions.chat._http import serve

    hog = options.pop("hog_fds", None)
    async with await open_chat_agent(adapter=ScriptedAdapter(["ok"] * 10_000), data_dir=data_dir, memory=False) as agent:

        def ready(port: int) -> None:
            held: list[int] = []
            if hog is not None:
                while True:
                    try:
                        held.append(os.open(os.devnull, os.O_RDONLY))
                    except OSError:
                        break
                print(f"hogging {len(held)}", flush=True)
            print(f"port {port}", flush=True)
            if held:
                async def release() -> None:
                    while not Path(hog).exists():
                        await anyio.sleep(0.05)
                    for fd in held:
                        os.close(fd)
                    print("released", flush=True)

                tg.start_soon(release)

        async with anyio.create_task_group() as tg:
            await serve(agent, port=0, ready=ready, **options)


if __name__ == "__main__":
    opts = json.loads(sys.argv[2])
    nofile = opts.pop("nofile", None)
    if nofile is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    anyio.run(main, sys.argv[1], opts)
