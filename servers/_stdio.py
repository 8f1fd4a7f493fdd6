"""The stdio transport: newline-delimited JSON-RPC on the process's stdin/stdout.

stdout carries JSON-RPC and nothing else. While the transport runs, fd 1
points at stderr and fd 0 at the null device; the wire uses private
duplicates of the original descriptors. So a tool that ``print()``s, a C
extension that writes to fd 1, or a child process that inherits stdout all
land on stderr, and nothing a tool reads from stdin steals protocol bytes.
Both descriptors are restored on exit.

Unlike the SDK's ``stdio_server`` (which drops a line it cannot parse),
every bad line gets a JSON-RPC error response, and the server goes on
reading the next line:

- not JSON -> ``-32700 Parse error`` (id null);
- JSON but not a JSON-RPC 2.0 message (or a batch) -> ``-32600 Invalid
  Request``, with the request's id when it had one;
- a line longer than ``max_message_bytes`` (default 4 MiB) -> ``-32600``
  naming the limit; the line is discarded without being buffered whole.

The direct ``tools/call`` path (``fast``, a :class:`~openfunctions.servers._fast.FastCalls`):
once the connection's era is known (decided, as the SDK decides it, by the
first request: one carrying the per-request ``_meta`` envelope that is not
``initialize`` opens a 2026-07-28 connection, anything else a handshake-era
one; that first request always goes to the SDK, so its loop locks to the
same era), a ``tools/call`` line the fast path admits for that era (on a
handshake-era connection: once its ``initialize`` went through the server)
is dispatched here and its reply written here; every other line goes to the
SDK session as before. ``notifications/cancelled`` naming a fast-path call
cancels it (no reply is written for it, as on the SDK path); shutdown waits
for its answer like any other request's.

Reading (:class:`_StdinSource`): a pipe or socket is watched by the event
loop, and a line the fast path takes is dispatched in the read callback
itself; a terminal or a regular file is read by a daemon thread. Lines are
handled in arrival order either way, and reading pauses while
``_BACKLOG_PAUSE`` bytes of lines wait for the SDK. A read error counts as
EOF.

EOF on stdin is the MCP stdio shutdown signal. Calls already running are
not dropped: the ``on_eof`` hook lets the host finish and answer them
(bounded by its shutdown timeout) before the read side closes, unless the
peer closed our stdout too, in which case nobody can read an answer and
they are cancelled at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import stat
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import structlog
from mcp.shared.message import SessionMessage
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR

from ._constants import DEFAULT_MAX_MESSAGE_BYTES
from ._constants import valid_jsonrpc_id as _valid_id
from ._fast import Admitted, Exchange, FastCalls, encode
from ._outstanding import Outstanding

log = structlog.get_logger("openfunctions.servers._stdio")

_READ_CHUNK = 1 << 16
#: Read no more from stdin while this many bytes of lines wait for the consumer (the SDK is slow to take them).
_BACKLOG_PAUSE = 4 * _READ_CHUNK

#: Deepest array/object nesting the SDK's message adapter accepts (its JSON
#: parser's recursion limit); deeper lines get -32600 naming the limit.
MAX_NESTING = 200


def _dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _error_line(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return (json.dumps({"jsonrpc": "2.0", "id": request_id, "error": err}) + "\n").encode("utf-8")


def _loads(line: bytes) -> Any:
    """``json.loads`` that reports a too-deep document as :class:`_TooDeep` instead of a RecursionError."""
    try:
        return json.loads(line)
    except RecursionError:
        raise _TooDeep from None


class _TooDeep(Exception):
    pass


def _too_deep_line(request_id: Any) -> bytes:
    return _error_line(
        request_id,
        INVALID_REQUEST,
        f"Invalid Request: the message is nested too deeply (more than {MAX_NESTING} levels of arrays/objects)",
        {"max_nesting": MAX_NESTING},
    )


def classify_bad_line(line: bytes, error: Exception | None = None) -> bytes:
    """The JSON-RPC error response for a line the message adapter rejected.

    ``error`` is the adapter's exception, if any: its "recursion limit"
    verdict names a too-deep message (the adapter stops at about
    :data:`MAX_NESTING` levels; Python's own parser fails near 1,000 with a
    RecursionError, which must never escape this function).
    """
    too_deep = error is not None and "recursion limit" in str(error)
    try:
        value = _loads(line)
    except _TooDeep:
        return _too_deep_line(None)
    except (ValueError, UnicodeDecodeError) as exc:
        return _error_line(None, PARSE_ERROR, f"Parse error: the line is not valid JSON ({exc})")
    if isinstance(value, list):
        # A deep array may parse here and still be over the adapter's limit: how deep json.loads gets
        # depends on the caller's stack, which is shallower on uvloop (--loop) than on asyncio's loop.
        return _too_deep_line(None) if too_deep else _error_line(
            None, INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported by MCP")
    rid = value.get("id") if isinstance(value, dict) else None
    if not _valid_id(rid):
        rid = None
    if too_deep:
        return _too_deep_line(rid)
    if not isinstance(value, dict):
        why = f"a JSON-RPC message must be an object, got {type(value).__name__}"
    elif value.get("jsonrpc") != "2.0":
        why = 'the "jsonrpc" member must be exactly "2.0"'
    elif "method" in value and not isinstance(value["method"], str):
        why = 'the "method" member must be a string'
    elif "id" in value and "method" in value and not _valid_id(value["id"]):
        why = _invalid_id_reason(value["id"])
    elif "params" in value and not isinstance(value["params"], dict):
        why = 'the "params" member must be an object'
    else:
        why = "not a valid JSON-RPC 2.0 request, notification or response"
    return _error_line(rid, INVALID_REQUEST, f"Invalid Request: {why}")


def _invalid_id_reason(value: Any) -> str:
    shown = json.dumps(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f'the "id" member must be a string or an integer, got {shown}'


def invalid_id_error(line: bytes) -> bytes | None:
    """The -32600 answer for a line the adapter took for a notification but that carries an ``id``.

    The SDK's message adapter reads ``{"id": null, "method": ...}`` (or an id
    that is ``true``, ``1.5``, ``{}``, ``[1]``) as a notification, which is
    never answered; JSON-RPC 2.0 says such a request is invalid and gets an
    error with id null. ``None`` when the line really is a notification.
    """
    try:
        value = _loads(line)
    except (_TooDeep, ValueError, UnicodeDecodeError):
        return None  # the adapter accepted it; it is not ours to re-judge
    if isinstance(value, dict) and "id" in value:
        return _error_line(None, INVALID_REQUEST, f"Invalid Request: {_invalid_id_reason(value['id'])}")
    return None


def _inline_write_check(fd: int) -> Callable[[int], bool] | None:
    """When a write of n bytes to ``fd`` cannot block, so the event loop may make it itself (no thread hop).

    A regular file: always. A pipe (what MCP hosts give a stdio server): when
    the write is at most ``PIPE_BUF`` bytes (atomic) and ``poll`` says the pipe
    is not full (a free buffer slot, which holds such a write whole). Anything
    else (a tty, a socket): never, the write goes to a worker thread.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return lambda n: True
    if not stat.S_ISFIFO(mode):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    limit = select.PIPE_BUF

    def writable(n: int) -> bool:
        return n <= limit and any(ev & select.POLLOUT for _, ev in poller.poll(0))

    return writable


OnEof = Callable[[anyio.Event], Awaitable[None]]


def _wait_hangup(fd: int, stop: threading.Event) -> bool:
    """Block until the peer closed its end of our stdout pipe (True) or ``stop`` is set (False)."""
    poller = select.poll()
    poller.register(fd, select.POLLERR | select.POLLHUP)
    while not stop.is_set():
        for _, ev in poller.poll(100):
            if ev & (select.POLLERR | select.POLLHUP):
                return True
    return False


@asynccontextmanager
async def stdio_transport(
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_eof: OnEof | None = None,
    stop: anyio.Event | None = None,
    answer_timeout: float = 10.0,
    fast: FastCalls | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Serve the process's stdin/stdout; yields ``(read_stream, write_stream)`` for ``Server.run``.

    The read side ends at EOF on stdin, or when ``stop`` is set (a shutdown
    signal; reading goes on meanwhile so late requests get an answer):
    ``on_eof(stdout_gone)`` is awaited (the host lets running calls finish
    there; ``stdout_gone`` is set if the peer closed our stdout too, so nobody
    is left to answer), then every request already read gets its answer
    written (bounded by ``answer_timeout``), and only then the read stream
    closes (which makes the SDK cancel whatever still runs).

    ``fast``: answer admitted ``tools/call`` lines directly (see the module docstring).
    """
    with suppress(Exception):
        sys.stdout.flush()
    wire_in = _dup_high(0)
    wire_out = _dup_high(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)

    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    write_lock = anyio.Lock()
    wire_broken: list[OSError] = []
    # Requests read but not yet answered (a cancelled request is never answered).
    pending: Outstanding[Any] = Outstanding()

    inline_ok = _inline_write_check(wire_out)
    if fast is not None:
        fast.forget_session(None)  # this process's stdio connection is a new one: its initialize is still to come
    # The connection's protocol era, decided by the first request as the SDK decides it.
    era: list[str] = []
    fast_running: dict[Any, anyio.CancelScope] = {}
    # Fast-path calls run as plain asyncio tasks (a task group's start_soon costs ~15 us more per call); the
    # transport cancels and awaits them on its way out, as a task group would.
    fast_tasks: set[asyncio.Task[None]] = set()
    serving: list[asyncio.AbstractEventLoop] = []  # the loop, once the transport runs

    def broken(exc: OSError) -> None:  # the host closed our stdout: nobody is left to answer
        wire_broken.append(exc)
        log.info("stdout_closed", error=str(exc))

    async def emit(data: bytes) -> None:
        # A write that cannot block (see _inline_write_check) is made right here, one syscall on the loop,
        # when no other write is under way or waiting (the lock is free): nothing awaits in between, so
        # lines stay whole and in order without taking the lock (taking it yields to the loop once).
        if not write_lock.locked() and inline_ok is not None and inline_ok(len(data)):
            if not wire_broken:
                try:
                    _write_all(wire_out, data)
                except OSError as exc:
                    broken(exc)
            return
        async with write_lock:
            if wire_broken:
                return
            try:
                if inline_ok is not None and inline_ok(len(data)):
                    _write_all(wire_out, data)
                else:
                    await anyio.to_thread.run_sync(_write_all, wire_out, data)
            except OSError as exc:
                broken(exc)

    async def fast_call(call: Admitted, scope: anyio.CancelScope) -> None:
        try:
            reply: dict[str, Any] | None = None
            with scope:
                if call.session is not None:  # handshake era: the session's connection carries the back-channel
                    exchange = _LineExchange(call.request_id, emit, call.session.outbound)
                    outbound = None
                else:
                    exchange, outbound = _LineExchange(call.request_id, emit), _LineOutbound(emit)
                reply = await fast.run(call, exchange, lifespan_state={}, outbound=outbound)  # type: ignore[union-attr]
            if reply is not None and not scope.cancelled_caught:
                await emit(_line(reply))
        except Exception as exc:  # never out of the task (nobody awaits it for an error): answered, as a bad line is
            log.error("stdio_fast_call_failed", error_type=type(exc).__name__, exc_info=exc)
            await emit(_error_line(call.request_id, INTERNAL_ERROR, "Internal error: the server could not answer this request"))
        finally:
            fast_running.pop(call.request_id, None)
            pending.discard(call.request_id)

    def try_fast(line: bytes) -> bool:
        """Dispatch ``line`` on the fast path if it is an admitted tools/call (either era, once the era is known)."""
        if fast is None or not era or not serving:
            return False
        session = None
        if era[0] == "legacy":
            session = fast.handshake_session(None)
            if session is None:  # no initialize through the server yet: the SDK answers
                return False
        if line.count(b"[") + line.count(b"{") > MAX_NESTING:
            return False  # possibly nested deeper than the SDK's adapter takes: its refusal is the SDK path's to send
        try:
            value = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return False
        call = fast.admit(value, None, session=session)
        if call is None or call.request_id in fast_running or call.request_id in pending:
            return False
        scope = anyio.CancelScope()
        fast_running[call.request_id] = scope
        pending.add(call.request_id)
        task = serving[0].create_task(fast_call(call, scope))
        fast_tasks.add(task)
        task.add_done_callback(fast_tasks.discard)
        return True

    async def handle_line(line: bytes) -> None:
        if not line.strip():
            return
        if try_fast(line):
            return
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as exc:
            await emit(classify_bad_line(line, exc))
            return
        if isinstance(message, types.JSONRPCRequest):
            if not era:
                era.append("modern" if message.method != "initialize" and _has_envelope(message.params) else "legacy")
            pending.add(message.id)
        elif isinstance(message, types.JSONRPCNotification):
            # Rare next to requests, so the second parse costs little.
            refusal = invalid_id_error(line)
            if refusal is not None:
                await emit(refusal)
                return
            if message.method == "notifications/cancelled":
                params = message.params if isinstance(message.params, dict) else {}
                rid = params.get("requestId")
                if _valid_id(rid):  # an object/array id would not even be hashable
                    pending.discard(rid)
                    running = fast_running.get(rid)
                    if running is not None:  # a fast-path call: cancel it here (the SDK does not know it)
                        running.cancel()
        await read_send.send(SessionMessage(message))

    async def handle_line_safely(line: bytes) -> None:
        # One line must never end the transport: whatever escapes is logged
        # and answered as an internal error (no exception text on the wire).
        try:
            await handle_line(line)
        except (anyio.get_cancelled_exc_class(), anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise
        except Exception as exc:
            log.error("stdio_line_failed", error_type=type(exc).__name__, exc_info=exc)
            await emit(_error_line(None, INTERNAL_ERROR, "Internal error: the server could not process this message"))

    # Lines read but not yet handled, in order, for the consumer task (``read_lines``); None stands for a line
    # over the limit (its refusal). A line is handled in the read callback itself (a fast-path call
    # dispatched there: no task hop before its handler) only when nothing is queued before it and the
    # consumer is idle, so lines are always handled in the order they came.
    splitter = _LineSplitter(max_message_bytes)
    backlog: deque[bytes | None] = deque()
    backlog_bytes = 0
    consumer_busy = False
    at_eof = False
    wake: asyncio.Future[None] | None = None

    def on_chunk(chunk: bytes) -> None:
        """On the loop: a chunk read from stdin (``b""``: EOF)."""
        nonlocal backlog_bytes, at_eof
        for item in splitter.feed(chunk) if chunk else splitter.finish():
            if not backlog and not consumer_busy and item is not None and _dispatched(item):
                continue
            backlog.append(item)
            backlog_bytes += 0 if item is None else len(item)
        if not chunk:
            at_eof = True
        elif backlog_bytes > _BACKLOG_PAUSE:
            source.pause()  # the consumer is behind (the SDK is slow to take lines): stop reading for now
        if (backlog or at_eof) and wake is not None and not wake.done():
            wake.set_result(None)

    def _dispatched(line: bytes) -> bool:
        """Whether ``line`` needed nothing more (blank, or a fast-path call now running)."""
        try:
            return not line.strip() or try_fast(line)
        except Exception as exc:  # never out of a loop callback: the consumer's handle_line_safely answers it
            log.error("stdio_line_failed", error_type=type(exc).__name__, exc_info=exc)
            return False

    async def read_lines() -> None:
        nonlocal backlog_bytes, consumer_busy, wake
        loop = asyncio.get_running_loop()
        while backlog or not at_eof:
            if not backlog:
                wake = loop.create_future()
                await wake
                continue
            item = backlog.popleft()
            backlog_bytes -= 0 if item is None else len(item)
            if backlog_bytes <= _BACKLOG_PAUSE:
                source.resume()
            consumer_busy = True
            try:
                if item is None:
                    await emit(_oversized(max_message_bytes))
                else:
                    await handle_line_safely(item)
            finally:
                consumer_busy = False

    source = _StdinSource(wire_in, on_chunk)

    async def reader() -> None:
        finishing = False
        eof_first = False
        async with read_send, source:
            async with anyio.create_task_group() as tg:
                if stop is not None:

                    async def on_stop() -> None:
                        # Keep reading while draining: a request that arrives
                        # now gets a clear "shutting down" answer, not silence.
                        nonlocal finishing
                        await stop.wait()
                        finishing = True
                        await _finish()
                        tg.cancel_scope.cancel()

                    tg.start_soon(on_stop)
                await read_lines()
                if not finishing:
                    finishing = eof_first = True
                    tg.cancel_scope.cancel()
            if eof_first:
                await _finish()

    async def _finish() -> None:
        gone = anyio.Event()
        halt = threading.Event()

        async def watch() -> None:
            if await anyio.to_thread.run_sync(_wait_hangup, wire_out, halt, abandon_on_cancel=True):
                gone.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            try:
                if on_eof is not None:
                    await on_eof(gone)
                with anyio.move_on_after(answer_timeout):
                    while pending and not gone.is_set() and not wire_broken:
                        await _wait_any(pending.empty, gone)
            finally:
                halt.set()
                tg.cancel_scope.cancel()

    async def writer() -> None:
        async with write_recv:
            async for session_message in write_recv:
                msg = session_message.message
                data = msg.model_dump_json(by_alias=True, exclude_unset=True)
                await emit(data.encode("utf-8") + b"\n")
                if isinstance(msg, (types.JSONRPCResponse, types.JSONRPCError)):
                    pending.discard(msg.id)

    try:
        async with anyio.create_task_group() as tg:
            serving.append(asyncio.get_running_loop())
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_recv, write_send
            finally:
                serving.clear()  # no new fast-path call from here on
                for running in list(fast_running.values()):
                    running.cancel()
                if fast_tasks:
                    with anyio.CancelScope(shield=True):
                        await asyncio.wait(list(fast_tasks))
            tg.cancel_scope.cancel()
    finally:
        # Point fd 0/1 back at the wire. The private duplicates stay open: the
        # reader thread may still be blocked on wire_in.
        with suppress(OSError):
            os.dup2(wire_out, 1)
        with suppress(OSError):
            os.dup2(wire_in, 0)


class _LineSplitter:
    """Splits the bytes read from stdin into lines; a line over ``limit`` becomes ``None`` (its refusal), and
    is discarded as it streams in, never buffered whole."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._discarding = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        out: list[bytes | None] = []
        buf, start = self._buf, 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not self._discarding:
                    buf += chunk[start:]
                    if len(buf) > self._limit:
                        self._discarding = True
                        buf.clear()
                        out.append(None)
                return out
            if self._discarding:
                self._discarding = False
            elif not buf:  # the common case, a whole line inside the chunk: one copy
                out.append(None if nl - start > self._limit else chunk[start:nl])
            else:
                buf += chunk[start:nl]
                out.append(None if len(buf) > self._limit else bytes(buf))
                buf.clear()
            start = nl + 1

    def finish(self) -> list[bytes | None]:
        """At EOF: an unterminated last line still counts."""
        if self._buf and not self._discarding:
            line = bytes(self._buf)
            self._buf.clear()
            return [line]
        return []


class _StdinSource:
    """Reads the wire's stdin and hands every chunk (``b""`` at EOF) to ``on_chunk``, on the event loop.

    A pipe or a socket (what MCP hosts give a stdio server): the loop watches
    the descriptor (``add_reader``) and reads what is there when it is
    readable: no thread, no hand-over per request. The descriptor stays in
    blocking mode (its flags are shared with whoever else holds it): a pipe
    or socket that polled readable has data or EOF for its one reader.
    Anything else (a terminal, a regular file) or a loop without
    ``add_reader``: a daemon thread reads and hands chunks over
    (``call_soon_threadsafe``); a daemon, so that a read blocked on a silent
    host does not keep the process alive after shutdown. ``pause``/``resume``
    hold reading while the consumer is behind.
    """

    def __init__(self, fd: int, on_chunk: Callable[[bytes], None]) -> None:
        self._fd = fd
        self._on_chunk = on_chunk
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False  # add_reader mode
        self._done = False
        self._paused = False
        self._go = threading.Event()  # thread mode: set while reading may go on
        self._go.set()

    async def __aenter__(self) -> _StdinSource:
        self._loop = loop = asyncio.get_running_loop()
        try:
            mode = os.fstat(self._fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                loop.add_reader(self._fd, self._readable)
                self._watching = True
                return self
        except (OSError, NotImplementedError, ValueError):
            pass
        threading.Thread(target=self._read_blocking, name="openfunctions-stdin", daemon=True).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done = True
        self._go.set()
        self._unwatch()

    def _unwatch(self) -> None:
        if self._watching and self._loop is not None:
            self._watching = False
            with suppress(Exception):
                self._loop.remove_reader(self._fd)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, _READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return  # nothing after all: wait for the next readiness
        except OSError:
            chunk = b""  # stdin broke: as EOF
        if not chunk:
            self._done = True
            self._unwatch()
        self._on_chunk(chunk)

    def _read_blocking(self) -> None:
        loop = self._loop
        assert loop is not None
        try:
            while not self._done:
                try:
                    chunk = os.read(self._fd, _READ_CHUNK)
                except OSError:
                    chunk = b""
                loop.call_soon_threadsafe(self._from_thread, chunk)
                if not chunk:
                    return
                self._go.wait()
        except RuntimeError:  # the loop is closed (shutdown): stop reading
            return

    def _from_thread(self, chunk: bytes) -> None:
        if not chunk:
            self._done = True
        self._on_chunk(chunk)

    def pause(self) -> None:
        if self._paused or self._done:
            return
        self._paused = True
        if self._watching and self._loop is not None:
            self._loop.remove_reader(self._fd)
        else:
            self._go.clear()

    def resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self._watching and self._loop is not None and not self._done:
            self._loop.add_reader(self._fd, self._readable)
        else:
            self._go.set()


def _has_envelope(params: Any) -> bool:
    """Whether request params carry the 2026-07-28 ``_meta`` envelope (the SDK's era test)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and types.PROTOCOL_VERSION_META_KEY in meta


def _line(message: Any) -> bytes:
    """One JSON-RPC message as the line a fast-path reply or notification is written as (a receipt's text spliced in)."""
    return encode(message, ensure_ascii=False) + b"\n"


class _LineExchange(Exchange):
    """A fast-path call's request channel on stdio: request-scoped notifications are lines; on a handshake-era
    connection, server-to-client requests go out through the session's SDK dispatcher (``back_channel``)."""

    def __init__(self, request_id: Any, emit: Callable[[bytes], Awaitable[None]], back_channel: Any = None) -> None:
        from mcp.shared.transport_context import TransportContext

        super().__init__(TransportContext(kind="jsonrpc", can_send_request=back_channel is not None), request_id,
                         back_channel)
        self._emit = emit

    async def deliver(self, message: dict[str, Any]) -> None:
        await self._emit(_line(message))


def _LineOutbound(emit: Callable[[bytes], Awaitable[None]]) -> Any:  # noqa: N802  (a factory standing in for a class)
    """The connection-scoped channel of a fast-path call: the SDK's notify-only outbound over our stdout."""
    from mcp.server.connection import NotifyOnlyOutbound

    return NotifyOnlyOutbound(_LineExchange(None, emit))


async def _wait_any(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        for ev in events:

            async def wait(ev: anyio.Event = ev) -> None:
                await ev.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(wait)


def _oversized(limit: int) -> bytes:
    return _error_line(
        None,
        INVALID_REQUEST,
        f"Invalid Request: message exceeds the {limit}-byte limit of this server (--max-message-bytes); it was discarded",
        {"limit_bytes": limit},
    )


__all__ = ["stdio_transport", "DEFAULT_MAX_MESSAGE_BYTES", "MAX_NESTING", "classify_bad_line", "invalid_id_error"]
