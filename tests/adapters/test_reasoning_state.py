"""Reasoning models across tool turns, against fakes that refuse what the real providers refuse (``_strict.py``).

Each provider's opaque state (Anthropic thinking blocks, Gemini thought signatures, Responses reasoning
items, DeepSeek/Kimi ``reasoning_content``) must come back to it unchanged on the next turn, also after the
conversation went through JSON (a run record, a restart mid-tool-turn).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from openfunctions.adapters import (
    AnthropicAdapter,
    BadRequest,
    ChatOptions,
    DeepSeekAdapter,
    GeminiAdapter,
    KimiAdapter,
    Message,
    ModelProviderUnavailable,
    OpenAIAdapter,
    OpenAIResponsesAdapter,
    ProviderPart,
    RetryPolicy,
    ToolCall,
)
from openfunctions.core import define_tool

from . import _strict
from ._wire import Reply, sse

pytestmark = pytest.mark.anyio

WEATHER = define_tool(
    name="weather", description="Weather in a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    handler=lambda p, c: "sunny",
)
CONVO = [Message.system("be brief"), Message.user("weather in Paris and Rome?")]
ONE = RetryPolicy(max_attempts=1)


def _json_round_trip(messages: list[Message]) -> list[Message]:
    """What a run record holds and a restarted process reads back."""
    return [Message.from_dict(d) for d in json.loads(json.dumps([m.to_dict() for m in messages]))]


async def _tool_turn(adapter: Any, wire: Any, first: Reply, final: Reply, *, stream: bool = False,
                     restart: bool = False) -> tuple[list[Message], Any, list[Any]]:
    """Ask, answer each call, ask again; returns the conversation sent second, the final reply, the first's events."""
    wire.replies += [first, final]
    events: list[Any] = []
    if stream:
        events = [e async for e in adapter.stream(CONVO, [WEATHER])]
        reply = events[-1].reply
    else:
        reply = await adapter.chat(CONVO, [WEATHER])
    convo = [*CONVO, reply.as_message(), *(Message.tool_result(c, f"sunny in {c.arguments['city']}") for c in reply.tool_calls)]
    if restart:
        convo = _json_round_trip(convo)
    return convo, await adapter.chat(convo, [WEATHER]), events


# -- OpenAI Chat Completions: reasoning models ---------------------------------------------------------------------
def _chat_text(text: str, **message: Any) -> dict:
    return {"model": "o4-mini-2025-04-16", "choices": [{"index": 0, "message": {"role": "assistant", "content": text, **message},
            "finish_reason": "stop"}], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}


@pytest.mark.parametrize("model", ["o4-mini", "o3", "gpt-5", "gpt-5-mini", "openai/gpt-5.1"])
async def test_openai_reasoning_model_gets_max_completion_tokens_and_no_sampling_params(wire: Any, model: str) -> None:
    wire.check = _strict.openai_reasoning
    wire.replies.append(Reply(body=_chat_text("4")))
    a = OpenAIAdapter(model=model, api_key="k", base_url=wire.url, retry=ONE)
    opts = ChatOptions(max_tokens=2000, temperature=0.2, stop=("END",), reasoning_effort="low")
    assert (await a.chat([Message.user("2+2?")], options=opts)).text == "4"
    body = wire.requests[0]["json"]
    assert body["max_completion_tokens"] == 2000 and body["reasoning_effort"] == "low"
    assert not {"max_tokens", "temperature", "stop"} & body.keys()
    await a.aclose()


async def test_the_strict_reasoning_fake_refuses_max_tokens(wire: Any) -> None:
    wire.check = _strict.openai_reasoning  # what the adapter used to send to every model
    a = OpenAIAdapter(model="my-tuned-model", api_key="k", base_url=wire.url, retry=ONE)
    with pytest.raises(BadRequest) as info:
        await a.chat([Message.user("2+2?")])
    assert "max_completion_tokens" in info.value.message
    await a.aclose()


async def test_reasoning_override_for_a_name_the_rule_does_not_know(wire: Any) -> None:
    wire.check = _strict.openai_reasoning
    wire.replies.append(Reply(body=_chat_text("4")))
    a = OpenAIAdapter(model="my-tuned-model", api_key="k", base_url=wire.url, retry=ONE, reasoning=True)
    assert (await a.chat([Message.user("2+2?")], options=ChatOptions(temperature=0.5))).text == "4"
    await a.aclose()


@pytest.mark.parametrize("model,reasoning", [("gpt-4o-mini", None), ("gpt-5-chat-latest", None), ("o3", False)])
async def test_other_models_keep_max_tokens_and_temperature(wire: Any, model: str, reasoning: bool | None) -> None:
    wire.replies.append(Reply(body=_chat_text("4")))
    a = OpenAIAdapter(model=model, api_key="k", base_url=wire.url, retry=ONE, reasoning=reasoning)
    await a.chat([Message.user("2+2?")], options=ChatOptions(max_tokens=300, temperature=0.2, stop=("END",)))
    body = wire.requests[0]["json"]
    assert body["max_tokens"] == 300 and body["temperature"] == 0.2 and body["stop"] == ["END"]
    assert "max_completion_tokens" not in body and "reasoning_effort" not in body
    await a.aclose()


# -- Gemini: thought signatures ------------------------------------------------------------------------------------
def _gem(parts: list[dict], finish: str = "STOP") -> dict:
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}, "modelVersion": "gemini-3-test"}


GEM_CALLS = [{"text": "thinking about it", "thought": True},
             {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLXBhcmlz"},
             {"functionCall": {"name": "weather", "args": {"city": "Rome"}}}]  # parallel calls: only the first is signed


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
async def test_gemini_function_call_signature_goes_back_exactly(wire: Any, stream: bool, restart: bool) -> None:
    wire.check = _strict.gemini3
    first = Reply(sse=sse(_gem(GEM_CALLS))) if stream else Reply(body=_gem(GEM_CALLS))
    a = GeminiAdapter(model="gemini-3-test", api_key="k", base_url=wire.url, retry=ONE)
    convo, final, _ = await _tool_turn(a, wire, first, Reply(body=_gem([{"text": "Both sunny."}])), stream=stream, restart=restart)
    assert final.text == "Both sunny."
    reply = convo[2]
    assert reply.content == "" and [c.arguments["city"] for c in reply.tool_calls] == ["Paris", "Rome"]
    model_turn = wire.requests[1]["json"]["contents"][1]
    assert model_turn["role"] == "model"
    assert [p for p in model_turn["parts"] if "functionCall" in p] == GEM_CALLS[1:]  # signature on its part, as issued
    await a.aclose()


async def test_gemini_signed_text_parts_are_replayed_and_thoughts_stay_out_of_the_text(wire: Any) -> None:
    wire.check = _strict.gemini
    parts = [{"text": "secret plan", "thought": True}, {"text": "Checking "}, {"text": "Paris.", "thoughtSignature": "dGV4dA=="},
             {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "Zm4="}]
    a = GeminiAdapter(model="gemini-3-test", api_key="k", base_url=wire.url, retry=ONE)
    convo, final, _ = await _tool_turn(a, wire, Reply(body=_gem(parts)), Reply(body=_gem([{"text": "Sunny."}])), restart=True)
    assert convo[2].content == "Checking Paris."  # the thought part is not visible text
    assert wire.requests[1]["json"]["contents"][1]["parts"] == parts
    await a.aclose()


async def test_gemini_call_ids_go_back_on_the_call_and_its_response(wire: Any) -> None:
    parts = [{"functionCall": {"id": "fc-9", "name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "aWQ="}]
    a = GeminiAdapter(model="gemini-3-test", api_key="k", base_url=wire.url, retry=ONE)
    wire.check = _strict.gemini
    convo, _, _ = await _tool_turn(a, wire, Reply(body=_gem(parts)), Reply(body=_gem([{"text": "Sunny."}])), restart=True)
    assert convo[2].tool_calls[0].id == "fc-9"
    assert wire.requests[1]["json"]["contents"][1:] == [
        {"role": "model", "parts": parts},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc-9", "name": "weather", "response": {"result": "sunny in Paris"}}}]}]
    await a.aclose()


@pytest.mark.parametrize("model,signed", [("gemini-3-pro-preview", True), ("gemini-3.1-flash", True),
                                          ("models/gemini-4-argon", True), ("gemini-2.5-flash", False)])
async def test_a_turn_from_elsewhere_gets_the_placeholder_on_gemini_3(wire: Any, model: str, signed: bool) -> None:
    if signed:
        wire.check = _strict.gemini3
    foreign = Message.assistant("", [ToolCall("toolu_1", "weather", {"city": "Paris"}), ToolCall("toolu_2", "weather", {"city": "Rome"})],
                                [ProviderPart("anthropic", THINKING)])
    wire.replies.append(Reply(body=_gem([{"text": "Sunny."}])))
    a = GeminiAdapter(model=model, api_key="k", base_url=wire.url, retry=ONE)
    convo = [*CONVO, foreign, *(Message.tool_result(c, "sunny") for c in foreign.tool_calls)]
    assert (await a.chat(convo, [WEATHER])).text == "Sunny."
    first, second = wire.requests[0]["json"]["contents"][1]["parts"]
    assert first.get("thoughtSignature") == ("skip_thought_signature_validator" if signed else None)
    assert "thoughtSignature" not in second  # parallel calls: the first one only
    await a.aclose()


async def test_the_strict_gemini3_fake_refuses_an_unsigned_call(wire: Any) -> None:
    wire.check = _strict.gemini3
    a = GeminiAdapter(model="gemini-2.5-flash", api_key="k", base_url=wire.url, retry=ONE)  # no placeholder for 2.x
    call = ToolCall("c", "weather", {"city": "Paris"})
    with pytest.raises(BadRequest, match="missing a thought_signature"):
        await a.chat([*CONVO, Message.assistant("", [call]), Message.tool_result(call, "sunny")], [WEATHER])
    await a.aclose()


async def test_the_strict_gemini_fake_refuses_a_call_without_its_signature(wire: Any) -> None:
    wire.check = _strict.gemini
    wire.replies.append(Reply(body=_gem(GEM_CALLS)))
    # a 2.x name: no placeholder is added, so the dropped signature reaches the fake as the old adapter sent it
    a = GeminiAdapter(model="gemini-2.5-flash", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    stripped = Message.assistant("", [ToolCall(c.id, c.name, c.arguments) for c in reply.tool_calls])  # what was kept before
    with pytest.raises(BadRequest) as info:
        await a.chat([*CONVO, stripped, *(Message.tool_result(c, "sunny") for c in reply.tool_calls)], [WEATHER])
    assert "thought_signature" in info.value.message
    await a.aclose()


# -- Anthropic: thinking blocks ------------------------------------------------------------------------------------
THINKING = {"type": "thinking", "thinking": "Two cities: call weather twice.", "signature": "EqQBCkYIARgCKkB=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlx"}


def _anth(blocks: list[dict], stop: str = "tool_use") -> dict:
    return {"model": "claude-test-1", "content": blocks, "stop_reason": stop, "usage": {"input_tokens": 20, "output_tokens": 9}}


ANTH_CALL = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}


def _anth_stream() -> list[str]:
    return sse(("message_start", {"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 5}}}),
               ("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "thinking", "thinking": ""}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "thinking_delta", "thinking": "Two cities: "}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "thinking_delta", "thinking": "call weather twice."}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "signature_delta", "signature": "EqQBCkYIARgCKkB=="}}),
               ("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": REDACTED}),
               ("content_block_stop", {"type": "content_block_stop", "index": 1}),
               ("content_block_start", {"type": "content_block_start", "index": 2,
                                        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}}),
               ("content_block_delta", {"type": "content_block_delta", "index": 2,
                                        "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Paris\"}"}}),
               ("content_block_stop", {"type": "content_block_stop", "index": 2}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
               ("message_stop", {"type": "message_stop"}), named=True)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
async def test_anthropic_thinking_blocks_come_back_before_the_tool_use(wire: Any, stream: bool, restart: bool) -> None:
    wire.check = _strict.anthropic
    first = Reply(sse=_anth_stream()) if stream else Reply(body=_anth([THINKING, REDACTED, ANTH_CALL]))
    a = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url, retry=ONE)
    convo, final, _ = await _tool_turn(a, wire, first, Reply(body=_anth([{"type": "text", "text": "Sunny."}], "end_turn")),
                                    stream=stream, restart=restart)
    assert final.text == "Sunny." and convo[2].content == ""  # thinking is not visible text
    sent = wire.requests[1]["json"]
    assert sent["messages"][1] == {"role": "assistant", "content": [THINKING, REDACTED, ANTH_CALL]}
    await a.aclose()


async def test_thinking_budget_turns_thinking_on(wire: Any) -> None:
    wire.replies.append(Reply(body=_anth([{"type": "text", "text": "ok"}], "end_turn")))
    a = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url, retry=ONE)
    await a.chat(CONVO, options=ChatOptions(max_tokens=4000, thinking_budget=2048))
    assert wire.requests[0]["json"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    await a.aclose()


@pytest.mark.parametrize("change", ["dropped", "altered"])
async def test_the_strict_anthropic_fake_refuses_dropped_or_altered_thinking(wire: Any, change: str) -> None:
    wire.check = _strict.anthropic
    wire.replies.append(Reply(body=_anth([THINKING, ANTH_CALL])))
    a = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    parts = () if change == "dropped" else (ProviderPart("anthropic", {**THINKING, "thinking": "edited"}),)
    turn = Message.assistant("", reply.tool_calls, parts)
    with pytest.raises(BadRequest) as info:
        await a.chat([*CONVO, turn, Message.tool_result(reply.tool_calls[0], "sunny")], [WEATHER])
    assert ("must start with a thinking block" if change == "dropped" else "Invalid `signature`") in info.value.message
    await a.aclose()


# -- OpenAI Responses: reasoning items ----------------------------------------------------------------------------
RS = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABo-opaque"}
FC = [{"type": "function_call", "id": "fc_1", "call_id": "call_p", "name": "weather", "arguments": "{\"city\": \"Paris\"}",
       "status": "completed"},
      {"type": "function_call", "id": "fc_2", "call_id": "call_r", "name": "weather", "arguments": "{\"city\": \"Rome\"}",
       "status": "completed"}]
MSG = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
       "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}]}


def _resp(output: list[dict], status: str = "completed", **extra: Any) -> dict:
    return {"id": "resp_x", "model": "gpt-5-mini-2025-08-07", "status": status, "output": output,
            "usage": {"input_tokens": 30, "output_tokens": 12}, **extra}


def _resp_stream(body: dict) -> list[str]:
    events: list[tuple[str, dict]] = []
    for item in body["output"]:
        if item["type"] == "message":
            for c in item["content"]:
                events.append(("response.output_text.delta", {"type": "response.output_text.delta", "delta": c["text"]}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": body}))
    return sse(*events, named=True)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
async def test_responses_reasoning_items_come_back_before_their_calls(wire: Any, stream: bool, restart: bool) -> None:
    wire.check = _strict.responses
    body = _resp([RS, MSG, *FC])
    first = Reply(sse=_resp_stream(body)) if stream else Reply(body=body)
    final = Reply(body=_resp([{"type": "message", "id": "msg_2", "role": "assistant",
                               "content": [{"type": "output_text", "text": "Both sunny."}]}]))
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    convo, reply, _ = await _tool_turn(a, wire, first, final, stream=stream, restart=restart)
    assert reply.text == "Both sunny." and convo[2].content == "Checking both."
    assert [c.id for c in convo[2].tool_calls] == ["call_p", "call_r"]
    sent = wire.requests[1]["json"]
    assert sent["input"][1:] == [
        RS, MSG,
        {"type": "function_call", "call_id": "call_p", "name": "weather", "arguments": "{\"city\": \"Paris\"}", "id": "fc_1"},
        {"type": "function_call", "call_id": "call_r", "name": "weather", "arguments": "{\"city\": \"Rome\"}", "id": "fc_2"},
        {"type": "function_call_output", "call_id": "call_p", "output": "sunny in Paris"},
        {"type": "function_call_output", "call_id": "call_r", "output": "sunny in Rome"}]
    assert not {"max_tokens", "temperature"} & sent.keys() and sent["max_output_tokens"] == 1024
    await a.aclose()


async def test_the_strict_responses_fake_refuses_a_call_without_its_reasoning(wire: Any) -> None:
    wire.check = _strict.responses
    wire.replies.append(Reply(body=_resp([RS, *FC[:1]])))
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    turn = Message.assistant("", reply.tool_calls)  # reasoning items dropped
    with pytest.raises(BadRequest) as info:
        await a.chat([*CONVO, turn, Message.tool_result(reply.tool_calls[0], "sunny")], [WEATHER])
    assert "without its required 'reasoning' item: 'rs_1'" in info.value.message
    await a.aclose()


async def test_responses_options_and_stop_reasons(wire: Any) -> None:
    wire.replies += [Reply(body=_resp([MSG], "incomplete", incomplete_details={"reason": "max_output_tokens"})),
                     Reply(body=_resp([MSG]))]
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    r = await a.chat(CONVO, [WEATHER], ChatOptions(reasoning_effort="minimal", temperature=0.3, tool_choice="required"))
    assert r.stop_reason == "max_tokens" and r.raw_stop_reason == "max_output_tokens" and r.text == "Checking both."
    body = wire.requests[0]["json"]
    assert body["reasoning"] == {"effort": "minimal"} and body["tool_choice"] == "required" and "temperature" not in body
    b = OpenAIResponsesAdapter(model="gpt-4.1", api_key="k", base_url=wire.url, retry=ONE)
    await b.chat(CONVO, options=ChatOptions(temperature=0.3))
    assert wire.requests[1]["json"]["temperature"] == 0.3  # not a reasoning model
    await a.aclose()
    await b.aclose()


async def test_responses_refusal_is_the_text_with_a_content_filter_stop(wire: Any) -> None:
    wire.replies.append(Reply(body=_resp([RS, {"type": "message", "id": "msg_r", "role": "assistant",
                                               "content": [{"type": "refusal", "refusal": "I can't help with that."}]}])))
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    r = await a.chat(CONVO)
    assert r.text == "I can't help with that." and r.stop_reason == "content_filter"
    await a.aclose()


async def test_anthropic_thinking_leaves_temperature_out(wire: Any) -> None:
    wire.replies += [Reply(body=_anth([{"type": "text", "text": "ok"}], "end_turn"))] * 2
    a = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url, retry=ONE)
    await a.chat(CONVO, options=ChatOptions(temperature=0.2, thinking_budget=1024))
    await a.chat(CONVO, options=ChatOptions(temperature=0.2))
    assert "temperature" not in wire.requests[0]["json"] and wire.requests[1]["json"]["temperature"] == 0.2
    await a.aclose()


@pytest.mark.parametrize("event", [
    ("error", {"type": "error", "code": "server_error", "message": "boom"}),
    ("response.failed", {"type": "response.failed", "response": _resp([], "failed", error={"code": "server_error", "message": "boom"})}),
])
async def test_responses_stream_failure_is_reported(wire: Any, event: tuple[str, dict]) -> None:
    wire.replies.append(Reply(sse=sse(("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
                                      event, named=True)))
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    seen = []
    with pytest.raises(ModelProviderUnavailable) as info:
        async for e in a.stream(CONVO):
            seen.append(e.text)
    assert "boom" in info.value.message and seen == ["Hi"] and len(wire.requests) == 1
    await a.aclose()


async def test_responses_changed_text_is_sent_as_text_not_as_the_old_message_item(wire: Any) -> None:
    wire.check = _strict.responses
    wire.replies += [Reply(body=_resp([RS, MSG, *FC[:1]])), Reply(body=_resp([MSG]))]
    a = OpenAIResponsesAdapter(model="gpt-5-mini", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    turn = Message.assistant("Edited.", reply.tool_calls, reply.parts)
    await a.chat([*CONVO, turn, Message.tool_result(reply.tool_calls[0], "sunny")], [WEATHER])
    items = wire.requests[1]["json"]["input"]
    assert items[1] == RS and items[2] == {"role": "assistant", "content": "Edited."} and items[3]["type"] == "function_call"
    await a.aclose()


# -- DeepSeek and Kimi: reasoning_content ----------------------------------------------------------------------------
def _ds_tool() -> dict:
    return {"model": "deepseek-test", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "", "reasoning_content": "Need the weather tool.",
        "tool_calls": [{"id": "call_d", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 9}}


def _ds_tool_stream() -> list[str]:
    return sse({"choices": [{"index": 0, "delta": {"reasoning_content": "Need the "}}]},
               {"choices": [{"index": 0, "delta": {"reasoning_content": "weather tool."}}]},
               {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_d",
                             "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                             "finish_reason": "tool_calls"}]}, "[DONE]")


@pytest.mark.parametrize("cls", [DeepSeekAdapter, KimiAdapter])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("restart", [False, True])
async def test_reasoning_content_goes_back_on_tool_call_turns_only(wire: Any, cls: type, stream: bool, restart: bool) -> None:
    wire.check = _strict.deepseek
    first = Reply(sse=_ds_tool_stream()) if stream else Reply(body=_ds_tool())
    a = cls(model="deepseek-test", api_key="k", base_url=wire.url, retry=ONE)
    convo, final, events = await _tool_turn(a, wire, first, Reply(body=_chat_text("Sunny.", reasoning_content="Easy.")),
                                            stream=stream, restart=restart)
    assert [e for e in events if e.type == "text"] == []  # thinking is never streamed as text
    assert convo[2].content == "" and final.text == "Sunny." and "Easy." not in final.text
    assert wire.requests[-1]["json"]["messages"][2]["reasoning_content"] == "Need the weather tool."
    # the next user turn: the text-only turn's reasoning stays behind, the tool-call turn's goes along
    later = [*convo, final.as_message(), Message.user("and tomorrow?")]
    wire.replies.append(Reply(body=_chat_text("Also sunny.")))
    assert (await a.chat(_json_round_trip(later) if restart else later, [WEATHER])).text == "Also sunny."
    sent = wire.requests[-1]["json"]["messages"]
    assert sent[2]["reasoning_content"] == "Need the weather tool." and sent[4] == {"role": "assistant", "content": "Sunny."}
    await a.aclose()


async def test_the_strict_deepseek_fake_refuses_a_tool_turn_without_its_reasoning(wire: Any) -> None:
    wire.check = _strict.deepseek
    wire.replies.append(Reply(body=_ds_tool()))
    a = DeepSeekAdapter(model="deepseek-test", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    with pytest.raises(BadRequest) as info:
        await a.chat([*CONVO, Message.assistant("", reply.tool_calls), Message.tool_result(reply.tool_calls[0], "x")], [WEATHER])
    assert "must be passed back" in info.value.message
    await a.aclose()


async def test_openai_never_sends_reasoning_content_back(wire: Any) -> None:
    wire.replies += [Reply(body=_ds_tool()), Reply(body=_chat_text("ok"))]
    a = OpenAIAdapter(model="gpt-4o-mini", api_key="k", base_url=wire.url, retry=ONE)
    reply = await a.chat(CONVO, [WEATHER])
    assert reply.parts[0].provider == "openai" and reply.text == ""
    await a.chat([*CONVO, reply.as_message(), Message.tool_result(reply.tool_calls[0], "x")], [WEATHER])
    assert "reasoning_content" not in wire.requests[1]["json"]["messages"][2]
    await a.aclose()


# -- the types: JSON and provenance --------------------------------------------------------------------------------------
def test_messages_round_trip_through_json_with_their_provider_state() -> None:
    call = ToolCall("c1", "weather", {"city": "Paris"}, {"gemini": {"thoughtSignature": "c2ln"}})
    msgs = [Message.system("s"), Message.user("u"),
            Message.assistant("t", [call], [ProviderPart("anthropic", THINKING), ProviderPart("openai-responses", RS)]),
            Message.tool_result(call, "sunny", is_error=True)]
    assert _json_round_trip(msgs) == msgs
    assert Message.from_dict({"role": "user", "content": "hi"}) == Message.user("hi")  # older records: no new keys
    assert "parts" not in Message.user("hi").to_dict() and "provider_data" not in ToolCall("a", "b").to_dict()


@pytest.mark.parametrize("raw", [{"role": "robot"}, {"role": "user", "content": 3}, {"role": "assistant", "tool_calls": [{}]},
                                 {"role": "assistant", "parts": [{"provider": "x", "data": "not an object"}]}, "text"])
def test_a_bad_message_record_is_a_value_error(raw: Any) -> None:
    with pytest.raises(ValueError) as info:
        Message.from_dict(raw)
    assert str(info.value)


async def test_one_providers_state_is_never_sent_to_another(wire: Any) -> None:
    foreign = Message.assistant("", [ToolCall("toolu_1", "weather", {"city": "Paris"}, {"gemini": {"thoughtSignature": "c2ln"}})],
                                [ProviderPart("gemini", {"text": "", "thoughtSignature": "dA=="}), ProviderPart("deepseek", {"reasoning_content": "r"})])
    wire.replies += [Reply(body=_anth([{"type": "text", "text": "ok"}], "end_turn")), Reply(body=_chat_text("ok"))]
    a = AnthropicAdapter(model="claude-test-1", api_key="k", base_url=wire.url, retry=ONE)
    k = KimiAdapter(model="kimi-test", api_key="k", base_url=wire.url, retry=ONE)
    convo = [*CONVO, foreign, Message.tool_result(foreign.tool_calls[0], "sunny")]
    await a.chat(convo, [WEATHER])
    await k.chat(convo, [WEATHER])
    assert wire.requests[0]["json"]["messages"][1]["content"] == [ANTH_CALL]
    assert "reasoning_content" not in wire.requests[1]["json"]["messages"][2]  # DeepSeek's thinking is not Kimi's
    await a.aclose()
    await k.aclose()
