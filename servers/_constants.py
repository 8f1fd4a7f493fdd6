"""Names and limits shared by the CLI and the servers (kept import-light: ``--help`` must be quick)."""

import os

PROFILES = ("tools", "work", "artifacts", "agents", "memory", "rag", "gateway", "all", "conformance")
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
RECEIPT_META_KEY = "dev.openfunctions/receipt"
#: How a server's file execution journal makes records durable (``serve --journal-sync``).
JOURNAL_SYNC_MODES = ("loop", "thread")


def valid_jsonrpc_id(value: object) -> bool:
    """JSON-RPC ids are strings or integers (a bool is not an integer here; a float like 1.0 is not either)."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def env_switch(name: str, default: bool) -> bool:
    """An on/off environment variable: unset gives ``default``; ``0``/``off``/``false``/``no`` turn it off,
    any other value on. One reading for every such switch (``OPENFUNCTIONS_FAST_PATH``, ...)."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "off", "false", "no")
