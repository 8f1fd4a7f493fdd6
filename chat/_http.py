"""``serve()``: the chat agent over HTTP (Starlette on uvicorn).

| route | does |
|---|---|
| ``GET /`` | the chat page (``_page.html``: one file, no CDN, no build step) |
| ``POST /chat`` | ``{"message": str, "conversation_id"?: str}`` -> the turn's :meth:`ChatResponse.to_dict` (200; 502 when the turn ``failed``) |
| ``POST /chat/stream`` | same body -> ``text/event-stream``: ``tool_call``, ``tool_result``, ``text``, … , ``done`` |
| ``GET /health`` | the agent's :meth:`ChatAgent.health` |
| ``POST /reset`` | ``{"conversation_id"?}``: that conversation starts over -> ``{"conversation_id", "thread_id"}`` |

One conversation per client: a turn without a conversation id gets a new
conversation issued (:meth:`ChatAgent.open_conversation`); its id comes back
in the ``X-Conversation-Id`` response header, in the body's
``conversation_id`` (``/chat``; ``/chat/stream``: in the ``done`` event),
and the client sends it with its next turns (body field ``conversation_id``
or the ``X-Conversation-Id`` request header; both given must agree).
``/reset`` starts over only the conversation it names (without one: a new
conversation is issued; nothing else changes). Ids are unguessable,
bounded by ``max_conversations`` (least recently used evicted), durable in
the data dir with memory on (a client continues after a restart), and bound
to the principal that created them (see ``_conversations.py``).

Bad requests get ``{"error": {"code", "message"}}``: 400 ``invalid_json``
(not JSON, not an object, or nested deeper than ``max_json_depth``), 400
``chat_message_invalid`` (``message`` missing, not a string, blank), 400
``chat_conversation_invalid`` (a conversation id that is not a string of the
issued form, or body and header disagree), 404 ``chat_conversation_not_found``
(well-formed, not held: never issued, evicted, created by another principal,
or (memory off) from before a restart), 408 ``body_timeout`` (the body did
not arrive within ``body_timeout``), 413 ``chat_message_too_large`` (more
than ``max_message_chars`` characters) or 413 ``body_too_large`` (a body
over :data:`MAX_BODY_BYTES`), 415 ``unsupported_media_type`` (a POST that is
not ``application/json``), 421 ``invalid_host``, 403 ``invalid_origin``, 503
``chat_closed``.

What stands in front of the routes is the MCP HTTP server's own guard
(``servers/_http_guard.py``), not a copy: a request head must arrive within
``header_timeout`` seconds, a body within ``body_timeout``; at most
``max_connections`` connections are open (one more gets 503 and is closed at
once), lowered to fit the open-file limit; a client that disconnects
mid-body ends its request quietly; each kind of refusal is logged once per
few seconds, not once per request.

Security: loopback by default; a non-loopback ``host`` needs a ``token``.
With a token every route but the page needs ``Authorization: Bearer
<token>`` (the MCP HTTP server's :class:`BearerAuth`: constant-time check,
401 with ``WWW-Authenticate``); the page (no data in it) reads the token
from its URL fragment, ``http://127.0.0.1:8765/#token=...``, which browsers
never send to a server. On a loopback bind the ``Host`` header must name a
loopback host on any port (DNS rebinding; a tunnel or port forward changes
only the port), and a request with an ``Origin`` header must come from the
page's own origin: a loopback origin on the port ``Host`` names. ``Origin:
null`` (a sandboxed frame, a ``data:`` or ``file:`` page) is refused, and
every POST must be ``application/json``, a type a browser sends cross-site
only after a CORS preflight this server never grants, so another page's
script cannot run a turn (or its tools).

A client that disconnects from ``/chat/stream`` cancels its turn: the run is
recorded ``cancelled`` and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
from importlib.resources import files
from typing import Any

import anyio
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from openfunctions.core import PRINCIPAL_SCOPE_KEY, OpenFunctionsError
from openfunctions.servers._http_limits import (
    CHAT_MAX_BODY_BYTES,
    CHAT_MAX_CONNECTIONS,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_JSON_DEPTH,
)

from ._errors import ChatClosed, ChatError, ConversationNotFound, InvalidConversation, InvalidMessage, MessageTooLarge

log = structlog.get_logger("openfunctions.chat.http")

#: The largest request body read, in bytes (a message is at most 8,000 characters; JSON escapes may double it).
MAX_BODY_BYTES = CHAT_MAX_BODY_BYTES
_STATUS: dict[type[OpenFunctionsError], int] = {InvalidMessage: 400, MessageTooLarge: 413, ChatClosed: 503, InvalidConversation: 400, ConversationNotFound: 404}
#: Connections waiting to be accepted, and accepted per event-loop turn.
_BACKLOG = 128
#: The request header (and response header) carrying a conversation id.
CONVERSATION_HEADER = "x-conversation-id"


class _BadRequest(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)



async def _body(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The request's JSON object (``required=False``: an empty body is ``{}``), or :class:`_BadRequest`.

    The guard in front (``_http_guard.RequestGuard``) has already checked the
    content type, read the whole body within its size and time limits and
    refused one nested too deep.
    """
    body = await request.body()
    if not body.strip() and not required:
        return {}
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _BadRequest(400, "invalid_json", f'the body is not JSON ({exc}); send {{"message": "..."}}') from None
    if not isinstance(data, dict):
        raise _BadRequest(400, "invalid_json", f'the body must be a JSON object {{"message": "..."}}, got {type(data).__name__}')
    return data


def _conversation_id(request: Request, data: dict[str, Any]) -> Any:
    """The conversation id the caller sent (body ``conversation_id`` or the header), or None."""
    header = request.headers.get(CONVERSATION_HEADER)
    given = data.get("conversation_id")
    if header is not None and given is not None and header != given:
        raise InvalidConversation(f"the body's conversation_id and the {CONVERSATION_HEADER} header name different "
                                  "conversations; send one")
    return given if given is not None else header


def _principal(request: Request) -> str | None:
    """The transport's principal (the bearer-token check sets it), or None on an open loopback bind."""
    who = request.scope.get(PRINCIPAL_SCOPE_KEY)
    return who if isinstance(who, str) else None


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class _Stream:
    """``text/event-stream`` of one turn; the turn is cancelled when the client disconnects."""

    headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
               (b"x-accel-buffering", b"no")]

    def __init__(self, agent: Any, message: str, conversation: str) -> None:
        self.agent, self.message, self.conversation = agent, message, conversation

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [*self.headers, (CONVERSATION_HEADER.encode(), self.conversation.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        events_in, events_out = anyio.create_memory_object_stream[Any](1000)

        async def turn() -> None:
            async with events_in:
                try:
                    await self.agent.turn(self.message, on_event=events_in.send, conversation=self.conversation)
                except OpenFunctionsError as exc:  # e.g. destroyed meanwhile: an error event, then the end
                    await events_in.send(_sse("error", exc.to_dict()))

        async def watch(tg: Any) -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    log.info("chat_stream_disconnected", agent=self.agent.name)
                    tg.cancel_scope.cancel()
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg)
            tg.start_soon(turn)
            async with events_out:
                async for item in events_out:
                    chunk = item if isinstance(item, bytes) else _sse(item.type, item.data)
                    try:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    except OSError:  # the connection went away between two events
                        tg.cancel_scope.cancel()
                        return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


def _error_body(code: str, message: str) -> tuple[bytes, bytes]:
    """The guard's refusals in this server's error shape."""
    return json.dumps({"error": {"code": code, "message": message}}).encode(), b"application/json"


def create_chat_app(agent: Any, *, host: str = "127.0.0.1", port: int | None = None, token: str | None = None,
                    body_timeout: float = DEFAULT_BODY_TIMEOUT, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """The ASGI app ``serve()`` runs (see the module docstring). ``port`` is unused (any port passes the Host check)."""
    from openfunctions.servers._http_guard import HostRules, RequestGuard, is_loopback_host
    page = files(__package__).joinpath("_page.html").read_text(encoding="utf-8")

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store",
                                           "content-security-policy": "default-src 'self'; script-src 'unsafe-inline'; "
                                                                      "style-src 'unsafe-inline'; img-src data:"})

    async def health(request: Request) -> Response:
        return JSONResponse(await agent.health())

    def refusal(exc: Exception) -> Response:
        if isinstance(exc, _BadRequest):
            return _error(exc.status, exc.code, exc.message)
        assert isinstance(exc, OpenFunctionsError)
        # a chat error is the request's; anything else (e.g. the conversation table's journal failed) is the server's
        return _error(_STATUS.get(type(exc), 400 if isinstance(exc, ChatError) else 503), exc.code, exc.message)

    async def reset(request: Request) -> Response:
        try:
            if agent.closed:
                raise ChatClosed("the chat agent was destroyed")
            conversation = _conversation_id(request, await _body(request, required=False))
            who = _principal(request)
            if conversation is None:  # nothing named: a new conversation for this caller, nothing else changes
                conversation = await agent.open_conversation(principal=who)
                thread = agent.conversation_thread(conversation)
            else:
                agent.conversation_thread(conversation, principal=who)
                thread = await agent.reset(conversation)
        except (_BadRequest, OpenFunctionsError) as exc:
            return refusal(exc)
        return JSONResponse({"conversation_id": conversation, "thread_id": thread},
                            headers={CONVERSATION_HEADER: conversation})

    async def checked(request: Request) -> tuple[str, str] | Response:
        """The request's message and conversation id (issued now if the caller sent none), or the
        4xx/503 answer that names what is wrong with the request."""
        try:
            data = await _body(request)
            if "message" not in data:
                raise _BadRequest(400, InvalidMessage.code, 'the body has no "message" field')
            raw = data["message"]
            try:
                if isinstance(raw, str):
                    raw.encode("utf-8")
            except UnicodeEncodeError:  # JSON's "\ud800": not text. A client is told (the Python API replaces it)
                raise InvalidMessage("message contains a lone surrogate (an unpaired \\uD800-\\uDFFF escape): "
                                     "it is not UTF-8 text") from None
            message = agent.check_message(raw)
            conversation = _conversation_id(request, data)
            if conversation is None:
                conversation = await agent.open_conversation(principal=_principal(request))
            else:
                agent.conversation_thread(conversation, principal=_principal(request))
            return message, conversation
        except (_BadRequest, OpenFunctionsError) as exc:
            return refusal(exc)

    async def chat(request: Request) -> Response:
        checked_ = await checked(request)
        if isinstance(checked_, Response):
            return checked_
        message, conversation = checked_
        try:
            response = await agent.turn(message, conversation=conversation)
        except OpenFunctionsError as exc:  # destroyed meanwhile, or the conversation evicted while queued
            return refusal(exc)
        return JSONResponse(response.to_dict(), status_code=502 if response.status == "failed" else 200,
                            headers={CONVERSATION_HEADER: conversation})

    async def stream(request: Request) -> Any:
        checked_ = await checked(request)
        return checked_ if isinstance(checked_, Response) else _Stream(agent, *checked_)

    app: Any = Starlette(routes=[
        Route("/", index, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/reset", reset, methods=["POST"]),
        Route("/chat", chat, methods=["POST"]),
        Route("/chat/stream", stream, methods=["POST"]),
    ])
    if token:
        from openfunctions.core import BearerAuth  # the MCP HTTP server's check, reused

        app = _PageOpen(app, BearerAuth(app, token, "bearer"))
    return RequestGuard(
        app,
        rules=HostRules.loopback() if is_loopback_host(host) else None,  # off the loopback the token is the guard
        health=None,  # GET /health is the agent's own route
        max_body_bytes=MAX_BODY_BYTES,
        body_timeout=body_timeout,
        max_json_depth=max_json_depth,
        error_body=_error_body,
        host_hint="the chat on a loopback bind answers loopback names (any port) only; "
                  "to serve another name bind that address with --host and a token",
    )


class _PageOpen:
    """With a token: ``GET /`` (the page: no data in it) is open; the page sends the token it reads from the
    URL fragment (``/#token=...``, never sent to the server by the browser) on every call; everything else needs it."""

    def __init__(self, app: Any, guarded: Any) -> None:
        self.app, self.guarded = app, guarded

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") == "/":
            await self.app(scope, receive, send)
        else:
            await self.guarded(scope, receive, send)


async def serve(agent: Any, *, port: int = 8765, host: str = "127.0.0.1", token: str | None = None,
                ready: Any = None, header_timeout: float = DEFAULT_HEADER_TIMEOUT,
                body_timeout: float = DEFAULT_BODY_TIMEOUT, max_connections: int = CHAT_MAX_CONNECTIONS,
                max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
    """Serve until cancelled (or SIGINT/SIGTERM). ``port=0`` picks a free port; ``ready(port)`` is called once listening.

    ``header_timeout``: seconds a connection has to send a complete request
    head (from connecting or from its previous response); ``body_timeout``:
    seconds a POST body has to arrive; ``max_connections``: open connections
    at most (lowered, with a warning, to fit the open-file limit);
    ``max_json_depth``: the deepest nesting a body may have.
    """
    import uvicorn

    from openfunctions.servers._event_loop import resolve_http_parser
    from openfunctions.servers._http_guard import (
        clamp_connections,
        guarded_protocol,
        is_loopback_host,
        quiet_accept_errors,
    )

    from ._errors import ChatConfigError

    if not is_loopback_host(host) and not token:
        raise ChatConfigError(f"serving the chat on {host!r} (not loopback) needs a bearer token: pass token= "
                              "(--auth-token-env / --auth-token-file), or bind 127.0.0.1")
    app = create_chat_app(agent, host=host, port=port, token=token, body_timeout=body_timeout,
                          max_json_depth=max_json_depth)
    protocol = guarded_protocol(resolve_http_parser("auto"), max_connections=clamp_connections(max_connections),
                                header_timeout=header_timeout)
    # log_level=None, log_config=None: uvicorn leaves the process's logging (its loggers' levels) alone.
    config = uvicorn.Config(app, host=host, port=port, http=protocol, log_level=None, access_log=False,
                            lifespan="off", log_config=None, timeout_graceful_shutdown=2,
                            timeout_keep_alive=DEFAULT_KEEP_ALIVE_TIMEOUT,
                            # asyncio accepts up to `backlog` connections per loop turn before any is refused
                            # (past the cap) and closed: 2048, uvicorn's default, ran a 1,024-fd process out of
                            # descriptors for a second under a burst of connections; 128 cannot.
                            backlog=_BACKLOG)
    server = uvicorn.Server(config)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ChatConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    quiet_accept_errors(asyncio.get_running_loop())
    stopped = anyio.Event()

    async def run_server() -> None:
        try:
            with anyio.CancelScope(shield=True):  # stopped through should_exit, so shutdown closes every connection
                await server.serve(sockets=[sock])
        finally:
            stopped.set()

    async def announce() -> None:
        while not server.started and not stopped.is_set():
            await anyio.sleep(0.01)
        if not server.started:
            return
        bound = sock.getsockname()[1]
        log.info("chat_listening", url=f"http://{host}:{bound}/", auth=bool(token))
        if ready is not None:
            ready(bound)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_server)
        tg.start_soon(announce)
        try:
            await stopped.wait()
        finally:
            server.should_exit = True  # cancelled (or a signal): uvicorn's graceful shutdown, bounded by 2 s
    sock.close()


__all__ = ["CONVERSATION_HEADER", "MAX_BODY_BYTES", "create_chat_app", "serve"]
