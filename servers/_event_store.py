"""A bounded, in-memory event store that makes streamable-HTTP SSE streams resumable.

The SDK's streamable-HTTP transport stores every message it sends on an SSE
stream through an ``EventStore`` (``store_event(stream_id, message)``; a
``None`` message is a stream's *priming* event) and hands a client that
reconnects with ``Last-Event-ID`` everything stored after that id on the same
stream (``replay_events_after``).

One :class:`MemoryEventStore` serves the whole HTTP app; each session sees its
own namespace through :meth:`MemoryEventStore.for_session`. That matters: the
SDK names a stream after the JSON-RPC request id (or ``"_GET_stream"``), which
every session reuses, so a store shared flat would mix sessions and replay one
session's messages to another. A ``Last-Event-ID`` that belongs to another
session is treated as unknown.

Bounds (oldest events evicted first, so memory stays bounded however long a
server runs and however many sessions come and go):

- ``max_events_per_stream`` (default 1000): a stream keeps at most its newest N.
- ``max_events`` (default 10 000) and ``max_bytes`` (default 64 MiB, measured
  as the message's JSON size) across all sessions together.

A client whose ``Last-Event-ID`` has been evicted (or that comes back after a
server restart: the store is memory only) cannot resume that stream; the
reconnection then replays nothing. A session's events are dropped when its
transport goes away (:meth:`drop_session`).

Event ids are opaque to clients: ``"<boot>_<seq>"``, where ``boot`` is random
per store (so an id from a previous server process never matches) and ``seq``
increases by one per stored event across the whole store (monotonic).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

DEFAULT_MAX_EVENTS_PER_STREAM = 1000
DEFAULT_MAX_EVENTS = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

_Key = tuple[str, StreamId]  # (session id, stream id)


@dataclass(slots=True)
class _Event:
    key: _Key
    message: JSONRPCMessage | None
    size: int


class MemoryEventStore:
    """Per-session SSE event history for the whole app, bounded per stream and in total."""

    def __init__(
        self,
        *,
        max_events_per_stream: int = DEFAULT_MAX_EVENTS_PER_STREAM,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        for name, value in (("max_events_per_stream", max_events_per_stream), ("max_events", max_events), ("max_bytes", max_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.max_events_per_stream = max_events_per_stream
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._boot = secrets.token_hex(4)
        self._seq = 0
        self._events: OrderedDict[int, _Event] = OrderedDict()  # oldest first, over all streams
        self._streams: dict[_Key, deque[int]] = {}
        self._sessions: dict[str, set[StreamId]] = {}
        self._bytes = 0

    # -- what the transport calls (through a session view) -------------------

    def for_session(self, session_id: str) -> EventStore:
        """The ``EventStore`` a single session's transport uses."""
        return SessionEvents(self, session_id)

    def store(self, session_id: str, stream_id: StreamId, message: JSONRPCMessage | None, size: int | None = None) -> EventId:
        """Store one event; ``size``: the message's JSON length where the caller already encoded it."""
        self._seq += 1
        seq = self._seq
        key = (session_id, stream_id)
        if size is None:
            size = 0 if message is None else len(message.model_dump_json(by_alias=True, exclude_unset=True))
        self._events[seq] = _Event(key, message, size)
        self._bytes += size
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = deque()
            self._sessions.setdefault(session_id, set()).add(stream_id)
        stream.append(seq)
        while len(stream) > self.max_events_per_stream:
            self._forget(stream.popleft())
        # Keep the event just stored even if it alone exceeds max_bytes: the
        # live stream needs its id, and the next store evicts it anyway.
        while len(self._events) > 1 and (len(self._events) > self.max_events or self._bytes > self.max_bytes):
            oldest, event = next(iter(self._events.items()))
            # Global order is per-stream order, so the oldest event overall is
            # the oldest of its own stream.
            self._streams[event.key].popleft()
            self._forget(oldest)
            self._drop_stream_if_empty(event.key)
        return f"{self._boot}_{seq}"

    async def replay(self, session_id: str, last_event_id: EventId, send: EventCallback) -> StreamId | None:
        seq = self._parse(last_event_id)
        if seq is None:
            return None
        event = self._events.get(seq)
        if event is None or event.key[0] != session_id:
            return None
        # Snapshot first: sending awaits, and new events may arrive meanwhile
        # (the transport delivers those live once the replay is done).
        later = [(s, self._events[s].message) for s in self._streams[event.key] if s > seq]
        for s, message in later:
            if message is not None:  # priming events carry no message
                await send(EventMessage(message, f"{self._boot}_{s}"))
        return event.key[1]

    def drop_session(self, session_id: str) -> None:
        """Forget every event of a session (its transport is gone; nobody can resume it)."""
        for stream_id in self._sessions.pop(session_id, ()):
            for seq in self._streams.pop((session_id, stream_id), ()):
                self._forget(seq)

    # -- introspection (tests, diagnostics) ----------------------------------

    @property
    def event_count(self) -> int:
        return len(self._events)

    @property
    def byte_count(self) -> int:
        return self._bytes

    # -- internals -----------------------------------------------------------

    def _forget(self, seq: int) -> None:
        event = self._events.pop(seq, None)
        if event is not None:
            self._bytes -= event.size

    def _drop_stream_if_empty(self, key: _Key) -> None:
        if not self._streams[key]:
            del self._streams[key]
            streams = self._sessions.get(key[0])
            if streams is not None:
                streams.discard(key[1])
                if not streams:
                    del self._sessions[key[0]]

    def _parse(self, event_id: str) -> int | None:
        boot, _, seq = event_id.partition("_")
        if boot != self._boot or not seq.isdigit():
            return None
        return int(seq)


class SessionEvents(EventStore):
    """One session's view of a :class:`MemoryEventStore` (the SDK's ``EventStore`` interface)."""

    def __init__(self, store: MemoryEventStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self._store.store(self._session_id, stream_id, message)

    def store_sized(self, stream_id: StreamId, message: JSONRPCMessage, size: int) -> EventId:
        """:meth:`store_event` for a message whose JSON length the caller has (the direct ``tools/call`` path)."""
        return self._store.store(self._session_id, stream_id, message, size)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        return await self._store.replay(self._session_id, last_event_id, send_callback)


__all__ = ["MemoryEventStore", "DEFAULT_MAX_EVENTS", "DEFAULT_MAX_EVENTS_PER_STREAM", "DEFAULT_MAX_BYTES"]
