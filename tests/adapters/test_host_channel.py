"""``SamplingAdapter.from_context`` reads the host from ``ctx.host``; the old metadata keys are a deprecated fallback."""

from __future__ import annotations

from typing import Any

import pytest

from openfunctions.adapters import SAMPLER_KEY, SAMPLING_CAPABILITY_KEY, SAMPLING_TIMEOUT_KEY, Message, SamplingAdapter
from openfunctions.core import HostChannel, ToolExecutionContext

pytestmark = pytest.mark.anyio


def _host(name: str, asked: list[dict[str, Any]]) -> Any:
    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"role": "assistant", "model": name, "content": {"type": "text", "text": f"from {name}"},
                "stopReason": "endTurn"}
    return sample


async def test_the_adapter_samples_the_host_in_ctx_host() -> None:
    asked: list[dict[str, Any]] = []
    ctx = ToolExecutionContext(host=HostChannel(_host("typed", asked), {"tools": {}}, sampling_timeout_s=7.5))
    adapter = SamplingAdapter.from_context(ctx)
    assert adapter.timeout_s == 7.5 and adapter.supports_tools
    assert SamplingAdapter.from_context(ctx, timeout_s=2).timeout_s == 2  # the caller's deadline wins
    reply = await adapter.chat([Message.user("hi")])
    assert reply.text == "from typed" and asked[0]["messages"][0]["content"]["text"] == "hi"
    assert (await ctx.host.sample({"messages": [], "maxTokens": 1}))["model"] == "typed"  # a tool may call it directly


async def test_the_old_metadata_keys_still_work_and_ctx_host_wins_over_them() -> None:
    old: list[dict[str, Any]] = []
    legacy = ToolExecutionContext(metadata={SAMPLER_KEY: _host("legacy", old), SAMPLING_CAPABILITY_KEY: {},
                                            SAMPLING_TIMEOUT_KEY: 3.0})
    adapter = SamplingAdapter.from_context(legacy)
    assert adapter.timeout_s == 3.0 and not adapter.supports_tools
    assert (await adapter.chat([Message.user("x")])).text == "from legacy"
    both = legacy.replace(host=HostChannel(_host("typed", []), None))
    assert SamplingAdapter.from_context(both).capability is None  # the typed slot, not the legacy capability
    assert SamplingAdapter.from_context(both).timeout_s == 120  # nor the legacy deadline


def test_with_sampler_keeps_the_capability_and_deadline() -> None:
    host = HostChannel(_host("a", []), {"tools": {}}, sampling_timeout_s=5)
    other = host.with_sampler(_host("b", []))
    assert other.sampling == {"tools": {}} and other.sampling_timeout_s == 5 and other.sampler is not host.sampler
