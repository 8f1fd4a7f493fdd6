"""A model's reply is made valid UTF-8 where it enters (lone surrogates -> U+FFFD), over every wire format and
MCP sampling; sampling requests have a deadline."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from openfunctions.adapters import (
    SAMPLER_KEY,
    SAMPLING_CAPABILITY_KEY,
    SAMPLING_TIMEOUT_KEY,
    AdapterError,
    Message,
    SamplingAdapter,
    SamplingTimeout,
    valid_json,
    valid_text,
)
from openfunctions.core import ToolExecutionContext

from ._wire import Reply
from .test_http_adapters import CONVO, WEATHER, WIRES, Wire, _adapter

pytestmark = pytest.mark.anyio
BAD = "caf\udc80 \ud83d"  # two lone surrogates; JSON carries them as \udc80 and \ud83d escapes
GOOD = "caf\ufffd \ufffd"


@pytest.fixture(params=WIRES, ids=[w.name for w in WIRES])
def w(request: Any) -> Wire:
    return request.param


def test_valid_text_replaces_only_lone_surrogates() -> None:
    assert valid_text(BAD) == GOOD
    ok = "plain ascii"
    assert valid_text(ok) is ok and valid_text("déjà vu 😀") == "déjà vu 😀"
    clean = {"a": ["x", 1, None], "b": {"c": "é"}}
    assert valid_json(clean) is clean  # nothing to replace: the same object back
    assert valid_json({"k\udc80": [BAD, {"n": BAD}], "i": 3}) == {"k\ufffd": [GOOD, {"n": GOOD}], "i": 3}


async def test_every_wire_formats_reply_text_is_made_valid(w: Wire, wire: Any) -> None:
    body = json.dumps(w.text_body(BAD)).encode()  # ensure_ascii: the surrogates travel as \\u escapes
    assert b"\\udc80" in body
    wire.replies.append(Reply(body=body, headers={"content-type": "application/json"}))
    a = _adapter(w, wire)
    reply = await a.chat(CONVO, [WEATHER])
    assert reply.text == GOOD
    reply.text.encode("utf-8")  # has a UTF-8 form now
    await a.aclose()


async def test_tool_call_arguments_and_streamed_text_are_made_valid(w: Wire, wire: Any) -> None:
    tool = json.loads(json.dumps(w.tool_body()).replace("Paris", "Par\\udc80is"))
    wire.replies.append(Reply(body=tool))
    stream = [block.replace("Sun", "S\\udc80n") for block in w.text_stream()]
    wire.replies.append(Reply(sse=stream))
    a = _adapter(w, wire)
    reply = await a.chat(CONVO, [WEATHER])
    assert reply.tool_calls[0].arguments == {"city": "Par\ufffdis"}
    deltas = [e.text async for e in a.stream(CONVO, [WEATHER]) if e.type == "text"]
    assert "".join(deltas) == "S\ufffdnny"
    await a.aclose()


def _host(result: Any = None, *, wait: anyio.Event | None = None, raises: BaseException | None = None) -> Any:
    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        if raises is not None:
            raise raises
        if wait is not None:
            await wait.wait()
        return result

    return sample


async def test_a_sampling_hosts_reply_is_made_valid() -> None:
    host = _host({"role": "assistant", "model": "host\udc80", "content": [
        {"type": "text", "text": BAD}, {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": BAD}}]})
    reply = await SamplingAdapter(host, {"tools": {}}).chat([Message.user("hi")], [WEATHER])
    assert reply.text == GOOD and reply.model == "host\ufffd" and reply.tool_calls[0].arguments == {"city": GOOD}


async def test_an_unanswered_sampling_request_times_out() -> None:
    never = anyio.Event()
    adapter = SamplingAdapter(_host(wait=never), {}, timeout_s=0.05)
    with anyio.fail_after(10), pytest.raises(SamplingTimeout) as exc:
        await adapter.chat([Message.user("hi")])
    assert exc.value.code == "sampling_timeout" and "within 0.05 s" in exc.value.message


async def test_a_hosts_own_timeout_error_is_not_mistaken_for_the_deadline() -> None:
    adapter = SamplingAdapter(_host(raises=TimeoutError("host side")), {}, timeout_s=60)
    with pytest.raises(AdapterError) as exc:
        await adapter.chat([Message.user("hi")])
    assert not isinstance(exc.value, SamplingTimeout) and "host side" in exc.value.message


def test_the_deadline_comes_from_the_caller_then_the_host_then_the_default() -> None:
    ctx = ToolExecutionContext(metadata={SAMPLER_KEY: _host(), SAMPLING_CAPABILITY_KEY: {}, SAMPLING_TIMEOUT_KEY: 7.5})
    assert SamplingAdapter.from_context(ctx).timeout_s == 7.5
    assert SamplingAdapter.from_context(ctx, timeout_s=2).timeout_s == 2
    assert SamplingAdapter.from_context(ToolExecutionContext()).timeout_s == 120
    with pytest.raises(ValueError, match="positive number of seconds"):
        SamplingAdapter(_host(), {}, timeout_s=0)
