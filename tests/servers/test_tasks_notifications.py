"""``notifications/tasks`` on ``subscriptions/listen`` (SEP-2663 over SEP-2575), driven by the SDK client.

The client is the official ``mcp.Client`` with a small tasks extension of
its own (``ClientExtension``): it claims ``resultType: "task"`` on
``tools/call``, and its resolver opens a ``subscriptions/listen`` stream
with ``taskIds`` and waits for the pushed terminal state instead of
polling. The server runs in-process behind real uvicorn on 127.0.0.1, with
two bearer principals.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import BaseModel, ConfigDict

from .test_tasks import EXT, TASK_ID_RE, Http, serving

pytestmark = pytest.mark.anyio

SUB_KEY = "io.modelcontextprotocol/subscriptionId"


class CreateTaskResult(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str


class TaskParams(BaseModel):
    model_config = ConfigDict(extra="allow")


class TasksExtension(ClientExtension):
    """The client half of the tasks extension, enough for the test: claim the task, listen, wait for its end."""

    identifier = EXT

    def __init__(self) -> None:
        self.pushed: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []
        self.created: list[str] = []
        self._changed = anyio.Event()
        self.on_created: Any = None

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/tasks", params_type=TaskParams, handler=self._pushed)]

    async def _pushed(self, params: TaskParams) -> None:
        self.pushed.append(params.model_dump(by_alias=True))
        self._changed.set()
        self._changed = anyio.Event()

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created.task_id)
        async with listen(ctx.session, [created.task_id]):
            if self.on_created is not None:
                await self.on_created(created.task_id)
            with anyio.fail_after(30):
                while not any(p["taskId"] == created.task_id and p["status"] == "completed" for p in self.pushed):
                    await self._changed.wait()
        done = next(p for p in self.pushed if p["taskId"] == created.task_id and p["status"] == "completed")
        return types.CallToolResult.model_validate(done["result"])


@asynccontextmanager
async def listen(session: Any, task_ids: list[str]) -> AsyncIterator[None]:
    """A raw ``subscriptions/listen`` request with the tasks filter, held open in the background."""
    request = types.SubscriptionsListenRequest(
        params=types.SubscriptionsListenRequestParams(notifications=types.SubscriptionFilter(taskIds=task_ids))
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.send_request, request, types.SubscriptionsListenResult)
        yield
        tg.cancel_scope.cancel()


def _client(url: str, token: str, ext: ClientExtension, **kw: Any) -> Client:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode="auto", extensions=[ext],
                  read_timeout_seconds=60, **kw)


async def test_the_sdk_client_gets_its_tasks_end_pushed_instead_of_polling(tmp_path: Path) -> None:
    markers = tmp_path / "m"
    ext = TasksExtension()

    async def release(task_id: str) -> None:
        # The first push (the current state, right after the ack) is in before the task may finish.
        with anyio.fail_after(30):
            while not any(p["taskId"] == task_id for p in ext.pushed):
                await anyio.sleep(0.01)
        (markers / "release").write_text("go")

    ext.on_created = release
    messages: list[Any] = []

    async def on_message(message: Any) -> None:
        messages.append(message)

    async with serving(tmp_path) as url, _client(url, "alice-token", ext, message_handler=on_message) as client:
        result = await client.call_tool("task_slow", {"dir": str(markers)})
    assert not result.is_error and result.structured_content == {"released": True}
    assert result.meta["dev.openfunctions/receipt"]["outcome"] == "succeeded"
    [task_id] = ext.created
    assert TASK_ID_RE.match(task_id)
    mine = [p for p in ext.pushed if p["taskId"] == task_id]
    assert [p["status"] for p in mine] == ["working", "completed"], mine
    # Whole tasks, as tasks/get answers them, each stamped with the listen request's id.
    for p in mine:
        assert {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= set(p)
        assert p["_meta"][SUB_KEY] is not None
    assert mine[-1]["result"]["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
    # The acknowledgment named the honored task id (it reached the message handler: a core notification).
    acks = [m for m in messages if isinstance(m, types.SubscriptionsAcknowledgedNotification)]
    assert acks and acks[0].params.notifications.model_extra == {"taskIds": [task_id]}


async def test_a_stream_never_carries_another_principals_task_and_the_ack_says_so(tmp_path: Path) -> None:
    alice_ext, bob_ext = TasksExtension(), TasksExtension()
    bob_messages: list[Any] = []

    async def on_bob_message(message: Any) -> None:
        bob_messages.append(message)

    async with serving(tmp_path) as url:
        alice = Http(url, "alice-token")

        def finished_task() -> str:  # plain HTTP in a thread: the server runs on this loop
            created = alice.result("tools/call", {"name": "task_quick", "arguments": {"text": "secret"}})
            assert "taskId" in created, created
            task_id = created["taskId"]
            alice.until(task_id, {"completed"})
            return task_id

        task_id = await anyio.to_thread.run_sync(finished_task)
        unknown_id = "task_" + "f" * 32
        async with _client(url, "bob-token", bob_ext, message_handler=on_bob_message) as bob, \
                _client(url, "alice-token", alice_ext) as alice_sdk:
            async with listen(bob.session, [task_id, unknown_id]), listen(alice_sdk.session, [task_id]):
                with anyio.fail_after(30):
                    while not alice_ext.pushed or not bob_messages:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.3)  # room for a frame bob must never get
    # Alice's own stream gets her finished task at once (a late subscriber still learns the end).
    assert [(p["taskId"], p["status"]) for p in alice_ext.pushed] == [(task_id, "completed")]
    assert alice_ext.pushed[0]["result"]["structuredContent"] == {"answer": 42, "text": "secret"}
    # Bob's: honored nothing of the tasks filter, for her id exactly as for one that never existed.
    acks = [m for m in bob_messages if isinstance(m, types.SubscriptionsAcknowledgedNotification)]
    assert len(acks) == 1 and not (acks[0].params.notifications.model_extra or {}).get("taskIds")
    assert bob_ext.pushed == []


async def test_without_the_extension_the_tasks_filter_is_not_honored(tmp_path: Path) -> None:
    messages: list[Any] = []

    async def on_message(message: Any) -> None:
        messages.append(message)

    async with serving(tmp_path) as url:
        alice = Http(url, "alice-token")
        task_id = (await anyio.to_thread.run_sync(
            lambda: alice.result("tools/call", {"name": "task_quick", "arguments": {}})))["taskId"]
        http = create_mcp_http_client(headers={"Authorization": "Bearer alice-token"})
        async with Client(streamable_http_client(url, http_client=http), mode="auto", message_handler=on_message,
                          read_timeout_seconds=60) as plain:
            async with listen(plain.session, [task_id]):
                with anyio.fail_after(30):
                    while not messages:
                        await anyio.sleep(0.01)
    ack = next(m for m in messages if isinstance(m, types.SubscriptionsAcknowledgedNotification))
    assert not (ack.params.notifications.model_extra or {}).get("taskIds")


@pytest.mark.slow
def test_notifications_tasks_over_stdio(raw_stdio: Any, tmp_path: Path) -> None:
    from .test_tasks import _body

    session = raw_stdio("--module", "task_fixture_tools:registry")
    markers = tmp_path / "m"

    def rpc(method: str, params: dict[str, Any]) -> int:
        return session.request(method, _body(method, params, 0, True)["params"])

    created = session.response(rpc("tools/call", {"name": "task_slow", "arguments": {"dir": str(markers)}}))["result"]
    task_id = created["taskId"]
    listen_id = rpc("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    frames = [session.read(), session.read()]
    assert frames[0]["method"] == "notifications/subscriptions/acknowledged"
    assert frames[0]["params"]["notifications"] == {"taskIds": [task_id]}
    assert frames[0]["params"]["_meta"][SUB_KEY] == listen_id
    assert frames[1]["method"] == "notifications/tasks" and frames[1]["params"]["status"] == "working"
    (markers / "release").write_text("go")
    done = session.read()
    assert done["method"] == "notifications/tasks", done
    assert done["params"]["taskId"] == task_id and done["params"]["status"] == "completed"
    assert done["params"]["result"]["structuredContent"] == {"released": True}
    assert done["params"]["_meta"][SUB_KEY] == listen_id
    # The stream ends gracefully with the server: its final frame is the listen request's result.
    session.proc.stdin.close()
    rest = []
    while True:
        try:
            rest.append(session.read(timeout=20))
        except EOFError:
            break
    assert [m for m in rest if m.get("id") == listen_id and "result" in m], rest
    assert session.proc.wait(timeout=20) == 0
