"""One provider-neutral history replayed to every provider: pairing, order, ids and opaque blocks.

Each provider is held to its own refusals by the wire-format fakes (``_strict.py``: the pairing rules, and the
reasoning-state rules that read what the fake issued). A history that does not hold as it is (a restart
mid-tool-turn left calls without results, a user message arrived mid-turn, a window cut a call off, Gemini's
``call_0`` repeats across turns, a Kimi id Anthropic refuses) must still be accepted by each of them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from openfunctions.adapters import (
    NOT_RUN,
    AnthropicAdapter,
    ChatOptions,
    DeepSeekAdapter,
    GeminiAdapter,
    Message,
    OpenAIAdapter,
    OpenAIResponsesAdapter,
    ProviderPart,
    RetryPolicy,
    ToolCall,
    replay_history,
)
from openfunctions.adapters._sampling import sampling_messages

from . import _strict
from ._wire import Reply
from .test_reasoning_state import (
    ANTH_CALL,
    RS,
    THINKING,
    WEATHER,
    _anth,
    _chat_text,
    _gem,
    _json_round_trip,
    _resp,
)

pytestmark = pytest.mark.anyio
ONE = RetryPolicy(max_attempts=1)
PARIS = ToolCall("call_p", "weather", {"city": "Paris"})
ROME = ToolCall("call_r", "weather", {"city": "Rome"})


def _texts(messages: list[Message]) -> list[tuple[str, str | None, str]]:
    return [(m.role, m.tool_call_id, m.content) for m in messages]


# -- the neutral rules ---------------------------------------------------------------------------------------------
def test_a_call_without_a_result_gets_a_not_run_result_in_call_order() -> None:
    history = [Message.user("weather?"), Message.assistant("", [PARIS, ROME]), Message.tool_result(ROME, "rain")]
    out = replay_history(history, "openai")
    assert _texts(out)[1:] == [("assistant", None, ""), ("tool", "call_p", NOT_RUN), ("tool", "call_r", "rain")]
    assert out[2].is_error and not out[3].is_error and out[2].name == "weather"
    assert len(history) == 3  # the input is not changed


def test_a_result_after_a_mid_turn_user_message_moves_up_and_an_orphan_is_left_out() -> None:
    orphan = Message("tool", "from a cut-off turn", tool_call_id="gone", name="weather")
    history = [orphan, Message.user("weather?"), Message.assistant("", [PARIS]), Message.user("hurry"),
               Message.tool_result(PARIS, "sun")]
    assert _texts(replay_history(history, "anthropic")) == [
        ("user", None, "weather?"), ("assistant", None, ""), ("tool", "call_p", "sun"), ("user", None, "hurry")]


def test_repeated_ids_are_made_unique_and_unsafe_ids_hashed_the_same_way_every_time() -> None:
    c0a, c0b = ToolCall("call_0", "weather", {"city": "A"}), ToolCall("call_0", "weather", {"city": "B"})
    kimi = ToolCall("functions.weather:0", "weather", {"city": "C"})
    history = [Message.user("q"), Message.assistant("", [c0a]), Message.tool_result(c0a, "a"),
               Message.assistant("", [c0b]), Message.tool_result(c0b, "b"),
               Message.assistant("", [kimi]), Message.tool_result(kimi, "c")]
    out = replay_history(history, "anthropic", safe_ids=True)
    ids = [(m.tool_calls[0].id if m.tool_calls else m.tool_call_id) for m in out[1:]]
    assert ids[:4] == ["call_0", "call_0", "call_0_2", "call_0_2"]
    assert ids[4] == ids[5] and ids[4].startswith("call_") and len(ids[4]) == 29
    assert replay_history(history, "anthropic", safe_ids=True) == out  # deterministic: a prompt cache still hits
    assert replay_history(history, "openai")[5].tool_calls[0].id == "functions.weather:0"  # OpenAI takes it


def test_an_assistant_turn_with_only_another_providers_blocks_is_left_out() -> None:
    history = [Message.user("q"), Message.assistant("", parts=[ProviderPart("anthropic", THINKING)]), Message.user("again")]
    assert [m.role for m in replay_history(history, "gemini")] == ["user", "user"]
    assert [m.role for m in replay_history(history, "anthropic")] == ["user", "assistant", "user"]


def test_sampling_gets_the_same_pairing() -> None:
    _, msgs = sampling_messages([Message.user("q"), Message.assistant("", [PARIS, ROME]), Message.tool_result(PARIS, "sun")],
                                with_tools=True)
    assert [b["toolUseId"] for b in msgs[2]["content"]] == ["call_p", "call_r"]
    assert msgs[2]["content"][1]["isError"] and msgs[2]["content"][1]["content"][0]["text"] == NOT_RUN


# -- each provider, against its fake: a history broken mid-tool-turn ---------------------------------------------
BROKEN = [Message.system("be brief"), Message("tool", "stale", tool_call_id="gone", name="weather"),
          Message.user("weather in Paris and Rome?"), Message.assistant("Checking.", [PARIS, ROME]),
          Message.user("(sent while the tools ran)"), Message.tool_result(ROME, "rain in Rome")]


def _adapter(provider: str, url: str) -> Any:
    return {"openai": lambda: OpenAIAdapter(model="gpt-4o-mini", api_key="k", base_url=url, retry=ONE),
            "deepseek": lambda: DeepSeekAdapter(model="deepseek-reasoner", api_key="k", base_url=url, retry=ONE),
            "openai-responses": lambda: OpenAIResponsesAdapter(model="gpt-4o", api_key="k", base_url=url, retry=ONE),
            "anthropic": lambda: AnthropicAdapter(model="claude-test-1", api_key="k", base_url=url, retry=ONE),
            "gemini": lambda: GeminiAdapter(model="gemini-3-test", api_key="k", base_url=url, retry=ONE)}[provider]()


CHECKS = {"openai": _strict.openai_pairing, "deepseek": _strict.all_of(_strict.openai_pairing, _strict.deepseek),
          "openai-responses": _strict.responses_pairing, "anthropic": _strict.anthropic_pairing,
          "gemini": _strict.all_of(_strict.gemini_pairing, _strict.gemini3)}
TEXT_REPLY = {"openai": lambda: _chat_text("Sunny, then rain."), "deepseek": lambda: _chat_text("Sunny, then rain."),
              "openai-responses": lambda: _resp([{"type": "message", "id": "msg_9", "role": "assistant",
                                                  "content": [{"type": "output_text", "text": "Sunny, then rain."}]}]),
              "anthropic": lambda: _anth([{"type": "text", "text": "Sunny, then rain."}], "end_turn"),
              "gemini": lambda: _gem([{"text": "Sunny, then rain."}])}


def _results_sent(provider: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, result text) in the order the request carries them."""
    if provider in ("openai", "deepseek"):
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    if provider == "openai-responses":
        return [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]
    if provider == "anthropic":
        return [(b["tool_use_id"], b["content"]) for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"]
    return [(p["functionResponse"]["name"], next(iter(p["functionResponse"]["response"].values())))
            for c in body["contents"] for p in c["parts"] if "functionResponse" in p]


@pytest.mark.parametrize("provider", list(CHECKS))
async def test_a_history_broken_mid_tool_turn_is_accepted_by_each_provider(wire: Any, provider: str) -> None:
    wire.check = CHECKS[provider]
    wire.replies.append(Reply(body=TEXT_REPLY[provider]()))
    a = _adapter(provider, wire.url)
    assert (await a.chat(_json_round_trip(BROKEN), [WEATHER])).text == "Sunny, then rain."
    sent = _results_sent(provider, wire.requests[0]["json"])
    if provider == "gemini":  # Gemini pairs by position and name
        assert sent == [("weather", NOT_RUN), ("weather", "rain in Rome")]
    else:
        assert sent == [("call_p", NOT_RUN), ("call_r", "rain in Rome")]
    assert "stale" not in json.dumps(wire.requests[0]["json"])  # the orphan result is not sent
    assert "(sent while the tools ran)" in json.dumps(wire.requests[0]["json"])  # the mid-turn message is
    await a.aclose()


@pytest.mark.parametrize("provider", list(CHECKS))
def test_each_fake_refuses_the_history_as_the_adapters_used_to_send_it(provider: str, monkeypatch: Any) -> None:
    """The pairing rules can fail: the same history converted without the replay step is refused by each fake."""
    import openfunctions.adapters._anthropic as anth
    import openfunctions.adapters._gemini as gem
    import openfunctions.adapters._openai as oai
    import openfunctions.adapters._openai_responses as resp

    for module in (anth, gem, oai, resp):
        monkeypatch.setattr(module, "replay_history", lambda messages, provider, **kw: list(messages))
    raw = {"openai": lambda: {"messages": oai.openai_messages(BROKEN)},
           "deepseek": lambda: {"messages": oai.openai_messages(BROKEN)},
           "openai-responses": lambda: {"input": resp.responses_input(BROKEN)[1]},
           "anthropic": lambda: {"messages": anth.anthropic_messages(BROKEN)[1]},
           "gemini": lambda: {"contents": gem.gemini_contents(BROKEN, placeholder=True)[1]}}
    assert CHECKS[provider]({"json": raw[provider]()}, []) is not None


# -- a conversation that moves: Anthropic -> OpenAI -> Gemini -> Anthropic, with tool turns and thinking ------------
OSLO = {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": "b3Nsby1zaWc="}


async def test_a_conversation_moves_across_providers_with_tool_turns_and_thinking(wire: Any) -> None:
    think = ChatOptions(thinking_budget=2048)
    convo = [Message.system("be brief"), Message.user("weather in Paris, Rome and Oslo, one at a time")]

    # 1. Anthropic, thinking on: a thinking block and a tool_use.
    wire.check = _strict.anthropic_pairing
    wire.replies.append(Reply(body=_anth([THINKING, ANTH_CALL])))
    claude = _adapter("anthropic", wire.url)
    reply = await claude.chat(convo, [WEATHER], think)
    convo = _json_round_trip([*convo, reply.as_message(), Message.tool_result(reply.tool_calls[0], "sun in Paris")])

    # 2. OpenAI Chat Completions: never sees Anthropic's thinking; answers with a call of its own.
    wire.check = _strict.openai_pairing
    wire.replies.append(Reply(body={"model": "gpt-4o-mini", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "call_rome", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\": \"Rome\"}"}}]}}]}))
    gpt = _adapter("openai", wire.url)
    reply = await gpt.chat(convo, [WEATHER])
    sent = json.dumps(wire.requests[-1]["json"])
    assert "signature" not in sent and THINKING["thinking"] not in sent
    convo = _json_round_trip([*convo, reply.as_message(), Message.tool_result(reply.tool_calls[0], "rain in Rome")])

    # 3. Gemini 3: signs its own call; the foreign turns go with the placeholder, no Anthropic block.
    wire.check = _strict.all_of(_strict.gemini_pairing, _strict.gemini3)
    wire.replies.append(Reply(body=_gem([{"text": "need Oslo", "thought": True, "thoughtSignature": "dGhvdWdodA=="}, OSLO])))
    gemini = _adapter("gemini", wire.url)
    reply = await gemini.chat(convo, [WEATHER])
    sent = json.dumps(wire.requests[-1]["json"])
    assert THINKING["signature"] not in sent and "toolu_1" not in sent
    # ... and the process stops before the Oslo call ran: the saved history ends with an unanswered call.
    convo = _json_round_trip([*convo, reply.as_message()])

    # 4. Back to Anthropic, thinking asked for: its own block from step 1 goes back unchanged, Gemini's does
    # not; the Oslo call is closed "not run"; the turn it continues has no thinking block, so this request
    # goes without thinking (Anthropic would refuse it).
    wire.check = _strict.anthropic_pairing
    wire.replies.append(Reply(body=_anth([{"type": "text", "text": "Paris sun, Rome rain, Oslo unknown."}], "end_turn")))
    reply = await claude.chat(convo, [WEATHER], think)
    assert reply.text == "Paris sun, Rome rain, Oslo unknown."
    body = wire.requests[-1]["json"]
    assert "thinking" not in body
    assistant = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
    assert assistant[0] == [THINKING, ANTH_CALL]
    assert all(b["type"] in ("text", "tool_use") for turn in assistant[1:] for b in turn)
    assert [b["content"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_result"] == [
        "sun in Paris", "rain in Rome", NOT_RUN]
    assert "b3Nsby1zaWc=" not in json.dumps(body)
    # 5. And once more to Gemini: its own signatures from step 3 come back on their parts (the strict fake checks).
    wire.check = _strict.all_of(_strict.gemini_pairing, _strict.gemini3)
    wire.replies.append(Reply(body=_gem([{"text": "Done."}])))
    assert (await gemini.chat(convo, [WEATHER])).text == "Done."
    model_turns = [c["parts"] for c in wire.requests[-1]["json"]["contents"] if c["role"] == "model"]
    assert OSLO in model_turns[-1]
    for a in (claude, gpt, gemini):
        await a.aclose()


async def test_thinking_stays_on_when_the_turn_it_continues_is_anthropics_own(wire: Any) -> None:
    wire.check = _strict.anthropic_pairing
    wire.replies += [Reply(body=_anth([THINKING, ANTH_CALL])), Reply(body=_anth([{"type": "text", "text": "ok"}], "end_turn"))]
    a = _adapter("anthropic", wire.url)
    opts = ChatOptions(thinking_budget=2048)
    reply = await a.chat([Message.user("q")], [WEATHER], opts)
    await a.chat([Message.user("q"), reply.as_message(), Message.tool_result(reply.tool_calls[0], "sun")], [WEATHER], opts)
    assert wire.requests[1]["json"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    await a.aclose()


async def test_responses_reasoning_is_left_out_with_its_edited_message(wire: Any) -> None:
    wire.check = _strict.responses_pairing
    turn = Message.assistant("edited text", parts=[ProviderPart("openai-responses", RS)])
    wire.replies.append(Reply(body=_resp([{"type": "message", "id": "m", "role": "assistant",
                                           "content": [{"type": "output_text", "text": "ok"}]}])))
    a = _adapter("openai-responses", wire.url)
    await a.chat([Message.user("q"), turn, Message.user("and?")])
    assert wire.requests[0]["json"]["input"][1] == {"role": "assistant", "content": "edited text"}
    await a.aclose()
