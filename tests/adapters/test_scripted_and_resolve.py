"""The scripted adapter, provider/model resolution, and the sampling adapter's translation."""

from __future__ import annotations

import pytest

from openfunctions.adapters import (
    AdapterError,
    AdapterNotConfigured,
    AIAdapter,
    MalformedResponse,
    Message,
    OpenAIAdapter,
    SamplingAdapter,
    SamplingUnavailable,
    ScriptedAdapter,
    ScriptExhausted,
    ToolCall,
    resolve_adapter,
    resolve_model_provider,
)
from openfunctions.core import ToolExecutionContext, define_tool

pytestmark = pytest.mark.anyio

T = define_tool(name="add", description="add", input_schema={"type": "object", "properties": {"a": {"type": "integer"}}},
                handler=lambda p, c: p)


async def test_scripted_replays_in_order_and_refuses_when_exhausted() -> None:
    seen = []
    a = ScriptedAdapter([
        {"tool": "add", "arguments": {"a": 1}},
        lambda msgs, tools: (seen.append((msgs[-1].content, [t.name for t in tools])), "done")[1],
    ])
    assert isinstance(a, AIAdapter)
    r1 = await a.chat([Message.user("go")], [T])
    assert r1.tool_calls == (ToolCall("call_1_0", "add", {"a": 1}),) and r1.stop_reason == "tool_use"
    r2 = await a.chat([Message.user("go"), r1.as_message(), Message.tool_result(r1.tool_calls[0], "1")], [T])
    assert r2.text == "done" and seen == [("1", ["add"])]
    with pytest.raises(ScriptExhausted) as info:
        await a.chat([Message.user("again")])
    assert "held 2" in info.value.message and info.value.code == "script_exhausted"
    assert len(a.calls) == 3


async def test_scripted_raises_scripted_exceptions_and_rejects_nonsense() -> None:
    a = ScriptedAdapter([AdapterError("provider down"), 42])
    with pytest.raises(AdapterError, match="provider down"):
        await a.chat([])
    with pytest.raises(AdapterError, match="scripted reply 2"):
        await a.chat([])


async def test_scripted_stream_ends_with_done() -> None:
    a = ScriptedAdapter(["hello"])
    events = [e async for e in a.stream([Message.user("x")])]
    assert [e.type for e in events] == ["text", "done"] and events[-1].reply.text == "hello"


def test_resolution_from_arguments_and_environment() -> None:
    assert resolve_model_provider("openai", None, env={}) == ("openai", "gpt-4o-mini")
    assert resolve_model_provider(" OpenAI ", "gpt-x", env={}) == ("openai", "gpt-x")
    assert resolve_model_provider(None, "anthropic:claude-x", env={}) == ("anthropic", "claude-x")
    assert resolve_model_provider(None, None, env={"GEMINI_API_KEY": "g", "XAI_API_KEY": "x"}) == ("gemini", "gemini-2.0-flash")
    assert resolve_model_provider(None, None, env={"XAI_API_KEY": "x", "OPENFUNCTIONS_MODEL": "grok-9"}) == ("xai", "grok-9")
    a = resolve_adapter(model="openai:gpt-test", env={"OPENAI_API_KEY": "sk", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert isinstance(a, OpenAIAdapter) and a.model == "gpt-test" and a.base_url == "http://127.0.0.1:9/v1" and a.api_key == "sk"
    b = resolve_adapter(env={"OPENROUTER_API_KEY": "or"})
    assert b.provider == "openrouter" and b.base_url == "https://openrouter.ai/api/v1"


@pytest.mark.parametrize("model,cls,url,var", [
    ("deepseek:deepseek-chat", "DeepSeekAdapter", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
    ("kimi:kimi-k2.6", "KimiAdapter", "https://api.moonshot.ai/v1", "MOONSHOT_API_KEY"),
    ("openai-responses:gpt-5-mini", "OpenAIResponsesAdapter", "https://api.openai.com/v1", "OPENAI_API_KEY"),
])
def test_presets_resolve_to_their_endpoint_and_key(model: str, cls: str, url: str, var: str) -> None:
    import openfunctions.adapters as adapters

    a = resolve_adapter(model=model, env={var: "sk-x"})
    assert type(a) is getattr(adapters, cls) and a.base_url == url and a.api_key == "sk-x"
    assert a.model == model.split(":", 1)[1] and a.provider == model.split(":", 1)[0]
    with pytest.raises(AdapterNotConfigured, match=var):
        resolve_adapter(model=model, env={})


def test_preset_base_urls_and_auto_detection() -> None:
    assert resolve_model_provider(None, None, env={"DEEPSEEK_API_KEY": "d"}) == ("deepseek", "deepseek-chat")
    assert resolve_model_provider(None, None, env={"MOONSHOT_API_KEY": "m"}) == ("kimi", "kimi-k2.6")
    assert resolve_model_provider(None, None, env={"OPENAI_API_KEY": "o"}) == ("openai", "gpt-4o-mini")  # Chat Completions first
    k = resolve_adapter(model="kimi:kimi-k2.6", env={"MOONSHOT_API_KEY": "m", "MOONSHOT_BASE_URL": "https://api.moonshot.cn/v1"})
    assert k.base_url == "https://api.moonshot.cn/v1"
    r = resolve_adapter("openai-responses", env={"OPENAI_API_KEY": "o", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert r.base_url == "http://127.0.0.1:9/v1" and r.model == "gpt-5-mini" and r.reasoning
    assert resolve_adapter(model="openai:o3", env={"OPENAI_API_KEY": "o"}).reasoning
    assert not resolve_adapter(model="openai:o3", env={"OPENAI_API_KEY": "o"}, reasoning=False).reasoning
    assert not resolve_adapter(model="deepseek:o1-like", env={"DEEPSEEK_API_KEY": "d"}).reasoning  # the rule is OpenAI's


def test_resolution_errors_name_what_is_missing() -> None:
    with pytest.raises(AdapterNotConfigured) as info:
        resolve_adapter(env={})
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY",
                "DEEPSEEK_API_KEY", "MOONSHOT_API_KEY"):
        assert var in info.value.message
    with pytest.raises(AdapterNotConfigured, match="OPENAI_API_KEY"):
        resolve_adapter("openai", env={"ANTHROPIC_API_KEY": "a"})
    with pytest.raises(AdapterNotConfigured, match="unknown provider 'mistral'"):
        resolve_adapter("mistral", env={})
    with pytest.raises(AdapterNotConfigured, match="names provider"):
        resolve_adapter("openai", "anthropic:claude", env={})


async def test_sampling_adapter_with_tools_translates_both_ways() -> None:
    sent = []

    async def sampler(params: dict) -> dict:
        sent.append(params)
        if len(sent) == 1:
            return {"role": "assistant", "model": "host-model", "stopReason": "toolUse",
                    "content": [{"type": "tool_use", "id": "tu1", "name": "add", "input": {"a": 2}}]}
        return {"role": "assistant", "model": "host-model", "stopReason": "endTurn", "content": {"type": "text", "text": "2"}}

    a = SamplingAdapter.from_context(ToolExecutionContext(metadata={
        "openfunctions.sampler": sampler, "openfunctions.sampling": {"tools": {}}}))
    r = await a.chat([Message.system("sys"), Message.user("add")], [T])
    assert r.tool_calls == (ToolCall("tu1", "add", {"a": 2}),) and a.model == "host-model"
    assert sent[0]["systemPrompt"] == "sys" and sent[0]["tools"][0]["inputSchema"] == T.input_schema
    r2 = await a.chat([Message.system("sys"), Message.user("add"), r.as_message(), Message.tool_result(r.tool_calls[0], "2")], [T])
    assert r2.text == "2" and r2.stop_reason == "end_turn"
    assert sent[1]["messages"][1]["content"] == [{"type": "tool_use", "id": "tu1", "name": "add", "input": {"a": 2}}]
    assert sent[1]["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "toolUseId": "tu1", "content": [{"type": "text", "text": "2"}], "isError": False}]}


async def test_sampling_adapter_text_only_when_the_host_lacks_sampling_tools() -> None:
    sent = []

    async def sampler(params: dict) -> dict:
        sent.append(params)
        return {"role": "assistant", "model": "m", "content": {"type": "text", "text": "hi"}}

    a = SamplingAdapter(sampler, {})
    assert (await a.chat([Message.user("x")], [T])).text == "hi"
    assert "tools" not in sent[0]


async def test_sampling_adapter_refuses_without_a_host_or_capability() -> None:
    with pytest.raises(SamplingUnavailable, match="did not arrive over MCP"):
        await SamplingAdapter(None, None).chat([Message.user("x")])

    async def sampler(params: dict) -> dict:
        raise AssertionError("must not be called")

    with pytest.raises(SamplingUnavailable, match="does not offer sampling"):
        await SamplingAdapter(sampler, None).chat([Message.user("x")])


async def test_sampling_adapter_wraps_host_failures_and_bad_results() -> None:
    async def failing(params: dict) -> dict:
        raise RuntimeError("client said no")

    with pytest.raises(AdapterError, match="client said no"):
        await SamplingAdapter(failing, {}).chat([Message.user("x")])

    async def empty(params: dict) -> dict:
        return {"role": "assistant", "content": {"type": "image", "data": "", "mimeType": "image/png"}}

    with pytest.raises(MalformedResponse, match="neither text nor a tool call"):
        await SamplingAdapter(empty, {}).chat([Message.user("x")])
