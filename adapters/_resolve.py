"""Provider and model resolution: arguments first, then the environment.

``resolve_adapter(provider=None, model=None, api_key=None, base_url=None)``:

1. ``model`` may name its provider: ``"openai:gpt-4o-mini"``,
   ``"openai-responses:gpt-5-mini"``, ``"deepseek:deepseek-chat"``, ``"kimi:kimi-k2.6"``.
2. Without a provider, the first of ``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``,
   ``GEMINI_API_KEY``, ``XAI_API_KEY``, ``OPENROUTER_API_KEY``,
   ``DEEPSEEK_API_KEY``, ``MOONSHOT_API_KEY`` that is set picks it
   (``OPENFUNCTIONS_PROVIDER`` overrides the order; ``OPENAI_API_KEY`` picks
   ``openai``, the Chat Completions adapter: name ``openai-responses`` for the other).
3. The model defaults to ``OPENFUNCTIONS_MODEL``, else the provider's default below.
4. The key defaults to the provider's variable; the base URL to the
   provider's base-URL variable (``BASE_URL_ENV``: ``<PROVIDER>_BASE_URL``, e.g.
   ``OPENAI_BASE_URL``, shared by ``openai-responses``; ``MOONSHOT_BASE_URL``
   for ``kimi``), else the public endpoint.

Anything missing raises :class:`AdapterNotConfigured` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._errors import AdapterNotConfigured

#: provider -> (API key variable, default model)
PROVIDERS: dict[str, tuple[str, str]] = {
    "anthropic": ("ANTHROPIC_API_KEY", "claude-sonnet-4-5"),
    "openai": ("OPENAI_API_KEY", "gpt-4o-mini"),
    "gemini": ("GEMINI_API_KEY", "gemini-2.0-flash"),
    "xai": ("XAI_API_KEY", "grok-3-mini"),
    "openrouter": ("OPENROUTER_API_KEY", "openrouter/auto"),
    "openai-responses": ("OPENAI_API_KEY", "gpt-5-mini"),
    "deepseek": ("DEEPSEEK_API_KEY", "deepseek-chat"),
    "kimi": ("MOONSHOT_API_KEY", "kimi-k2.6"),
}

#: provider -> the variable that moves its endpoint (a proxy, a regional host such as api.moonshot.cn)
BASE_URL_ENV: dict[str, str] = {
    "anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL", "gemini": "GEMINI_BASE_URL", "xai": "XAI_BASE_URL",
    "openrouter": "OPENROUTER_BASE_URL", "openai-responses": "OPENAI_BASE_URL", "deepseek": "DEEPSEEK_BASE_URL",
    "kimi": "MOONSHOT_BASE_URL",
}


def _adapter_class(provider: str) -> Any:
    if provider in ("openai", "xai", "openrouter", "deepseek", "kimi"):
        from ._openai import DeepSeekAdapter, KimiAdapter, OpenAIAdapter, OpenRouterAdapter, XAIAdapter

        return {"openai": OpenAIAdapter, "xai": XAIAdapter, "openrouter": OpenRouterAdapter, "deepseek": DeepSeekAdapter,
                "kimi": KimiAdapter}[provider]
    if provider == "openai-responses":
        from ._openai_responses import OpenAIResponsesAdapter

        return OpenAIResponsesAdapter
    if provider == "anthropic":
        from ._anthropic import AnthropicAdapter

        return AnthropicAdapter
    from ._gemini import GeminiAdapter

    return GeminiAdapter


def resolve_model_provider(
    provider: str | None = None, model: str | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """``(provider, model)`` from the arguments, else the environment (see the module docstring)."""
    env = os.environ if env is None else env
    provider = provider.strip().lower() if isinstance(provider, str) else provider
    if model and ":" in model and model.split(":", 1)[0] in PROVIDERS:
        named, model = model.split(":", 1)
        if provider and provider != named:
            raise AdapterNotConfigured(f"model {named}:{model} names provider {named!r} but provider={provider!r} was given")
        provider = named
    if provider is None:
        provider = env.get("OPENFUNCTIONS_PROVIDER") or next(
            (p for p, (var, _) in PROVIDERS.items() if env.get(var)), None
        )
    if provider is None:
        variables = list(dict.fromkeys(var for var, _ in PROVIDERS.values()))
        raise AdapterNotConfigured(
            f"no model provider configured: pass provider=/model= (e.g. model='openai:gpt-4o-mini') or set one of "
            f"{', '.join(variables)}",
            details={"env": variables},
        )
    if provider not in PROVIDERS:
        raise AdapterNotConfigured(f"unknown provider {provider!r}: choose one of {', '.join(PROVIDERS)}")
    return provider, model or env.get("OPENFUNCTIONS_MODEL") or PROVIDERS[provider][1]


def resolve_adapter(
    provider: str | None = None,
    model: str | None = None,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> Any:
    """An adapter for ``provider``/``model`` (see the module docstring); ``options`` go to its constructor
    (``timeout=``, ``retry=``, ``client=``)."""
    env = os.environ if env is None else env
    provider, model = resolve_model_provider(provider, model, env=env)
    var = PROVIDERS[provider][0]
    key = api_key or env.get(var)
    if not key:
        raise AdapterNotConfigured(
            f"provider {provider!r} needs an API key: pass api_key= or set {var}", details={"env": var, "provider": provider}
        )
    url = base_url or env.get(BASE_URL_ENV[provider]) or None
    return _adapter_class(provider)(model=model, api_key=key, base_url=url, **options)


__all__ = ["BASE_URL_ENV", "PROVIDERS", "resolve_adapter", "resolve_model_provider"]
