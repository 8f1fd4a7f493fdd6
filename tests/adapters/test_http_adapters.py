"""Each provider adapter against a local server speaking that provider's wire format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from openfunctions.adapters import (
    AdapterTimeout,
    AnthropicAdapter,
    AuthenticationFailed,
    BadRequest,
    ChatOptions,
    DeepSeekAdapter,
    GeminiAdapter,
    KimiAdapter,
    MalformedResponse,
    Message,
    ModelProviderUnavailable,
    OpenAIAdapter,
    OpenAIResponsesAdapter,
    OpenRouterAdapter,
    RateLimited,
    RetryPolicy,
    XAIAdapter,
)
from openfunctions.core import define_tool

from ._wire import Reply, sse

pytestmark = pytest.mark.anyio

WEATHER = define_tool(
    name="weather", description="Weather in a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    handler=lambda p, c: "sunny",
)
CONVO = [Message.system("be brief"), Message.user("weather in Paris?")]


@dataclass
class Wire:
    name: str
    cls: type
    text_body: Callable[[str], Any]
    tool_body: Callable[[], Any]
    text_stream: Callable[[], list[str]]
    tool_stream: Callable[[], list[str]]
    path: str
    check_request: Callable[[dict], None]
    followup: Callable[[dict], Any] = lambda body: None  # the tool result as the provider's wire format carries it


def _openai_text(text: str) -> dict:
    return {"id": "c1", "model": "gpt-test-0001", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}


def _openai_tool() -> dict:
    return {"model": "gpt-test-0001", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}


def _openai_text_stream() -> list[str]:
    return sse({"model": "gpt-test-0001", "choices": [{"index": 0, "delta": {"content": "Sun"}}]},
               {"model": "gpt-test-0001", "choices": [{"index": 0, "delta": {"content": "ny"}, "finish_reason": "stop"}]},
               {"model": "gpt-test-0001", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}, "[DONE]")


def _openai_tool_stream() -> list[str]:
    return sse(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "weather", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}, "finish_reason": "tool_calls"}]},
        "[DONE]")


def _openai_check(req: dict) -> None:
    body = req["json"]
    assert req["headers"]["authorization"] == "Bearer k-test"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["tools"][0]["function"]["name"] == "weather"


def _anth_text(text: str) -> dict:
    return {"id": "m1", "type": "message", "role": "assistant", "model": "claude-test-1",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": {"input_tokens": 11, "output_tokens": 3}}


def _anth_tool() -> dict:
    return {"model": "claude-test-1", "content": [{"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_a", "name": "weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 20, "output_tokens": 9}}


def _anth_text_stream() -> list[str]:
    return sse(("message_start", {"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 5}}}),
               ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
               ("ping", {"type": "ping"}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Sun"}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ny"}}),
               ("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
               ("message_stop", {"type": "message_stop"}), named=True)


def _anth_tool_stream() -> list[str]:
    return sse(("message_start", {"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 5}}}),
               ("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "tool_use", "id": "call_a", "name": "weather", "input": {}}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\": "}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}}),
               ("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
               ("message_stop", {"type": "message_stop"}), named=True)


def _anth_check(req: dict) -> None:
    body = req["json"]
    assert req["headers"]["x-api-key"] == "k-test" and req["headers"]["anthropic-version"] == "2023-06-01"
    assert body["system"] == "be brief" and body["messages"][0]["role"] == "user"
    assert body["tools"][0]["input_schema"]["required"] == ["city"]


def _gem_text(text: str) -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 3}, "modelVersion": "gemini-test-001"}


def _gem_tool() -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
            "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 9}, "modelVersion": "gemini-test-001"}


def _gem_text_stream() -> list[str]:
    return sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "Sun"}]}}], "modelVersion": "gemini-test-001"},
               {"candidates": [{"content": {"role": "model", "parts": [{"text": "ny"}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}, "modelVersion": "gemini-test-001"})


def _gem_tool_stream() -> list[str]:
    return sse({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
                "finishReason": "STOP"}], "modelVersion": "gemini-test-001"})


def _gem_check(req: dict) -> None:
    body = req["json"]
    assert req["headers"]["x-goog-api-key"] == "k-test"
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "weather"


def _resp_text(text: str) -> dict:
    return {"id": "resp_1", "model": "gpt-test-0001", "status": "completed", "output": [
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "usage": {"input_tokens": 11, "output_tokens": 3}}


def _resp_tool() -> dict:
    return {"id": "resp_2", "model": "gpt-test-0001", "status": "completed", "output": [
        {"type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "weather", "arguments": "{\"city\": \"Paris\"}",
         "status": "completed"}], "usage": {"input_tokens": 20, "output_tokens": 9}}


def _resp_done(body: dict) -> tuple[str, dict]:
    return ("response.completed", {"type": "response.completed", "response": body})


def _resp_text_stream() -> list[str]:
    final = _resp_text("Sunny")
    final["usage"] = {"input_tokens": 5, "output_tokens": 2}
    return sse(("response.created", {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
               ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Sun"}),
               ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "ny"}),
               ("response.output_item.done", {"type": "response.output_item.done", "item": final["output"][0]}),
               _resp_done(final), named=True)


def _resp_tool_stream() -> list[str]:
    final = _resp_tool()
    return sse(("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta", "delta": "{"}),
               ("response.output_item.done", {"type": "response.output_item.done", "item": final["output"][0]}),
               _resp_done(final), named=True)


def _resp_check(req: dict) -> None:
    body = req["json"]
    assert req["headers"]["authorization"] == "Bearer k-test"
    assert body["instructions"] == "be brief" and body["input"][0] == {"role": "user", "content": "weather in Paris?"}
    assert body["tools"][0]["name"] == "weather" and body["tools"][0]["type"] == "function"
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["max_output_tokens"] == 1024


_OPENAI = dict(text_body=_openai_text, tool_body=_openai_tool, text_stream=_openai_text_stream, tool_stream=_openai_tool_stream,
               path="/chat/completions", check_request=_openai_check,
               followup=lambda b: b["messages"][-2:])
WIRES = [
    Wire("openai", OpenAIAdapter, **_OPENAI),
    Wire("xai", XAIAdapter, **_OPENAI),
    Wire("openrouter", OpenRouterAdapter, **_OPENAI),
    Wire("deepseek", DeepSeekAdapter, **_OPENAI),
    Wire("kimi", KimiAdapter, **_OPENAI),
    Wire("openai-responses", OpenAIResponsesAdapter, _resp_text, _resp_tool, _resp_text_stream, _resp_tool_stream,
         "/responses", _resp_check, lambda b: b["input"][-2:]),
    Wire("anthropic", AnthropicAdapter, _anth_text, _anth_tool, _anth_text_stream, _anth_tool_stream, "/v1/messages", _anth_check,
         lambda b: b["messages"][-2:]),
    Wire("gemini", GeminiAdapter, _gem_text, _gem_tool, _gem_text_stream, _gem_tool_stream,
         "/v1beta/models/m-test:generateContent", _gem_check, lambda b: b["contents"][-2:]),
]
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01)


def _adapter(w: Wire, wire: Any, **kw: Any) -> Any:
    a = w.cls(model="m-test", api_key="k-test", base_url=wire.url, retry=kw.pop("retry", FAST), **kw)
    a.waits = []

    async def record(seconds: float) -> None:
        a.waits.append(seconds)

    a.sleep = record
    return a


@pytest.fixture(params=WIRES, ids=[w.name for w in WIRES])
def w(request: Any) -> Wire:
    return request.param


async def test_plain_text_reply(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(body=w.text_body("Sunny, 21 C.")))
    a = _adapter(w, wire)
    reply = await a.chat(CONVO, [WEATHER])
    assert reply.kind == "text" and reply.text == "Sunny, 21 C."
    assert reply.stop_reason == "end_turn" and reply.provider == w.name
    assert reply.usage.input_tokens == 11 and reply.usage.output_tokens == 3
    assert reply.model.endswith(("0001", "-1", "001"))  # the model the provider named, not the requested one
    assert wire.requests[0]["path"] == w.path
    w.check_request(wire.requests[0])
    await a.aclose()


async def test_tool_call_reply_then_result_round_trip(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(body=w.tool_body()), Reply(body=w.text_body("It is sunny."))]
    a = _adapter(w, wire)
    reply = await a.chat(CONVO, [WEATHER])
    assert reply.kind == "tool_calls" and reply.stop_reason == "tool_use"
    (call,) = reply.tool_calls
    assert call.name == "weather" and call.arguments == {"city": "Paris"} and call.id
    convo = [*CONVO, reply.as_message(), Message.tool_result(call, "sunny")]
    final = await a.chat(convo, [WEATHER])
    assert final.text == "It is sunny."
    expected = {
        "anthropic": [
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                              {"type": "tool_use", "id": "call_a", "name": "weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_a", "content": "sunny", "is_error": False}]}],
        "gemini": [
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"result": "sunny"}}}]}],
        "openai-responses": [
            {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": '{"city": "Paris"}', "id": "fc_a"},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"}],
    }.get(w.name, [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}])
    assert w.followup(wire.requests[1]["json"]) == expected  # the call and its result, in the provider's own shape
    await a.aclose()


async def test_streamed_text(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(sse=w.text_stream()))
    a = _adapter(w, wire)
    events = [e async for e in a.stream(CONVO, [WEATHER])]
    assert [e.text for e in events if e.type == "text"] == ["Sun", "ny"]
    assert events[-1].type == "done" and events[-1].reply.text == "Sunny"
    assert events[-1].reply.usage.output_tokens == 2
    await a.aclose()


async def test_streamed_tool_call(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(sse=w.tool_stream()))
    a = _adapter(w, wire)
    events = [e async for e in a.stream(CONVO, [WEATHER])]
    calls = [e.tool_call for e in events if e.type == "tool_call"]
    assert [(c.name, c.arguments) for c in calls] == [("weather", {"city": "Paris"})]
    assert events[-1].reply.stop_reason == "tool_use"
    await a.aclose()


@pytest.mark.parametrize("status,exc", [(400, BadRequest), (401, AuthenticationFailed), (403, AuthenticationFailed)])
async def test_client_errors_are_not_retried_and_quote_the_provider(w: Wire, wire: Any, status: int, exc: type) -> None:
    wire.replies.append(Reply(status, {"error": {"message": f"nope-{status}", "type": "x"}}))
    a = _adapter(w, wire)
    with pytest.raises(exc) as info:
        await a.chat(CONVO)
    assert f"nope-{status}" in info.value.message and info.value.details["status"] == status
    assert len(wire.requests) == 1
    await a.aclose()


async def test_429_is_retried_honouring_retry_after(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after": "2"}),
                     Reply(429, {"error": {"message": "slow down"}}, headers={"retry-after-ms": "1500"}),
                     Reply(body=w.text_body("ok"))]
    a = _adapter(w, wire)
    assert (await a.chat(CONVO)).text == "ok"
    assert a.waits == [2.0, 1.5] and len(wire.requests) == 3
    await a.aclose()


async def test_429_past_the_attempts_raises_rate_limited(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(429, {"error": {"message": "slow down"}})] * 3
    a = _adapter(w, wire)
    with pytest.raises(RateLimited):
        await a.chat(CONVO)
    assert len(wire.requests) == 3 and len(a.waits) == 2  # backoff without retry-after
    await a.aclose()


async def test_a_retry_after_longer_than_allowed_is_not_waited_for(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(429, {"error": {"message": "quota"}}, headers={"retry-after": "3600"}))
    a = _adapter(w, wire)
    with pytest.raises(RateLimited) as info:
        await a.chat(CONVO)
    assert "3600" in info.value.message and a.waits == [] and len(wire.requests) == 1
    await a.aclose()


async def test_500_then_success(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(500, "internal"), Reply(503, {"error": {"message": "overloaded"}}), Reply(body=w.text_body("ok"))]
    a = _adapter(w, wire)
    assert (await a.chat(CONVO)).text == "ok"
    assert len(wire.requests) == 3
    await a.aclose()


async def test_500_every_time_raises_unavailable(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(500, {"error": {"message": "boom"}})] * 3
    a = _adapter(w, wire)
    with pytest.raises(ModelProviderUnavailable) as info:
        await a.chat(CONVO)
    assert "boom" in info.value.message and info.value.details["status"] == 500
    await a.aclose()


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'{"unexpected": true}'])
async def test_malformed_json(w: Wire, wire: Any, body: bytes) -> None:
    wire.replies.append(Reply(body=body))
    a = _adapter(w, wire)
    with pytest.raises(MalformedResponse) as info:
        await a.chat(CONVO)
    assert w.name in info.value.message
    await a.aclose()


async def test_connection_cut_mid_stream_is_reported_not_replayed(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(sse=w.text_stream(), cut_after=1))
    a = _adapter(w, wire)
    seen = []
    with pytest.raises((ModelProviderUnavailable, MalformedResponse)) as info:
        async for e in a.stream(CONVO):
            seen.append(e)
    assert len(wire.requests) == 1  # never retried once events were delivered
    if isinstance(info.value, ModelProviderUnavailable):
        assert "cut" in info.value.message or "ended" in info.value.message
    await a.aclose()


async def test_stream_error_status_before_events_is_retried(w: Wire, wire: Any) -> None:
    wire.replies += [Reply(503, {"error": {"message": "busy"}}), Reply(sse=w.text_stream())]
    a = _adapter(w, wire)
    events = [e async for e in a.stream(CONVO)]
    assert events[-1].reply.text == "Sunny" and len(wire.requests) == 2
    await a.aclose()


async def test_timeout_reaches_the_http_call(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(hang=True))
    a = _adapter(w, wire)
    with pytest.raises(AdapterTimeout):
        await a.chat(CONVO, options=ChatOptions(timeout=0.3))
    await anyio.to_thread.run_sync(lambda: wire.client_gone.wait(10))
    assert wire.client_gone.is_set()
    await a.aclose()


async def test_cancellation_closes_the_connection(w: Wire, wire: Any) -> None:
    wire.replies.append(Reply(hang=True))
    a = _adapter(w, wire)
    async with anyio.create_task_group() as tg:
        async def call() -> None:
            await a.chat(CONVO)

        tg.start_soon(call)
        await anyio.to_thread.run_sync(lambda: wire.got_request.wait(10))
        tg.cancel_scope.cancel()
    await anyio.to_thread.run_sync(lambda: wire.client_gone.wait(10))
    assert wire.client_gone.is_set()  # the server saw the socket close: cancellation reached the HTTP call
    await a.aclose()
