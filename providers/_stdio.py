"""The gateway's stdio transport: the SDK's ``stdio_client`` with every line from the upstream bounded.

The SDK reads an upstream's stdout into a string until it sees a newline, with
no limit: an upstream that writes one endless line makes the gateway buffer
(and re-split) it for as long as it writes, long after the call waiting on it
timed out. Here stdout is read as bytes, a line is cut at the newline and
parsed straight from bytes (one over 256 KiB in a worker thread), and a line longer than ``max_line_bytes`` is a
protocol violation: ``on_violation(reason)`` is called (the provider marks the
connection lost, which closes it and stops the process), and nothing more is
read from that process. Everything else (spawning, the shutdown sequence,
the environment) is the SDK's own.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client.stdio import (  # the SDK's process handling, unchanged
    StdioServerParameters,
    _aclose_all,
    _create_platform_compatible_process,
    _get_executable_command,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

#: Lines longer than this are parsed in a worker thread.
THREAD_PARSE_BYTES = 256 * 1024


class UpstreamLineTooLong(Exception):
    """What the session sees in place of a line over the limit."""


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters,
    *,
    max_line_bytes: int,
    on_violation: Callable[[str], None],
    errlog: TextIO = sys.stderr,
) -> AsyncGenerator[tuple[anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
                          anyio.abc.ObjectSendStream[SessionMessage]], None]:
    """Start ``server`` and exchange newline-delimited JSON-RPC with it; lines over ``max_line_bytes`` end the connection."""
    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command, args=server.args, env=get_default_environment() | (server.env or {}),
        errlog=errlog, cwd=server.cwd,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        pending = bytearray()
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    start = 0
                    while True:
                        end = chunk.find(b"\n", start)
                        if end < 0:
                            break
                        if len(pending) + end - start > max_line_bytes:
                            break
                        pending += chunk[start:end]
                        line, start = bytes(pending).strip(), end + 1
                        pending.clear()
                        if len(line) > THREAD_PARSE_BYTES:  # a long line is parsed off the event loop
                            await read_writer.send(await anyio.to_thread.run_sync(_parse, line))
                        elif line:
                            await read_writer.send(_parse(line))
                    pending += chunk[start:]
                    if len(pending) > max_line_bytes:
                        reason = (f"the upstream wrote a line over {max_line_bytes:,} bytes (maxLineBytes); "
                                  "the connection was closed")
                        on_violation(reason)
                        await read_writer.send(UpstreamLineTooLong(reason))
                        return  # read no more: the shutdown stops the process
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, OSError):
            pass  # the connection is going away; the session sees the read stream close

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(0.5):
                    await writer_done.wait()
                await _stop_server_process(process)
                await _aclose_all(read_stream, write_stream, read_writer, write_reader)
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()


__all__ = ["UpstreamLineTooLong", "bounded_stdio_client"]
