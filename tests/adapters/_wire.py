"""A local HTTP server on 127.0.0.1 that plays a model provider's wire format.

Each request is answered by the next scripted :class:`Reply` (the model is
the only fake: the adapter's httpx client, sockets and HTTP are real). The
server records each request's path, headers and JSON body, and each reply it
sent (``sent``). ``check`` (optional) plays the provider's request
validation: given the request record and the replies sent so far, a string
refuses the request with HTTP 400 and that message, before any scripted
reply is used (see ``_strict.py``).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None                    # dict/list -> JSON; bytes/str sent as is
    headers: dict[str, str] = field(default_factory=dict)
    sse: list[str] | None = None        # SSE event blocks, each sent as one chunk
    cut_after: int | None = None        # with sse: drop the connection after this many blocks
    hang: bool = False                  # hold the request until the client goes away


def sse(*events: Any, named: bool = False) -> list[str]:
    """SSE blocks from ``(name, data)`` pairs (named) or data values."""
    out = []
    for e in events:
        if named:
            name, data = e
            out.append(f"event: {name}\ndata: {json.dumps(data)}\n\n")
        else:
            out.append(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n")
    return out


class WireServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.sent: list[Reply] = []
        self.check: Callable[[dict[str, Any], list[Reply]], str | None] | None = None
        self.got_request = threading.Event()
        self.client_gone = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "json": json.loads(raw) if raw else None})
                server.got_request.set()
                refusal = server.check(server.requests[-1], list(server.sent)) if server.check else None
                if refusal is not None:
                    reply = Reply(400, {"error": {"message": refusal, "type": "invalid_request_error"}})
                else:
                    reply = server.replies.pop(0) if server.replies else Reply(500, {"error": {"message": "script empty"}})
                    server.sent.append(reply)
                if reply.hang:
                    self.connection.settimeout(10)
                    try:
                        while not server.release.is_set():
                            if self.connection.recv(1) == b"":
                                break
                    except OSError:
                        pass
                    server.client_gone.set()
                    self.close_connection = True
                    return
                if reply.sse is not None:
                    self.send_response(reply.status)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    for i, block in enumerate(reply.sse):
                        if reply.cut_after is not None and i >= reply.cut_after:
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            self.close_connection = True
                            return
                        data = block.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body = reply.body
                data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
