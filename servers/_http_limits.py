"""Defaults of the HTTP operating limits (docs/SERVERS.md, "Operating limits").

Kept apart from ``_http_guard`` so that ``--help`` can show them without importing uvicorn.
"""

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE_TIMEOUT = 5
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL = 100
DEFAULT_SESSION_IDLE_TIMEOUT = 600.0
#: Largest request head (request line and headers) a connection may send: h11's own bound, kept for httptools.
DEFAULT_MAX_HEAD_BYTES = 16 * 1024
#: Deepest JSON nesting (arrays and objects) a request body may have; deeper gets 400 before it is parsed
#: (the stdio transport's ``MAX_NESTING`` is the same number).
DEFAULT_MAX_JSON_DEPTH = 200
#: Seconds between two log lines of the same refusal kind (the refusals in between are counted, not logged).
REFUSAL_LOG_INTERVAL = 5.0

# The chat server (``openfunctions-mcp chat --serve``): one person's page, so fewer connections.
CHAT_MAX_CONNECTIONS = 100
CHAT_MAX_BODY_BYTES = 64 * 1024
