"""The adapters' errors: one small hierarchy under ``OpenFunctionsError``.

Each carries a stable ``code``. Provider HTTP failures keep the status and the
provider's own message in ``details`` so a caller (or a run record) can say
exactly what the provider answered.
"""

from __future__ import annotations

from typing import Any

from openfunctions.core import OpenFunctionsError


class AdapterError(OpenFunctionsError):
    """Root of the adapter errors."""

    code = "adapter_error"


class AdapterNotConfigured(AdapterError):
    """No provider, model or API key could be resolved; the message names what is missing."""

    code = "adapter_not_configured"


class ModelProviderError(AdapterError):
    """The provider answered with an HTTP error. ``status`` is the HTTP status."""

    code = "provider_error"
    retryable = False

    def __init__(self, message: str, *, status: int | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details={**(details or {}), **({"status": status} if status is not None else {})})
        self.status = status


class BadRequest(ModelProviderError):
    """HTTP 400/404/422: the request was wrong (a model name, a schema); retrying will not help."""

    code = "provider_bad_request"


class AuthenticationFailed(ModelProviderError):
    """HTTP 401/403: the API key was refused."""

    code = "provider_auth_failed"


class RateLimited(ModelProviderError):
    """HTTP 429, still after the retries."""

    code = "provider_rate_limited"
    retryable = True


class ModelProviderUnavailable(ModelProviderError):
    """HTTP 5xx (or 529), or the connection failed, still after the retries."""

    code = "provider_unavailable"
    retryable = True


class MalformedResponse(AdapterError):
    """The provider's reply was not the JSON (or event stream) its wire format promises."""

    code = "provider_malformed_response"


class AdapterTimeout(AdapterError):
    """The HTTP call exceeded its timeout."""

    code = "adapter_timeout"


class SamplingTimeout(AdapterTimeout):
    """The MCP host did not answer a ``sampling/createMessage`` request within its deadline."""

    code = "sampling_timeout"


class ScriptExhausted(AdapterError):
    """A :class:`ScriptedAdapter` was asked for more replies than it was given."""

    code = "script_exhausted"


class SamplingUnavailable(AdapterError):
    """The MCP host offers no sampling (or not on this connection)."""

    code = "sampling_unavailable"


__all__ = [
    "AdapterError", "AdapterNotConfigured", "AdapterTimeout", "AuthenticationFailed", "BadRequest",
    "MalformedResponse", "ModelProviderError", "ModelProviderUnavailable", "RateLimited", "SamplingTimeout",
    "SamplingUnavailable", "ScriptExhausted",
]
