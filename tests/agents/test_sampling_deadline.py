"""A served agent waiting on a sampling request holds no write barrier, and the request has a deadline.

Real server (a subprocess on 127.0.0.1, streamable HTTP), two official SDK clients: client A's sampling
callback plays a host model that never answers; client B makes a write meanwhile.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from openfunctions.agents import read_runs

from .._net import free_port, wait_for_port
from .test_mcp_sampling import RECEIPT, argv, env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
DEADLINE_S = 3


async def test_a_pending_sampling_request_blocks_no_write_and_ends_the_run_timeout(tmp_path: Path) -> None:
    data, notes = tmp_path / "data", tmp_path / "notes.txt"
    port = free_port()
    proc = subprocess.Popen(argv(data, "--transport", "http", "--port", str(port), "--sampling-timeout", str(DEADLINE_S)),
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    asked, callback_cancelled, a_done = anyio.Event(), anyio.Event(), anyio.Event()

    async def silent_host(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        asked.set()
        try:
            await anyio.sleep_forever()  # a host that never answers
        finally:
            callback_cancelled.set()  # the server's courtesy notifications/cancelled reached us

    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for_port(port, proc)
        caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
        async with Client(url, mode="legacy", sampling_callback=silent_host, sampling_capabilities=caps,
                          read_timeout_seconds=60) as a, Client(url, mode="legacy", read_timeout_seconds=60) as b:
            results: dict[str, Any] = {}

            async def run_scribe() -> None:
                results["a"] = await a.call_tool("agent_scribe", {"task": "note something"})
                a_done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_scribe)
                with anyio.fail_after(30):
                    await asked.wait()  # the writer agent is now waiting for the host's model
                # Another client's write (the 'note' tool: effect write, so exclusive) runs now: the agent's
                # run holds no barrier while it waits. Before, it held the write barrier for its whole run.
                with anyio.fail_after(DEADLINE_S * 10):
                    written = await b.call_tool("note", {"file": str(notes), "text": "from B"})
                assert not written.is_error, written.content
                assert not a_done.is_set() and not callback_cancelled.is_set()  # ...while the request was still pending
                assert notes.read_text() == "from B\n"
                with anyio.fail_after(DEADLINE_S * 10):
                    await a_done.wait()
            with anyio.fail_after(30):
                await callback_cancelled.wait()
            # Both clients are still served after the timeout.
            assert (await a.list_tools()).tools and (await b.list_tools()).tools
        result = results["a"]
        assert result.is_error
        text = result.content[0].text
        assert "timed out" in text and f"within {DEADLINE_S} s" in text, text
        receipt = result.meta[RECEIPT]
        assert receipt["tool"] == "agent_scribe" and receipt["outcome"] == "failed" and receipt["error"]["code"] == "sampling_timeout"
    finally:
        proc.terminate()
        proc.wait(20)
    # The run record says so too, and the journal reads back whole after a clean shutdown.
    (run,) = [r for r in read_runs(data).values() if r.agent == "scribe"]
    assert run.status == "timeout" and run.finished["error"]["code"] == "sampling_timeout"
    assert run.started["parent_receipt_id"] == receipt["receipt_id"]
