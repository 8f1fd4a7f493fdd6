"""Small helpers for core tests: gated handlers and checkpoint-based waiting."""

import anyio

from openfunctions.core import define_tool


async def until(predicate, *, max_checkpoints: int = 100_000) -> None:
    """Yield to the event loop until ``predicate()`` holds (no wall-clock sleeps)."""
    for _ in range(max_checkpoints):
        if predicate():
            return
        await anyio.sleep(0)
    raise AssertionError("condition never became true")


class Gate:
    """Tracks which handlers are running; each waits for its own release event."""

    def __init__(self):
        self.running: set[str] = set()
        self.started: list[str] = []
        self.max_running = 0
        self.release: dict[str, anyio.Event] = {}

    def tool(self, name, **capability):
        async def handler(params, ctx):
            key = params["key"]
            ev = self.release.setdefault(key, anyio.Event())
            self.running.add(key)
            self.started.append(key)
            self.max_running = max(self.max_running, len(self.running))
            try:
                await ev.wait()
            finally:
                self.running.discard(key)
            return {"key": key}

        return define_tool(
            name=name, description="gated", handler=handler,
            input_schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
            capability=capability or None,
        )

    def open(self, key):
        self.release.setdefault(key, anyio.Event()).set()
