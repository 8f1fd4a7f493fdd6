"""Task status notifications: ``notifications/tasks`` on ``subscriptions/listen`` streams (SEP-2663 over SEP-2575).

A 2026-07-28 client opts in to server events with a ``subscriptions/listen``
request whose response is the stream. Besides the core filter kinds
(``toolsListChanged``, ``promptsListChanged``, ``resourcesListChanged``,
``resourceSubscriptions``), the tasks extension adds ``taskIds``: the tasks
whose status changes the client wants pushed instead of polling.

What this handler does, in wire order:

1. the acknowledgment (``notifications/subscriptions/acknowledged``) is the
   first frame; it echoes the honored subset of the filter. ``taskIds`` is
   honored only for a request that declared the tasks extension, and only
   for ids visible to the request's principal that have not expired: an
   unknown id and another principal's id are both left out, alike, so the
   acknowledgment reveals nothing a ``tasks/get`` would not. At most
   :data:`MAX_TASK_IDS` ids per stream. The core kinds are honored when the
   server publishes such events (a bus is attached: the server's own, for a
   gateway's re-listed tools and prompts, and a profile's), else left out;
2. the current state of every honored task (a client that subscribes after
   the task finished still learns its end);
3. then, until the client goes away or the server closes: one
   ``notifications/tasks`` per status change of an honored task, and the core
   change events from the bus.

A ``notifications/tasks`` frame carries the *whole* task as ``tasks/get``
would answer it at that moment (``taskId``, ``status``, ``createdAt``,
``lastUpdatedAt``, ``ttlMs``, ``pollIntervalMs``, ``statusMessage``,
``inputRequests`` / ``result`` / ``error``), so a missed frame costs nothing
and polling stays correct; every frame's ``_meta`` carries
``io.modelcontextprotocol/subscriptionId`` (the listen request's id). Two
consecutive frames with the same task state are sent once. Delivery is
fire-and-forget with no replay, like the SDK's ``ListenHandler``: a stream
whose client stops reading is ended at :data:`MAX_BUFFERED` pending events.
Changes of ``statusMessage`` alone (progress) are not pushed. With a shared
task store (``serve --database``), a task may run on another replica: the
stream also re-reads its unfinished tasks every :data:`SHARED_POLL_S` seconds,
so their changes arrive within that delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import mcp_types as types
import structlog
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, event_matches, event_to_notification

if TYPE_CHECKING:
    from mcp.server.subscriptions import SubscriptionBus

    from ._tasks import TaskManager

log = structlog.get_logger("openfunctions.servers.tasks")

TASKS_NOTIFICATION: Final = "notifications/tasks"
TASK_IDS_FILTER = "taskIds"
MAX_STREAMS = 1024
MAX_BUFFERED = 1024
#: With a shared (database) task store: how often a stream re-reads its unfinished tasks (changes made by other replicas).
SHARED_POLL_S = 1.0
MAX_TASK_IDS = 1000


class TaskStatusNotification(types.Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """``notifications/tasks``: the whole task, as ``tasks/get`` answers it (params keep JSON nulls)."""

    method: Literal["notifications/tasks"] = TASKS_NOTIFICATION
    params: dict[str, Any]


@dataclass(eq=False)
class _Stream:
    task_ids: frozenset[str]
    deliver: Callable[[Any], None]
    last_sent: dict[str, tuple[str, str]] = field(default_factory=dict)


class TaskListen:
    """The ``subscriptions/listen`` handler of a server with tasks; register it on the low-level server.

    ``principal_for(ctx)`` and ``declared(ctx)`` are the server's own rules
    (who is asking; did this request declare the tasks extension). ``buses``:
    SDK ``SubscriptionBus`` es whose core change events (list changes,
    resource updates) ride the same streams (:meth:`attach`).
    """

    def __init__(self, manager: TaskManager, *, principal_for: Callable[[Any], str | None],
                 declared: Callable[[Any], bool]) -> None:
        self.manager = manager
        self.principal_for = principal_for
        self.declared = declared
        self.buses: list[SubscriptionBus] = []
        self._streams: set[_Stream] = set()
        self._sends: set[Any] = set()

    def attach(self, bus: SubscriptionBus) -> None:
        """Carry ``bus``'s core change events on the streams opened from now on."""
        if bus not in self.buses:
            self.buses.append(bus)

    def changed(self, task_id: str) -> None:
        """A record changed ``task_id``'s state: queue it on every stream that asked for it (synchronous)."""
        for stream in list(self._streams):
            if task_id in stream.task_ids:
                stream.deliver(task_id)

    def close(self) -> None:
        """End every open stream gracefully (each sends its final ``SubscriptionsListenResult``)."""
        for send in list(self._sends):
            send.close()

    async def _honored(self, ctx: Any, requested: types.SubscriptionFilter) -> tuple[types.SubscriptionFilter, frozenset[str]]:
        core = bool(self.buses)
        task_ids: list[str] = []
        raw = (requested.model_extra or {}).get(TASK_IDS_FILTER)
        if isinstance(raw, list) and self.declared(ctx):
            principal = self.principal_for(ctx)
            for task_id in raw[:MAX_TASK_IDS]:
                try:
                    await self.manager.lookup(task_id, principal)
                except MCPError:
                    continue  # unknown, expired or not this principal's: left out alike
                if task_id not in task_ids:
                    task_ids.append(task_id)
        honored = types.SubscriptionFilter(
            tools_list_changed=True if core and requested.tools_list_changed else None,
            prompts_list_changed=True if core and requested.prompts_list_changed else None,
            resources_list_changed=True if core and requested.resources_list_changed else None,
            resource_subscriptions=list(requested.resource_subscriptions)
            if core and requested.resource_subscriptions else None,
            **({TASK_IDS_FILTER: task_ids} if task_ids else {}),
        )
        return honored, frozenset(task_ids)

    async def __call__(self, ctx: Any, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= MAX_STREAMS:
            raise MCPError(types.INTERNAL_ERROR, "Subscription limit reached")
        honored, task_ids = await self._honored(ctx, params.notifications)
        uris = frozenset(honored.resource_subscriptions or ())
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        send, recv = anyio.create_memory_object_stream[Any](MAX_BUFFERED)

        def deliver(item: Any) -> None:
            try:
                send.send_nowait(item)
            except anyio.ClosedResourceError:
                pass
            except anyio.WouldBlock:
                log.warning("listen_stream_backlog_full", subscription_id=str(subscription_id)[:80])
                self._streams.discard(stream)
                self._sends.discard(send)
                send.close()

        def on_event(event: Any) -> None:
            if event_matches(honored, uris, event):
                deliver(event)

        stream = _Stream(task_ids, deliver)
        # Registered before the ack so nothing published meanwhile is lost; this task alone
        # writes the stream, and it drains only after the ack is sent.
        unsubscribes = [bus.subscribe(on_event) for bus in self.buses]
        self._streams.add(stream)
        self._sends.add(send)
        for task_id in sorted(task_ids):
            deliver(task_id)  # the current state of each task first
        poller = None
        if task_ids and getattr(self.manager.store, "shared", False):
            # Another replica may run these tasks: its changes reach this one only through the rows.
            poller = asyncio.get_running_loop().create_task(self._poll(stream, deliver))
        try:
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=subscription_id,
            )
            async for item in recv:
                if isinstance(item, str):
                    notification = await self._task_notification(stream, item, meta)
                    if notification is None:
                        continue
                else:
                    notification = event_to_notification(item, meta)
                await ctx.session.send_notification(notification, related_request_id=subscription_id)
        finally:
            if poller is not None:
                poller.cancel()
            for unsubscribe in unsubscribes:
                try:
                    unsubscribe()
                except Exception as exc:  # a custom bus must not stop this stream's cleanup
                    log.warning("listen_unsubscribe_failed", error=str(exc))
            self._streams.discard(stream)
            self._sends.discard(send)
            send.close()
            recv.close()
        return types.SubscriptionsListenResult(_meta=meta)

    async def _poll(self, stream: _Stream, deliver: Callable[[Any], None]) -> None:
        """Shared task store: queue each unfinished task every :data:`SHARED_POLL_S` (unchanged states are not sent)."""
        from ._task_records import TERMINAL

        while True:
            await asyncio.sleep(SHARED_POLL_S)
            for task_id in stream.task_ids:
                if stream.last_sent.get(task_id, ("", ""))[0] not in TERMINAL:
                    deliver(task_id)

    async def _task_notification(self, stream: _Stream, task_id: str, meta: dict[str, Any]) -> Any:
        task = await self.manager.find(task_id)
        if task is None:
            return None  # expired meanwhile: nothing left to say
        state = (task.status, task.last_updated_at)
        if stream.last_sent.get(task_id) == state:
            return None
        stream.last_sent[task_id] = state
        params = await self.manager.get(task)
        params["_meta"] = {**params.get("_meta", {}), **meta}
        return TaskStatusNotification(params=params)


__all__ = ["TaskListen", "TaskStatusNotification", "TASKS_NOTIFICATION", "TASK_IDS_FILTER", "MAX_TASK_IDS"]
