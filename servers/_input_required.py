"""Sampling for 2026-07-28 clients: a ``tools/call`` that asks its client mid-call (multi-round-trip requests).

Protocol 2026-07-28 has no server-to-client requests. A server that needs
the client's model in the middle of a call answers the ``tools/call`` with an
``InputRequiredResult`` (``resultType: "input_required"``) carrying the
requests (``inputRequests``: key -> ``{"method": "sampling/createMessage",
"params": ...}``) and an opaque ``requestState``; the client answers them
and sends the same ``tools/call`` again with ``inputResponses`` (same keys)
and the ``requestState`` echoed. The official SDK client does this by itself
(its sampling callback answers; ``Client.call_tool`` retries).

Here the call is not replayed from the start on each retry (an agent run
would run its tools again): it keeps running in this process. When a client
on 2026-07-28 that declared the ``sampling`` capability calls a tool, the
call runs in a task of its own (:meth:`InputRequired.call`) and the request
waits for it. The call's sampler (the one ``SamplingAdapter`` uses) posts its
request and waits; the waiting request then answers with an
``InputRequiredResult`` and the call is *detached*. The retry
(:meth:`InputRequired.resume`) hands the responses to the waiting sampler and
waits again, until the call ends (its ``CallToolResult``, receipt in
``_meta``) or asks again (another ``InputRequiredResult``, one leg further).

A call the client asked to run as a task (the tasks extension, a
task-capable tool such as an agent) asks the task way instead
(:func:`task_sampler`): the task's status becomes ``input_required`` with the
request (``tasks/get``) and ``tasks/update`` answers it (``servers/_tasks.py``).

Bounds: a detached call waits for an answer only as long as its sampling
deadline (``SamplingAdapter.timeout_s``: an agent's
``sampling_timeout_s``, else ``serve --sampling-timeout``). A client that
never comes back leaves a run that ends ``timeout`` with its run record and
receipt; an agent run holds no scheduler slot while it waits (see
``agents/_runtime.py``). A request cancelled while it waits for the call
(the client went away, ``notifications/cancelled``) cancels the call, as on
the handshake-era path. The final result of a call that ended while
detached is kept for :data:`RETAIN_S` (at most :data:`RETAIN_MAX` of them)
so a late retry still gets it and its receipt; after that the state is
unknown.

``requestState`` format: ``of:<instance>:<sealed>``. The ``of:`` prefix marks
the states this module issues: a retry whose state lacks it goes to the tool
like any call (a tool that answers with its own ``InputRequiredResult`` and
reads ``inputResponses`` on the retry, as the conformance fixtures do, keeps
working). ``<instance>`` names this server process (random, new at each
start); ``<sealed>`` is the SDK's
AES-256-GCM token (``mcp.server.request_state.AESGCMRequestStateCodec``,
under a key made at start and never written down) over the JSON
``{"c": call id, "l": leg, "exp": unix seconds}``. The client cannot read or
forge it; the call it names must also belong to the retry's principal and
tool and arguments. Each bad state has its own error (``-32602``, the
error's ``code`` in ``data``): :class:`RequestStateElsewhere` (another
instance or an earlier process minted it: suspended calls live in one
process's memory, so replicas need a load balancer that sends a call's
retries back to the instance that answered it), :class:`RequestStateInvalid`
(not a token this instance minted), :class:`RequestStateExpired`,
:class:`RequestStateUnknown` (the call ended and its result is gone, or is
not this principal's), :class:`RequestStateMismatch` (another tool or other
arguments), :class:`RequestStateStale` (an older leg's state, or a second
retry while one is being answered), :class:`InputResponsesInvalid` (a
response that answers no outstanding request, or is not a sampling result).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .errors import ServerError

#: How long the final result of a call that ended while its client was away is kept for a late retry.
RETAIN_S = 300.0
#: At most this many such results are kept (the oldest go first).
RETAIN_MAX = 256
#: A state is refused after this long even if its call still waits (a call's sampling deadline is shorter).
STATE_TTL_S = 3600.0
SAMPLING_METHOD = "sampling/createMessage"

Sampler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Progress = Callable[[float, "float | None", "str | None"], Awaitable[None]]


class InputRequiredError(ServerError):
    """A retry of a multi-round-trip ``tools/call`` that cannot be answered."""

    code = "input_required_error"


class RequestStateInvalid(InputRequiredError):
    code = "request_state_invalid"


class RequestStateExpired(InputRequiredError):
    code = "request_state_expired"


class RequestStateElsewhere(InputRequiredError):
    code = "request_state_other_instance"


class RequestStateUnknown(InputRequiredError):
    code = "request_state_unknown"


class RequestStateMismatch(InputRequiredError):
    code = "request_state_mismatch"


class RequestStateStale(InputRequiredError):
    code = "request_state_stale"


class InputResponsesInvalid(InputRequiredError):
    code = "input_responses_invalid"


def wants_input_required(ctx: Any) -> bool:
    """A 2026-07-28 request from a client that declared ``sampling``: its calls may ask it mid-call."""
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = getattr(getattr(ctx, "session", None), "client_capabilities", None)
    return getattr(caps, "sampling", None) is not None


STATE_PREFIX = "of:"


def task_sampler(task: Any) -> Sampler:
    """The sampler of a call running as a 2026-07-28 task: each request parks the task in ``input_required``
    (``TaskHandle.request_input``, key ``sampling-<n>``) until ``tasks/update`` answers it. The deadline is the
    caller's, as for :meth:`InputRequired.call`; the answer is the client's data (``SamplingAdapter`` checks it)."""
    keys = itertools.count()

    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        request = types.CreateMessageRequestParams.model_validate(params)
        key = f"sampling-{next(keys)}"  # unique over the task's life, as tasks/update requires
        answers = await task.request_input(
            {key: {"method": SAMPLING_METHOD, "params": request.model_dump(by_alias=True, mode="json", exclude_none=True)}})
        answer: dict[str, Any] = answers[key]  # the client's JSON: SamplingAdapter refuses what is not a result
        return answer

    return sample


def is_retry(params: Any) -> bool:
    """The ``tools/call`` carries a ``requestState`` this module issued: a retry, for :meth:`InputRequired.resume`."""
    state = getattr(params, "request_state", None)
    return isinstance(state, str) and state.startswith(STATE_PREFIX)


@dataclass(eq=False)
class _Call:
    tool: str
    arguments: Any  # as the request sent them (the executor hands the tool its own copy)
    principal: str | None
    # Set when the call first asks (most calls never do: they cost no id, no key, no registration)
    call_id: str | None = None
    arguments_key: str = ""  # canonical JSON of the call's arguments
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    outstanding: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> input request, not yet answered
    waiters: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    fresh: bool = False  # a request was posted since the last InputRequiredResult went out
    leg: int = 0  # InputRequiredResults sent so far; a retry names the latest
    next_key: int = 0
    attached: Any = None  # the request waiting for this call (its ServerRequestContext), if any
    settled: bool = False
    settled_at: float = 0.0
    detailed: Any = None
    failure: BaseException | None = None


def _arguments_key(arguments: Any) -> str:
    return json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


class InputRequired:
    """One server's calls that may ask their 2026-07-28 client for input. In memory, this process only."""

    def __init__(self, *, retain_s: float = RETAIN_S, retain_max: int = RETAIN_MAX, state_ttl_s: float = STATE_TTL_S) -> None:
        self.instance = "i" + secrets.token_hex(8)
        self._codec = AESGCMRequestStateCodec([os.urandom(32)])
        self._calls: dict[str, _Call] = {}
        self._jobs: set[asyncio.Task[None]] = set()
        self.retain_s = retain_s
        self.retain_max = retain_max
        self.state_ttl_s = state_ttl_s

    @property
    def suspended(self) -> int:
        """Calls kept here: running ones and ended ones whose result waits for a late retry."""
        return len(self._calls)

    # -- the first request ---------------------------------------------------

    async def call(
        self,
        ctx: Any,
        tool: str,
        arguments: Any,
        principal: str | None,
        run: Callable[[Sampler, Progress, anyio.CancelScope], Awaitable[Any]],
        answer: Callable[[Any, Any, bool], dict[str, Any]],
        on_start: Callable[[anyio.CancelScope], None],
        on_exit: Callable[[anyio.CancelScope], None],
    ) -> dict[str, Any]:
        """Start the call (``run(sampler, progress, scope)`` returns the executor's settled result) and answer
        the request: the result, or an ``InputRequiredResult`` once the call asks. ``answer(ctx, detailed,
        shut_down)`` shapes a settled call's reply; ``on_start(scope)``/``on_exit(scope)`` bracket the call (the
        server's in-flight set, which its shutdown waits for and cancels)."""
        c = _Call(tool=tool, arguments=arguments, principal=principal)

        async def sample(params: dict[str, Any]) -> dict[str, Any]:
            request = types.CreateMessageRequestParams.model_validate(params)
            key = f"sampling-{c.next_key}"
            c.next_key += 1
            waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            c.outstanding[key] = {"method": SAMPLING_METHOD,
                                  "params": request.model_dump(by_alias=True, mode="json", exclude_none=True)}
            c.waiters[key] = waiter
            c.fresh = True
            c.wake.set()
            try:
                # Bounded by the caller's deadline (SamplingAdapter.timeout_s), which cancels this wait.
                return await waiter
            finally:
                c.outstanding.pop(key, None)
                c.waiters.pop(key, None)

        async def progress(value: float, total: float | None = None, message: str | None = None) -> None:
            attached = c.attached  # progress reaches the request now waiting, if any; none reaches a detached call
            if attached is not None:
                await attached.session.report_progress(value, total, message)

        async def job() -> None:
            try:
                c.detailed = await run(sample, progress, c.scope)
            except BaseException as exc:  # the executor settles every outcome: a bug or a loop shutdown
                c.failure = exc
            finally:
                c.settled, c.settled_at = True, time.monotonic()
                c.wake.set()
                on_exit(c.scope)

        on_start(c.scope)
        task = asyncio.get_running_loop().create_task(job(), name=f"tool:{tool}:input_required")
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
        return await self._wait(c, ctx, answer)

    # -- a retry ---------------------------------------------------------------

    async def resume(self, ctx: Any, params: types.CallToolRequestParams, principal: str | None,
                     answer: Callable[[Any, Any, bool], dict[str, Any]]) -> dict[str, Any]:
        """Answer a retry: deliver ``inputResponses`` to the call ``requestState`` names, then wait as :meth:`call`."""
        try:
            c = self._find(params, principal)
            if not c.settled:
                self._deliver(c, params.input_responses)
        except InputRequiredError as exc:
            raise MCPError(INVALID_PARAMS, exc.message, data=exc.to_dict()) from None
        return await self._wait(c, ctx, answer)

    def _find(self, params: types.CallToolRequestParams, principal: str | None) -> _Call:
        state = params.request_state or ""
        instance, sep, token = state.removeprefix(STATE_PREFIX).partition(":")
        if not sep or not token:
            raise RequestStateInvalid("requestState is not one this server issued (expected 'of:<instance>:<token>')")
        if instance != self.instance:
            raise RequestStateElsewhere(
                f"requestState was issued by another server instance ({instance[:40]!r}; this is {self.instance!r}) or "
                "by this server before a restart: a suspended call lives in the memory of the instance that answered "
                "it, so its retries must reach that instance. Call the tool again",
                details={"instance": self.instance})
        try:
            claims = json.loads(self._codec.unseal(token))
            call_id, leg, exp = claims["c"], claims["l"], claims["exp"]
        except (InvalidRequestState, ValueError, KeyError, TypeError):
            raise RequestStateInvalid("requestState failed verification: it is not a token this server issued, "
                                      "or it was altered") from None
        if not (isinstance(exp, (int, float)) and time.time() < exp):
            raise RequestStateExpired("requestState has expired: call the tool again")
        self._purge()
        c = self._calls.get(call_id)
        if c is None or c.principal != principal:  # another principal's call: the same answer as an unknown one
            raise RequestStateUnknown(
                "the call this requestState names is not (or no longer) here: it ended and its result was dropped "
                f"after {self.retain_s:g} s, or it belongs to someone else. Call the tool again")
        if params.name != c.tool or _arguments_key(params.arguments) != c.arguments_key:
            raise RequestStateMismatch(
                f"this requestState belongs to a call of tool {c.tool!r} with other arguments: a retry must repeat "
                "the original tools/call's name and arguments", details={"tool": c.tool})
        if c.settled:
            return c
        if leg != c.leg or c.attached is not None:
            raise RequestStateStale(
                "this requestState is not the call's latest (an earlier InputRequiredResult's, or a retry of it is "
                f"already being answered): send the latest one (leg {c.leg})", details={"leg": c.leg})
        return c

    def _deliver(self, c: _Call, responses: Mapping[str, Any] | None) -> None:
        responses = responses or {}
        unknown = [k for k in responses if k not in c.waiters]
        if unknown:
            raise InputResponsesInvalid(
                f"inputResponses answer no outstanding request of this call: {sorted(unknown)[:10]} "
                f"(outstanding: {sorted(c.waiters)})", details={"keys": sorted(unknown)[:10]})
        wire: dict[str, dict[str, Any]] = {}
        for key, response in responses.items():
            if not isinstance(response, (types.CreateMessageResult, types.CreateMessageResultWithTools)):
                raise InputResponsesInvalid(
                    f"inputResponses[{key!r}] answers a {SAMPLING_METHOD} request but is not a sampling result "
                    f"({type(response).__name__})", details={"key": key})
            wire[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
        for key, value in wire.items():  # all checked first: a bad retry delivers nothing
            waiter = c.waiters.get(key)
            if waiter is not None and not waiter.done():
                waiter.set_result(value)
            c.outstanding.pop(key, None)

    # -- waiting for the call ----------------------------------------------------

    async def _wait(self, c: _Call, ctx: Any, answer: Callable[[Any, Any, bool], dict[str, Any]]) -> dict[str, Any]:
        """Wait until the call ends (its reply) or asks for input (an ``InputRequiredResult``)."""
        c.attached = ctx
        try:
            while not c.settled and not c.fresh:
                c.wake.clear()
                await c.wake.wait()
        except BaseException:
            # The request went away while the call ran on its behalf (a cancelled request, a closed
            # stream): the call goes too, as on the handshake-era path, and nobody is left to ask for its end.
            c.scope.cancel()
            if c.call_id is not None:
                self._calls.pop(c.call_id, None)
            raise
        finally:
            c.attached = None
        if c.settled:
            if c.call_id is not None:
                self._calls.pop(c.call_id, None)
            if c.failure is not None and c.detailed is None:
                raise c.failure
            return answer(ctx, c.detailed, c.scope.cancelled_caught)
        if c.call_id is None:  # the call's first question: from now on a retry must find it
            self._purge()
            c.call_id, c.arguments_key = secrets.token_urlsafe(16), _arguments_key(c.arguments)
            self._calls[c.call_id] = c
        c.fresh = False
        c.leg += 1
        claims = {"c": c.call_id, "l": c.leg, "exp": time.time() + self.state_ttl_s}
        state = f"{STATE_PREFIX}{self.instance}:{self._codec.seal(json.dumps(claims, separators=(',', ':')).encode())}"
        return {"resultType": "input_required", "inputRequests": dict(c.outstanding), "requestState": state}

    def _purge(self) -> None:
        """Drop ended calls' results past their retention, and the oldest beyond the cap."""
        now = time.monotonic()
        ended = [(call_id, c) for call_id, c in self._calls.items() if c.settled and c.attached is None]
        for call_id, c in ended:
            if now - c.settled_at > self.retain_s:
                self._calls.pop(call_id, None)
        kept = [(call_id, c) for call_id, c in ended if call_id in self._calls]
        if len(kept) > self.retain_max:
            for call_id, _ in sorted(kept, key=lambda x: x[1].settled_at)[: len(kept) - self.retain_max]:
                self._calls.pop(call_id, None)


__all__ = ["InputRequired", "InputRequiredError", "InputResponsesInvalid", "RequestStateElsewhere",
           "RequestStateExpired", "RequestStateInvalid", "RequestStateMismatch", "RequestStateStale",
           "RequestStateUnknown", "is_retry", "task_sampler", "wants_input_required"]
