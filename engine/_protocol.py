"""The engine's stdin/stdout protocol: JSONL commands in, JSONL events out (docs/formats/engine.md).

Commands (one JSON object a line; ``id`` is optional and echoed in the ``ack``):

- ``{"type": "prompt", "text"}``: start a turn (queued behind a running one);
- ``{"type": "steer", "text"}``: steering for the next round boundary (durable when acknowledged);
- ``{"type": "cancel"}``: abort the running turn;
- ``{"type": "compact"}``: compact now (idle) or before the next model call;
- ``{"type": "goal", "text"}``: set the session's goal (``""`` clears it);
- ``{"type": "status"}``: answer one ``status`` event.

A line that is not a command gets an ``error`` event (``code``, ``message``, ``line``: its number) and
the engine reads on. End of input: queued prompts run, then ``closed`` and exit 0. SIGTERM or SIGINT:
the running turn ends ``interrupted`` (the session continues on the next start), then exit 4.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

import anyio

from ._errors import BadCommand
from ._session import Session

#: A command line longer than this is refused (and skipped to its end).
MAX_LINE_BYTES = 1 << 20
TEXT_MAX_CHARS = 256 * 1024
COMMANDS = ("prompt", "steer", "cancel", "compact", "goal", "status")

#: Exit codes of the headless commands, by how the turn ended.
EXIT_CODES = {"finished": 0, "failed": 1, "aborted": 3, "interrupted": 4}
EXIT_CONFIG = 2
EXIT_REQUEST_CHANGES = 5


def event_writer(out: TextIO) -> Callable[[dict[str, Any]], None]:
    """Events as JSON lines on ``out``, flushed one by one (a client reacts to each as it comes).

    A client that closed its end (a broken pipe) gets no more events; the session goes on writing its
    file, so nothing is lost that a restart with the session id would need.
    """
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
    gone = False

    def emit(event: dict[str, Any]) -> None:
        nonlocal gone
        if gone:
            return
        try:
            out.write(dumps(event) + "\n")
            out.flush()
        except (OSError, ValueError):  # the reader went away (EPIPE), or stdout was closed
            gone = True

    return emit


def parse_command(line: bytes) -> dict[str, Any]:
    """One command line; :class:`BadCommand` says what is wrong with it."""
    try:
        cmd = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadCommand(f"not a JSON line: {exc}") from None
    if not isinstance(cmd, dict):
        raise BadCommand(f"a command is a JSON object, not {type(cmd).__name__}")
    kind = cmd.get("type")
    if kind not in COMMANDS:
        raise BadCommand(f"unknown command type {str(kind)[:100]!r}: use one of {', '.join(COMMANDS)}")
    if kind in ("prompt", "steer", "goal"):
        text = cmd.get("text")
        if not isinstance(text, str) or (kind != "goal" and not text.strip()):
            raise BadCommand(f"{kind} needs 'text', a non-empty string")
        if len(text) > TEXT_MAX_CHARS:
            raise BadCommand(f"{kind} text is {len(text)} characters, over the limit of {TEXT_MAX_CHARS}")
    if "id" in cmd and not isinstance(cmd["id"], (str, int)):
        raise BadCommand("'id' is a string or an integer")
    return cmd


async def dispatch(session: Session, cmd: dict[str, Any]) -> None:
    kind = cmd["type"]
    ack: dict[str, Any] = {"type": "ack", "command": kind}
    if "id" in cmd:
        ack["id"] = cmd["id"]
    if kind == "prompt":
        session.prompt(cmd["text"])
    elif kind == "steer":
        ack["steer_id"] = await session.steer(cmd["text"])
    elif kind == "cancel":
        if not session.cancel():
            session.emit({**ack, "type": "error", "code": "engine_not_running", "message": "no turn is running"})
            return
    elif kind == "compact":
        session.request_compaction()
    elif kind == "goal":
        session.emit(ack)
        await session.set_goal(cmd["text"])
        return
    elif kind == "status":
        session.emit(session.status())
        return
    session.emit(ack)


def _pump(fd: int, loop: asyncio.AbstractEventLoop, q: asyncio.Queue[bytes]) -> None:
    """Read stdin on a daemon thread, unbuffered: a blocked read must never keep the process from exiting
    (``os.read`` holds no lock of the interpreter's, which a buffered reader's would at shutdown)."""
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            loop.call_soon_threadsafe(q.put_nowait, chunk)
            if not chunk:
                return
    except (OSError, ValueError, RuntimeError):  # stdin closed under us, or the loop is gone
        return


async def _read_commands(session: Session, stdin: BinaryIO) -> None:
    q: asyncio.Queue[bytes] = asyncio.Queue()
    threading.Thread(target=_pump, args=(stdin.fileno(), asyncio.get_running_loop(), q), daemon=True,
                     name="engine-stdin").start()
    number = 0
    skipping = False  # inside a line over the limit, already reported
    buf = bytearray()
    while True:
        chunk = await q.get()
        if chunk:
            buf += chunk
        elif buf and not skipping:
            buf += b"\n"  # a last line without its newline still counts
        while True:
            i = buf.find(b"\n")
            if i < 0:
                if len(buf) > MAX_LINE_BYTES:
                    if not skipping:
                        number += 1
                        session.emit({"type": "error", "code": BadCommand.code, "line": number,
                                      "message": f"line {number} is over {MAX_LINE_BYTES} bytes: skipped"})
                    skipping = True
                    buf.clear()
                break
            line = bytes(buf[:i])
            del buf[: i + 1]
            if skipping:
                skipping = False
                continue
            number += 1
            if len(line) > MAX_LINE_BYTES:
                session.emit({"type": "error", "code": BadCommand.code, "line": number,
                              "message": f"line {number} is over {MAX_LINE_BYTES} bytes: skipped"})
                continue
            if not line.strip():
                continue
            try:
                cmd = parse_command(line)
            except BadCommand as exc:
                session.emit({"type": "error", "code": exc.code, "line": number, "message": exc.message})
                continue
            await dispatch(session, cmd)
        if not chunk:
            return


async def _watch_signals(session: Session, done: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            session.interrupt()
            done.set()
            return


def ready_event(session: Session) -> dict[str, Any]:
    s = session.state
    return {"type": "ready", "session": session.session_id, "resumed": session.resumed, "mode": session.config.mode,
            "model": f"{session.config.adapter.provider}:{session.config.adapter.model}", "turn": s.turn,
            "turn_open": s.turn_open, "rounds": s.rounds_total, "parent_session": session.config.parent_session_id}


async def serve_session(session: Session, stdin: BinaryIO | None = None) -> int:
    """Run ``session`` over stdin/stdout until end of input (0) or a signal (4)."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    session.emit(ready_event(session))
    interrupted = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, session, interrupted)

        async def read_then_close() -> None:
            await _read_commands(session, stdin)
            session.close_when_idle()

        tg.start_soon(read_then_close)
        await session.work()
        tg.cancel_scope.cancel()
    session.emit({"type": "closed", "session": session.session_id})
    return EXIT_CODES["interrupted"] if interrupted.is_set() else 0


async def run_headless(session: Session, task: str | None) -> int:
    """One task (or the session's open turn), events on stdout; the exit code says how the turn ended."""
    session.emit(ready_event(session))
    before = session.state.last_end
    if task is not None:
        session.prompt(task)
    session.close_when_idle()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, session, anyio.Event())
        await session.work()
        tg.cancel_scope.cancel()
    end = session.state.last_end or {}
    state = str(end.get("state"))
    if session.state.last_end is before:
        session.emit({"type": "error", "code": "engine_no_task", "message": "nothing to run: give a task, or the id "
                      "of a session with an open turn"})
        return EXIT_CONFIG
    if state == "finished" and session.config.mode == "review":
        result = end.get("result")
        if isinstance(result, dict) and result.get("verdict") == "request_changes":
            return EXIT_REQUEST_CHANGES
    return EXIT_CODES.get(state, 1)


__all__ = ["COMMANDS", "EXIT_CODES", "MAX_LINE_BYTES", "dispatch", "event_writer", "parse_command", "run_headless",
           "serve_session"]
