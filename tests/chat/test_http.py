"""serve(): the HTTP endpoints on a real uvicorn listening on 127.0.0.1 (in this process), driven by httpx."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.chat import MAX_BODY_BYTES, MAX_MESSAGE_CHARS, ChatConfigError, open_chat_agent

from . import fixture_tools as fx

pytestmark = pytest.mark.anyio
JSON = {"content-type": "application/json"}


@contextlib.asynccontextmanager
async def served(agent: Any, **options: Any) -> AsyncIterator[str]:
    ports: list[int] = []
    listening = anyio.Event()

    def ready(port: int) -> None:
        ports.append(port)
        listening.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(agent.serve, port=0, ready=ready, **options))
        with anyio.fail_after(20):
            await listening.wait()
        try:
            yield f"http://127.0.0.1:{ports[0]}"
        finally:
            tg.cancel_scope.cancel()


def sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


async def test_chat_health_reset_and_the_page(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 4, "b": 5}}, "9.", "Hello again."])
    async with await open_chat_agent(adapter=model, registry=fx.registry, data_dir=tmp_path) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.post("/chat", json={"message": "4 + 5?"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["text"] == "9." and body["status"] == "completed" and body["run_id"].startswith("run_")
        assert body["tool_calls"][0]["name"] == "add" and body["tool_calls"][0]["receipt_id"].startswith("rcpt_")
        health = (await client.get("/health")).json()
        assert health["status"] == "ok" and health["provider"] == "scripted" and "add" in health["tools"]
        thread = health["thread_id"]
        r = await client.post("/reset", json={})
        assert r.status_code == 200 and r.json()["thread_id"] != thread
        r = await client.post("/chat", json={"message": "hi"})
        assert r.json()["text"] == "Hello again."
        assert [m.role for m in model.calls[-1][0]] == ["system", "user"]  # the reset conversation starts empty
        page = await client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "chat/stream" in page.text and "<script>" in page.text
        assert "http://" not in page.text and "https://" not in page.text and "src=" not in page.text  # self-contained


async def test_the_stream_endpoint_sends_sse_events_in_order(tmp_path: Path) -> None:
    model = ScriptedAdapter([{"tool": "shout", "arguments": {"text": "hey"}}, "HEY."])
    async with await open_chat_agent(adapter=model, registry=fx.registry, data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.post("/chat/stream", json={"message": "shout hey"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    assert [e for e, _ in events] == ["tool_call", "tool_result", "text", "done"]
    assert events[1][1]["receipt_id"].startswith("rcpt_") and events[2][1]["text"] == "HEY."
    assert events[3][1]["status"] == "completed" and events[3][1]["tool_calls"][0]["receipt_id"] == events[1][1]["receipt_id"]


async def test_bad_bodies_get_a_4xx_that_names_the_problem(tmp_path: Path) -> None:
    model = ScriptedAdapter(["still fine"])
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"content": b"{not json", "headers": JSON}, 400, "invalid_json", "the body is not JSON"),
        ({"content": b"\xff\xfe", "headers": JSON}, 400, "invalid_json", "the body is not JSON"),
        ({"json": ["message"]}, 400, "invalid_json", "must be a JSON object"),
        ({"json": {}}, 400, "chat_message_invalid", 'no "message" field'),
        ({"json": {"message": 5}}, 400, "chat_message_invalid", "message must be a string, got int"),
        ({"json": {"message": "   "}}, 400, "chat_message_invalid", "message is empty"),
        ({"content": b'{"message": "\\ud800"}', "headers": JSON}, 400, "chat_message_invalid", "lone surrogate"),
        ({"json": {"message": "x" * (MAX_MESSAGE_CHARS + 1)}}, 413, "chat_message_too_large",
         f"message is {MAX_MESSAGE_CHARS + 1} characters; the limit is {MAX_MESSAGE_CHARS}"),
        ({"content": b'{"message": "' + b"y" * MAX_BODY_BYTES + b'"}', "headers": JSON}, 413, "body_too_large",
         f"{MAX_BODY_BYTES}"),
        ({"content": b"<p>hi</p>", "headers": {"content-type": "text/html"}}, 415, "unsupported_media_type", "text/html"),
        # what a browser sends cross-site without a CORS preflight: text/plain, a form, or no type at all
        ({"content": b'{"message": "hi"}', "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type",
         "not text/plain"),
        ({"content": b"message=hi", "headers": {"content-type": "application/x-www-form-urlencoded"}}, 415,
         "unsupported_media_type", "application/json"),
        ({"content": b'{"message": "hi"}'}, 415, "unsupported_media_type", "not no type"),
        ({"content": b'{"message": ' + b"[" * 30_000 + b"]" * 30_000 + b"}", "headers": JSON}, 400, "invalid_json",
         "nests deeper than 200 levels"),
    ]
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        for path in ("/chat", "/chat/stream"):
            for kwargs, status, code, words in cases:
                r = await client.post(path, **kwargs)
                assert r.status_code == status, (path, kwargs.keys(), r.text)
                err = r.json()["error"]
                assert err["code"] == code and words in err["message"], (path, err)
        # A body sent in chunks without a length is cut off at the limit too.
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(MAX_BODY_BYTES // 4096 + 2):
                yield b" " * 4096

        r = await client.post("/chat", content=chunks(), headers=JSON)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
        assert (await client.get("/chat")).status_code == 405
        # Nothing reached the model; the server still answers.
        assert model.calls == []
        r = await client.post("/chat", json={"message": "ok?"})
        assert r.status_code == 200 and r.json()["text"] == "still fine"


async def test_a_client_that_disconnects_mid_stream_cancels_its_turn_and_the_server_keeps_working(tmp_path: Path) -> None:
    thinking, cancelled = anyio.Event(), anyio.Event()

    slow = fx.blocking_reply(thinking, cancelled)

    model = ScriptedAdapter([{"tool": "add", "arguments": {"a": 1, "b": 2}}, slow, "I am still here."])
    async with await open_chat_agent(adapter=model, registry=fx.registry, data_dir=tmp_path) as agent, \
            served(agent) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            async with client.stream("POST", "/chat/stream", json={"message": "add 1 and 2, slowly"}) as r:
                assert r.status_code == 200
                seen = ""
                async for chunk in r.aiter_text():
                    seen += chunk
                    if "event: tool_result" in seen:
                        break
            # leaving the block closed the connection while the model was thinking
        with anyio.fail_after(20):
            await cancelled.wait()
            while not [run for run in agent.runs.state.values() if run.finished]:
                await anyio.sleep(0.05)
        [run] = agent.runs.state.values()
        assert thinking.is_set() and run.status == "cancelled"
        assert len(run.finished["receipts"]) == 1  # the add call that settled before the disconnect
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            r = await client.post("/chat", json={"message": "still there?"})
            assert r.status_code == 200 and r.json()["text"] == "I am still here."
            # The cancelled turn is not part of the conversation.
            assert [m.content for m in model.calls[-1][0][1:]] == ["still there?"]
            assert (await client.get("/health")).json()["status"] == "ok"


async def test_bearer_auth_refuses_a_missing_or_wrong_token(tmp_path: Path) -> None:
    model = ScriptedAdapter(["authorized"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False) as agent, \
            served(agent, token="s3cret-token") as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic s3cret-token"}):
            for method, path in (("POST", "/chat"), ("POST", "/chat/stream"), ("GET", "/health"), ("POST", "/reset")):
                r = await client.request(method, path, json={"message": "hi"}, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), (path, headers)
                assert r.json()["error"] == "invalid_token"
        assert model.calls == []
        assert (await client.get("/")).status_code == 200  # the page holds no data; it sends the token itself
        r = await client.post("/chat", json={"message": "hi"}, headers={"authorization": "Bearer s3cret-token"})
        assert r.status_code == 200 and r.json()["text"] == "authorized"


async def test_loopback_server_refuses_foreign_hosts_and_origins(tmp_path: Path) -> None:
    async with await open_chat_agent(adapter=ScriptedAdapter(["same origin ok"]), data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.get("/health", headers={"host": "evil.example"})
        assert r.status_code == 421 and r.json()["error"]["code"] == "invalid_host"
        assert "Invalid Host header 'evil.example'" in r.json()["error"]["message"]
        r = await client.post("/chat", json={"message": "hi"}, headers={"origin": "http://evil.example"})
        assert r.status_code == 403 and "Invalid Origin header 'http://evil.example'" in r.json()["error"]["message"]
        r = await client.post("/chat", json={"message": "hi"}, headers={"origin": url})
        assert r.status_code == 200 and r.json()["text"] == "same origin ok"


async def test_a_foreign_page_cannot_run_a_turn_without_a_preflight(tmp_path: Path) -> None:
    """What a browser sends cross-site with no CORS preflight: ``Origin: null`` (a sandboxed iframe, a ``data:`` or
    ``file:`` page), a text/plain or form body, or a body with no type; each is refused and the model never runs.
    A page reached through a port forward (Host and Origin on the forwarded port) still works."""
    model = ScriptedAdapter(["forwarded ok"])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        body = b'{"message": "write the file"}'
        for path in ("/chat", "/chat/stream", "/reset"):
            r = await client.post(path, content=body, headers={"origin": "null", **JSON})
            assert r.status_code == 403 and r.json()["error"]["code"] == "invalid_origin", (path, r.text)
            for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data"):
                r = await client.post(path, content=body, headers={"content-type": ctype, "origin": url})
                assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type", (path, ctype)
            r = await client.post(path, content=body, headers={"origin": url})  # no Content-Type at all
            assert r.status_code == 415, path
        local_app = "http://127.0.0.1:3000"  # another local web app's page (not this server's)
        r = await client.post("/chat", content=body, headers={"origin": local_app, **JSON})
        assert r.status_code == 403
        assert len(agent._conversations) == 0 and model.calls == []  # nothing reached the model or opened a conversation
        forwarded = "127.0.0.1:18765"  # ssh -L 18765:127.0.0.1:<port>: the browser's Host and Origin name 18765
        r = await client.post("/chat", content=body, headers={"host": forwarded, "origin": f"http://{forwarded}", **JSON})
        assert r.status_code == 200 and r.json()["text"] == "forwarded ok"


async def test_a_failed_turn_is_a_502_with_the_error_and_its_run_id(tmp_path: Path) -> None:
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        r = await client.post("/chat", json={"message": "hi"})
    assert r.status_code == 502
    body = r.json()
    assert body["status"] == "failed" and body["error"]["code"] == "script_exhausted" and body["run_id"].startswith("run_")


async def test_serve_refuses_a_public_bind_without_a_token_and_a_taken_port(tmp_path: Path) -> None:
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=tmp_path, memory=False) as agent:
        with pytest.raises(ChatConfigError, match="not loopback.*needs a bearer token"):
            await agent.serve(host="0.0.0.0", port=0)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            with pytest.raises(ChatConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
                await agent.serve(port=port)


async def test_each_client_gets_its_own_conversation_and_reset_touches_only_its_own(tmp_path: Path) -> None:
    model = ScriptedAdapter(["Hi Ada.", "Hi Bob.", "You are Ada.", "You are Bob.", "Fresh start.", "Still Bob."])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:

        def seen() -> list[str]:  # what the model was shown in the last turn, system prompt left out
            return [m.content for m in model.calls[-1][0][1:]]

        a = await client.post("/chat", json={"message": "I am Ada"})
        b = await client.post("/chat/stream", json={"message": "I am Bob"})
        ida, idb = a.headers["x-conversation-id"], b.headers["x-conversation-id"]
        assert ida != idb and ida.startswith("conv_") and a.json()["conversation_id"] == ida
        assert sse(b.text)[-1][1]["conversation_id"] == idb  # the stream's done event names it too
        assert seen() == ["I am Bob"]  # Bob's first turn does not see Ada's
        # Ada carries hers in the body, Bob in the header: each sees only its own conversation.
        r = await client.post("/chat", json={"message": "who am I?", "conversation_id": ida})
        assert r.json()["text"] == "You are Ada." and seen() == ["I am Ada", "Hi Ada.", "who am I?"]
        r = await client.post("/chat/stream", json={"message": "who am I?"}, headers={"x-conversation-id": idb})
        assert r.headers["x-conversation-id"] == idb and seen() == ["I am Bob", "Hi Bob.", "who am I?"]
        # Ada's reset starts Ada over; Bob's conversation is untouched.
        r = await client.post("/reset", json={"conversation_id": ida})
        assert r.status_code == 200 and r.json()["conversation_id"] == ida
        await client.post("/chat", json={"message": "again", "conversation_id": ida})
        assert seen() == ["again"]
        await client.post("/chat", json={"message": "and me?", "conversation_id": idb})
        assert seen() == ["I am Bob", "Hi Bob.", "who am I?", "You are Bob.", "and me?"]
        # /reset naming nothing issues a new conversation and resets nobody's
        r = await client.post("/reset", json={})
        assert r.status_code == 200 and r.json()["conversation_id"] not in (ida, idb)
        assert (await client.get("/health")).json()["conversations"] == 3


async def test_an_unknown_or_hostile_conversation_id_gets_a_clear_4xx(tmp_path: Path) -> None:
    model = ScriptedAdapter(["ok"])
    unknown = "conv_" + "A" * 32
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"json": {"message": "hi", "conversation_id": 5}}, 400, "chat_conversation_invalid", "'int' is not one this chat issues"),
        ({"json": {"message": "hi", "conversation_id": "../../etc/passwd"}}, 400, "chat_conversation_invalid", "not one"),
        ({"json": {"message": "hi", "conversation_id": "conv_" + "x" * 10_000}}, 400, "chat_conversation_invalid", "not one"),
        ({"json": {"message": "hi", "conversation_id": ""}}, 400, "chat_conversation_invalid", "not one"),
        ({"json": {"message": "hi"}, "headers": {"x-conversation-id": "chat_0123"}}, 400, "chat_conversation_invalid", "not one"),
        ({"json": {"message": "hi", "conversation_id": unknown}}, 404, "chat_conversation_not_found", "is unknown here"),
        ({"json": {"message": "hi", "conversation_id": unknown}, "headers": {"x-conversation-id": "conv_" + "B" * 32}},
         400, "chat_conversation_invalid", "name different conversations"),
    ]
    async with await open_chat_agent(adapter=model, data_dir=tmp_path, memory=False) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        for path in ("/chat", "/chat/stream", "/reset"):
            for kwargs, status, code, words in cases:
                r = await client.post(path, **kwargs)
                assert r.status_code == status, (path, kwargs, r.text)
                err = r.json()["error"]
                assert err["code"] == code and words in err["message"], (path, err)
                assert "x" * 100 not in err["message"]  # a huge id is not echoed back
        assert model.calls == [] and (await client.get("/health")).json()["conversations"] == 0
        r = await client.post("/chat", json={"message": "hi"})
        assert r.status_code == 200 and r.json()["text"] == "ok"


async def test_a_slow_turn_of_one_conversation_does_not_hold_up_another(tmp_path: Path) -> None:
    """Conversation A's model reply waits until conversation B's whole turn has come back over HTTP: with turns
    serialized across conversations, B would wait for A and neither would finish (the bound fails the test)."""
    a_in_model, b_answered = anyio.Event(), anyio.Event()

    async def reply(messages: list[Any], tools: list[Any]) -> str:
        if messages[-1].content == "A: slow one":
            a_in_model.set()
            with anyio.fail_after(30):  # never forever, even when the turns are serialized
                await b_answered.wait()
            return "A answered"
        return "B answered"

    model = ScriptedAdapter([reply, reply])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        answers: dict[str, httpx.Response] = {}

        async def ask(key: str, message: str) -> None:
            answers[key] = await client.post("/chat", json={"message": message})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "A", "A: slow one")
                with anyio.fail_after(20):
                    await a_in_model.wait()  # A's turn is inside its model call
                with anyio.fail_after(20):
                    await ask("B", "B: quick one")  # another client, another conversation: answered meanwhile
                b_answered.set()
        finally:
            b_answered.set()
        assert answers["B"].status_code == 200 and answers["B"].json()["text"] == "B answered"
        assert answers["A"].status_code == 200 and answers["A"].json()["text"] == "A answered"
        assert answers["A"].headers["x-conversation-id"] != answers["B"].headers["x-conversation-id"]


async def test_turns_of_one_conversation_take_turns_in_arrival_order(tmp_path: Path) -> None:
    release = anyio.Event()
    seen: dict[str, list[str]] = {}

    async def reply(messages: list[Any], tools: list[Any]) -> str:
        said = messages[-1].content
        seen[said] = [m.content for m in messages[1:-1]]  # the history this turn was shown
        if said == "one":
            with anyio.fail_after(30):
                await release.wait()
        return f"re {said}"

    model = ScriptedAdapter(["first", reply, reply, reply])
    async with await open_chat_agent(adapter=model, data_dir=tmp_path) as agent, \
            served(agent) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        conv = (await client.post("/chat", json={"message": "hello"})).headers["x-conversation-id"]
        held = agent._conversations.get(conv)
        answers: dict[str, str] = {}

        async def ask(message: str) -> None:
            r = await client.post("/chat", json={"message": message, "conversation_id": conv})
            answers[message] = r.json()["text"]

        async def queued(n: int) -> None:  # a bounded wait on the conversation's count of waiting turns
            with anyio.fail_after(20):
                while held.busy < n:
                    await anyio.sleep(0.01)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "one")
                await queued(1)
                tg.start_soon(ask, "two")
                await queued(2)
                tg.start_soon(ask, "three")
                await queued(3)
                assert "two" not in seen and "three" not in seen  # queued behind "one", not at the model
                release.set()
        finally:
            release.set()
    assert answers == {"one": "re one", "two": "re two", "three": "re three"}
    assert seen["two"] == ["hello", "first", "one", "re one"]  # ran after "one" was answered and remembered
    assert seen["three"] == ["hello", "first", "one", "re one", "two", "re two"]
