"""The HTTP machinery the provider adapters share: one httpx client, retries, SSE.

- **Retries**: 429, 500, 502, 503, 504 and 529 (Anthropic's "overloaded"),
  and a connection that fails before any reply byte, are retried up to
  ``RetryPolicy.max_attempts`` with exponential backoff and jitter. A
  ``retry-after`` (seconds or an HTTP date) or ``retry-after-ms`` header sets
  the wait instead; one longer than ``max_retry_after`` is not waited for
  (the error is raised at once, naming the wait the provider asked for).
  A stream is retried only until its first event was yielded: after that a
  cut is reported, never replayed behind the caller's back.
- **Timeouts and cancellation**: ``ChatOptions.timeout`` (else the adapter's
  ``timeout``) is httpx's timeout for that request; anyio cancellation of
  the caller's task reaches the socket (httpx runs on anyio), and the
  backoff sleep is cancellable too.
- **Errors**: 400/404/422 :class:`BadRequest`, 401/403
  :class:`AuthenticationFailed`, 429 :class:`RateLimited`, 5xx
  :class:`ModelProviderUnavailable`, a body that is not the promised JSON or event
  stream :class:`MalformedResponse`; each message quotes the provider's own
  error message when it sent one.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

try:
    import httpx
except ImportError:  # pragma: no cover - the extra is missing
    httpx = None  # type: ignore[assignment]

from openfunctions.core import ToolDefinition

from ._errors import (
    AdapterNotConfigured,
    AdapterTimeout,
    AuthenticationFailed,
    BadRequest,
    MalformedResponse,
    ModelProviderError,
    ModelProviderUnavailable,
    RateLimited,
)
from ._types import ChatOptions, ChatReply, Message, StreamEvent

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a retryable failure (see the module docstring)."""

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    jitter: float = 0.2

    def backoff(self, attempt: int) -> float:
        """The wait before attempt ``attempt + 1`` (attempt counts from 1) without a retry-after."""
        d = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return d * (1 + self.jitter * (random.random() * 2 - 1))


def retry_after_seconds(headers: Any) -> float | None:
    """``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) as seconds; ``None`` if absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _provider_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:300] or "(empty body)"
    if isinstance(data, list) and data:  # Gemini sometimes wraps errors in a list
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        message = err.get("message") if isinstance(err, dict) else None
        if isinstance(message, str):
            return message[:500]
        if isinstance(err, str):
            return err[:500]
    return json.dumps(data)[:300]


def status_error(provider: str, status: int, body: bytes, *, retry_after: float | None = None) -> ModelProviderError:
    msg = _provider_message(body)
    details: dict[str, Any] = {"provider": provider, "provider_message": msg}
    if retry_after is not None:
        details["retry_after_s"] = retry_after
    if status in (401, 403):
        return AuthenticationFailed(f"{provider} refused the API key (HTTP {status}): {msg}", status=status, details=details)
    if status == 429:
        return RateLimited(f"{provider} rate-limited the request (HTTP 429): {msg}", status=status, details=details)
    if status >= 500:
        return ModelProviderUnavailable(f"{provider} failed (HTTP {status}): {msg}", status=status, details=details)
    return BadRequest(f"{provider} rejected the request (HTTP {status}): {msg}", status=status, details=details)


class StreamParser:
    """Turns one provider's SSE events into :class:`StreamEvent` items and a final reply."""

    def feed(self, event: str | None, data: str) -> list[StreamEvent]:  # pragma: no cover - interface
        raise NotImplementedError

    def finish(self) -> ChatReply:  # pragma: no cover - interface
        raise NotImplementedError


class HttpAdapter:
    """Base of the provider adapters. Subclasses phrase requests and parse replies; this class moves bytes."""

    provider = "http"
    default_base_url = ""

    def __init__(
        self,
        *,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if httpx is None:
            raise AdapterNotConfigured(
                f"the {self.provider} adapter needs httpx: pip install 'openfunctions-mcp[adapters]'"
            )
        if not model:
            raise AdapterNotConfigured(f"the {self.provider} adapter needs a model name")
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._client = client
        self._own_client = client is None
        #: The wait function between attempts (replaceable to observe the waits).
        self.sleep: Callable[[float], Awaitable[None]] = anyio.sleep

    # -- subclass hooks ----------------------------------------------------
    def _url(self, stream: bool) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:  # pragma: no cover - interface
        raise NotImplementedError

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def _parse(self, data: Any) -> ChatReply:  # pragma: no cover - interface
        raise NotImplementedError

    def _stream_parser(self) -> StreamParser:  # pragma: no cover - interface
        raise NotImplementedError

    # -- public --------------------------------------------------------------
    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> ChatReply:
        opts = options or ChatOptions()
        body = self._body(messages, tools, opts, False)
        raw = await self._with_retries(lambda: self._post_once(body, opts))
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise MalformedResponse(
                f"{self.provider} returned a body that is not JSON ({exc}): {raw[:200]!r}", details={"provider": self.provider}
            ) from None
        try:
            return self._parse(data)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise MalformedResponse(
                f"{self.provider} returned JSON without the fields its wire format promises ({type(exc).__name__}: {exc})",
                details={"provider": self.provider},
            ) from None

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> AsyncIterator[StreamEvent]:
        opts = options or ChatOptions()
        body = self._body(messages, tools, opts, True)
        attempt = 0
        while True:
            attempt += 1
            yielded = False
            try:
                async for event in self._stream_once(body, opts):
                    yielded = True
                    yield event
                return
            except ModelProviderError as exc:
                if yielded or not exc.retryable or attempt >= self.retry.max_attempts:
                    raise
                await self._wait(exc, attempt)

    async def aclose(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.aclose()
            self._client = None

    # -- moving bytes --------------------------------------------------------
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client

    def _timeout(self, opts: ChatOptions) -> httpx.Timeout:
        return httpx.Timeout(opts.timeout if opts.timeout is not None else self.timeout)

    async def _with_retries(self, once: Callable[[], Awaitable[bytes]]) -> bytes:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await once()
            except ModelProviderError as exc:
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    raise
                await self._wait(exc, attempt)

    async def _wait(self, exc: ModelProviderError, attempt: int) -> None:
        ra = exc.details.get("retry_after_s")
        if ra is not None and ra > self.retry.max_retry_after:
            exc.message = f"{exc.message} (the provider asked to wait {ra:.0f}s, more than max_retry_after)"
            raise exc
        await self.sleep(ra if ra is not None else self.retry.backoff(attempt))

    def _transport_error(self, exc: Exception, what: str) -> Exception:
        if isinstance(exc, httpx.TimeoutException):
            return AdapterTimeout(f"{self.provider} did not answer within the timeout ({what}): {type(exc).__name__}",
                                  details={"provider": self.provider})
        return ModelProviderUnavailable(f"{self.provider} connection failed ({what}): {type(exc).__name__}: {exc}",
                                        details={"provider": self.provider, "url": self._url(False)})

    async def _post_once(self, body: dict[str, Any], opts: ChatOptions) -> bytes:
        try:
            resp = await self._http().post(self._url(False), json=body, headers=self._headers(), timeout=self._timeout(opts))
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, "request") from None
        if resp.status_code >= 400:
            raise status_error(self.provider, resp.status_code, resp.content, retry_after=retry_after_seconds(resp.headers))
        return resp.content

    async def _stream_once(self, body: dict[str, Any], opts: ChatOptions) -> AsyncIterator[StreamEvent]:
        parser = self._stream_parser()
        seen = 0
        try:
            async with self._http().stream(
                "POST", self._url(True), json=body, headers=self._headers(), timeout=self._timeout(opts)
            ) as resp:
                if resp.status_code >= 400:
                    raw = await resp.aread()
                    raise status_error(self.provider, resp.status_code, raw, retry_after=retry_after_seconds(resp.headers))
                event: str | None = None
                data: list[str] = []
                async for line in resp.aiter_lines():
                    if line == "":
                        if data:
                            seen += 1
                            for out in self._feed(parser, event, "\n".join(data)):
                                yield out
                        event, data = None, []
                    elif line.startswith(":"):
                        continue
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))
                if data:
                    seen += 1
                    for out in self._feed(parser, event, "\n".join(data)):
                        yield out
        except httpx.HTTPError as exc:
            err = self._transport_error(exc, f"stream, after {seen} events")
            if seen and isinstance(err, ModelProviderUnavailable):
                err.message = f"{self.provider} stream was cut after {seen} events: {type(exc).__name__}"
                err.retryable = False
            raise err from None
        reply = parser.finish()
        for call in reply.tool_calls:  # complete calls only: arguments arrive in fragments
            yield StreamEvent("tool_call", tool_call=call)
        yield StreamEvent("done", reply=reply)

    def _feed(self, parser: StreamParser, event: str | None, data: str) -> list[StreamEvent]:
        try:
            return parser.feed(event, data)
        except MalformedResponse:
            raise
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise MalformedResponse(
                f"{self.provider} sent a stream event that is not its wire format ({type(exc).__name__}: {exc}): {data[:200]!r}",
                details={"provider": self.provider},
            ) from None


__all__ = ["HttpAdapter", "RetryPolicy", "StreamParser", "retry_after_seconds", "status_error", "RETRY_STATUSES"]
