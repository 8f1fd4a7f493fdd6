"""A run that is killed mid-tool-turn (``python -m tests.agents._crash_mid_tool_turn DATA_DIR MODEL_URL``).

The model is Anthropic's wire format at MODEL_URL (the parent's fake): its reply asks for ``echo`` then
``block``. ``echo`` answers; ``block`` waits until the echo result's ``run_messages`` record is in the run
journal file, prints ``BLOCKED`` and sleeps: the parent then kills this process with SIGKILL.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from openfunctions.adapters import AnthropicAdapter, RetryPolicy
from openfunctions.agents import RunJournal, define_agent, run_agent, runs_journal_path
from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import read_records


def _result_on_disk(path: Any) -> bool:
    return any(r.type == "run_messages" and any(m.get("role") == "tool" for m in r.data["messages"])
               for r in read_records(path))


async def main(data_dir: str, url: str) -> None:
    journal = await RunJournal.open_in(data_dir)

    async def block(p: dict[str, Any], ctx: Any) -> str:
        while not _result_on_disk(runs_journal_path(data_dir)):
            await anyio.sleep(0.01)
        print("BLOCKED", flush=True)
        await anyio.sleep(3600)
        return "never"

    tools = [define_tool(name="echo", description="Echo a text.", handler=lambda p, c: f"echo: {p.get('text')}"),
             define_tool(name="block", description="Wait.", handler=block)]
    model = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=url, retry=RetryPolicy(max_attempts=1))
    agent = define_agent("a", "be brief", tools=["echo", "block"], adapter=model)
    await run_agent(agent, "echo Paris, then wait", registry=ToolRegistry(tools), runs=journal)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
